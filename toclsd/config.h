// toclsd's configuration: built-in defaults, overridden by an optional TOML
// file, overridden by command-line flags (main.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

  std::string socket_path() const;
  std::string database_path() const;
  std::string lock_path() const;
  std::chrono::milliseconds grace_period() const;
};

// Reads a TOML file into `config` (keys not in the file keep their value).
// Unknown keys and wrong types are errors naming the key and line.
Status LoadConfigFile(const std::string& path, DaemonConfig& config);
Status LoadConfigText(std::string_view toml, std::string_view source_name, DaemonConfig& config);

// Checks a `networks` setting: not blank, printable ASCII, at most one
// attribute value long (the runtime parses it; the daemon only publishes it).
Status ValidateNetworks(std::string_view networks);

// Fills derived defaults (host name) and checks values.
Status FinishConfig(DaemonConfig& config);

// The effective configuration as TOML (toclsd --print-config).
std::string ConfigToToml(const DaemonConfig& config);

}  // namespace tocl::daemon
