// toclsd's configuration: built-in defaults, overridden by an optional TOML
// file, overridden by command-line flags (main.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/status.h"

namespace tocl::daemon {

struct DaemonConfig {
  std::string state_dir = "/var/lib/tocl";
  std::string socket;                     // empty: <state_dir>/toclsd.sock
  std::string listen = "127.0.0.1:7390";  // "none" disables TCP
  std::string log_level = "info";
  std::string host_name;  // empty: the machine's hostname
  // How long processes that were running when the daemon stopped have to
  // re-enroll after it starts again before they are marked exited.
  double grace_period_seconds = 10.0;
  int64_t cache_kib = 8192;  // SQLite page cache per connection
  // This host's id, 1..65535. Unset: the id recorded in the database (1 for
  // a new one). A database that recorded another id refuses to start.
  // (Until daemons form clusters, this is how hosts get distinct ids.)
  std::optional<int64_t> host_id;
  // The networks processes of this host open by default ("shm,tcp:eth0,
  // tcp:eth1", "auto"), published as the host entity's `networks` attribute.
  std::string networks = "auto";
  // --- Spawn (toclsd/spawn/) ---
  // Attributes of this host's entity, for placement by query ("gpu=1"):
  // --attribute KEY=VALUE (repeatable) or an [attributes] table.
  std::map<std::string, std::string> attributes;
  // Programs SpawnProcess may start ([spawn] allow, --spawn-allow): fnmatch
  // globs with FNM_PATHNAME, matched against the executable's real path.
  // Empty: spawning is refused.
  std::vector<std::string> spawn_allow;
  // Used only when the daemon runs as root: the user spawned programs run
  // as, and their group (empty: the user's primary group).
  std::string spawn_run_as;
  std::string spawn_run_as_group;
  // Past this many bytes a spawned program's stdout or stderr log keeps only
  // its newest bytes (the head of the file becomes a hole); 0: no cap.
  int64_t spawn_log_max_bytes = int64_t{16} << 20;
  // The group that may use the unix socket besides the daemon's user
  // (socket 0660, state directory 0710); empty: the daemon's user only.
  std::string socket_group;
  // The group whose members may signal every process of this host and read
  // every spawn log, like root (others: their own uid's processes and those
  // spawned for them); empty: root only. Not socket_group: its members are
  // the users who may use the socket at all.
  std::string admin_group;

  // --- Security (security_config.h) ---
  // A credentials directory made by `tocl keygen` (ca.pem, cert.pem,
  // key.pem, cluster.secret). Empty: none, and every TCP address must be
  // loopback.
  std::string credentials;

  // --- Cluster (toclsd/cluster/) ---
  // This daemon is the cluster's seed: it hands out host ids.
  bool seed = false;
  // Addresses of the seed ("10.0.0.1:7390"); not empty: join its cluster.
  std::vector<std::string> join;
  // The address other daemons reach this one at; empty: the bound TCP address.
  std::string advertise;
  double heartbeat_interval_seconds = 0.5;
  // A member not heard for this long is marked unreachable.
  double down_after_seconds = 3.0;
  // How long a new daemon (no recorded host id) waits for the seed.
  double join_timeout_seconds = 30.0;
  // Changes the log keeps; older ones are trimmed (a replica that fell
  // further behind gets a snapshot).
  int64_t change_log_keep = 1'000'000;

  // --- Retention (retention_sweeper.h) ---
  // How long exited processes and threads (their rows, attributes,
  // endpoints, and spawned processes' logs) are kept after they exit; 0:
  // for ever.
  double retain_exited_seconds = 3600.0;

  bool in_cluster() const { return seed || !join.empty(); }
  std::string node_key_path() const;
  std::string listen_address_path() const;

  std::string socket_path() const;
  std::string database_path() const;
  std::string lock_path() const;
  std::chrono::milliseconds grace_period() const;
  std::chrono::microseconds retain_exited() const;
};

// Reads a TOML file into `config` (keys not in the file keep their value).
// Unknown keys and wrong types are errors naming the key and line.
Status LoadConfigFile(const std::string& path, DaemonConfig& config);
Status LoadConfigText(std::string_view toml, std::string_view source_name, DaemonConfig& config);

// Checks a `networks` setting: not blank, printable ASCII, at most one
// attribute value long (the runtime parses it; the daemon only publishes it).
Status ValidateNetworks(std::string_view networks);

// Checks host attributes as client attributes are checked; `networks` is
// refused (it is the networks setting).
Status ValidateHostAttributes(const std::map<std::string, std::string>& attributes);
// Adds "KEY=VALUE" to `attributes` (a later value replaces an earlier one).
Status ParseAttributeFlag(std::string_view flag, std::map<std::string, std::string>& attributes);

// Fills derived defaults (host name) and checks values.
Status FinishConfig(DaemonConfig& config);
// The spawn and socket part of FinishConfig (spawn_config.cc): the allow
// globs, that run_as, run_as_group and socket_group exist, and, for a
// daemon running as root, that the run_as user is in socket_group (or its
// programs could not reach the socket to enroll).
Status FinishSpawnConfig(const DaemonConfig& config, bool daemon_is_root);
// The cluster part of FinishConfig: splits comma-separated join lists and
// checks the cluster settings.
Status FinishClusterConfig(DaemonConfig& config);

// The effective configuration as TOML (toclsd --print-config).
std::string ConfigToToml(const DaemonConfig& config);

}  // namespace tocl::daemon
