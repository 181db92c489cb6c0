// toclsd: the per-node tocl daemon. See the README for flags and config.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "core/logger.h"
#include "daemon.h"
#include "descriptor_limit.h"
#include "tocl/version.h"

namespace {

// Blocks SIGINT/SIGTERM in every thread (gRPC's included: call before any
// thread starts) so that the main thread can take them with sigwait.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t stop_signals = BlockStopSignals();
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ toclsd[%P] %v");
  // The library's lines (the cluster's clients, credentials) join the
  // daemon's own: one pattern, one sink, one --log-level.
  tocl::ReplaceLog(spdlog::default_logger());

  CLI::App app{"toclsd: the tocl per-node daemon (directory of hosts, processes and threads)"};
  app.set_version_flag("--version", "toclsd " TOCL_VERSION_STRING);
  std::optional<std::string> config_file, state_dir, socket, listen, log_level, host_name, networks;
  std::optional<double> grace_period;
  std::optional<int64_t> host_id;
  bool print_config = false;
  app.add_option("--config", config_file, "TOML configuration file")->check(CLI::ExistingFile);
  app.add_option("--state-dir", state_dir, "state directory (database, socket, lock)");
  app.add_option("--socket", socket, "unix socket path (default <state-dir>/toclsd.sock)");
  app.add_option("--listen", listen,
                 "TCP listen address host:port, or 'none' (default 127.0.0.1:7390)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off");
  app.add_option("--host-name", host_name, "this host's name (default: the hostname)");
  app.add_option("--grace-period", grace_period,
                 "seconds processes have to re-enroll after a restart (default 10)");
  app.add_option("--host-id", host_id,
                 "this host's id, 1..65535 (default: the recorded one, 1 for a new database)")
      ->check(CLI::Range(int64_t{1}, int64_t{65535}));
  app.add_option("--networks", networks,
                 "networks this host's processes open by default, e.g. shm,tcp:eth0,tcp:eth1 "
                 "(default auto)");
  // Security (security_config.h).
  std::optional<std::string> credentials;
  app.add_option("--credentials", credentials,
                 "DIR: this host's cluster credentials (from `tocl keygen`): gRPC over TCP "
                 "becomes mutual TLS. Without: every TCP address must be loopback");
  // Cluster (toclsd/cluster/).
  bool seed = false;
  std::vector<std::string> join;
  std::optional<std::string> advertise;
  std::optional<double> heartbeat_interval, down_after, join_timeout;
  std::optional<int64_t> change_log_keep;
  app.add_flag("--seed", seed, "start a cluster: this daemon is its seed and hands out host ids");
  app.add_option("--join", join,
                 "join the cluster of the seed at ADDR[,ADDR...] (repeatable: its addresses)");
  app.add_option("--advertise", advertise,
                 "the address other daemons reach this one at (default: the TCP listen address)");
  app.add_option("--heartbeat-interval", heartbeat_interval,
                 "seconds between heartbeats to each member (default 0.5)");
  app.add_option("--down-after", down_after,
                 "seconds without news before a member is marked unreachable (default 3)");
  app.add_option("--join-timeout", join_timeout,
                 "seconds a new daemon waits for the seed before giving up (default 30)");
  app.add_option("--change-log-keep", change_log_keep,
                 "changes the log keeps; replicas further behind get a snapshot (default 1000000)");
  // Retention (retention_sweeper.h).
  std::optional<double> retain_exited;
  app.add_option("--retain-exited", retain_exited,
                 "seconds exited processes and threads (and spawned processes' logs) are kept "
                 "after they exit; 0: for ever (default 3600)");
  // Spawn (toclsd/spawn/).
  std::vector<std::string> attribute_flags;
  app.add_option("--attribute", attribute_flags,
                 "KEY=VALUE: an attribute of this host's entity, for spawn placement "
                 "(e.g. gpu=1; repeatable; added to the config file's [attributes])");
  std::vector<std::string> spawn_allow;
  std::optional<std::string> spawn_run_as, spawn_run_as_group, socket_group, admin_group;
  app.add_option("--spawn-allow", spawn_allow,
                 "GLOB: a program spawns may start, matched against its real path with "
                 "fnmatch (a '*' stays within one directory; repeatable; replaces the config "
                 "file's [spawn] allow). None: spawning is refused");
  app.add_option("--spawn-run-as", spawn_run_as,
                 "the user spawned programs run as when toclsd runs as root");
  app.add_option("--spawn-run-as-group", spawn_run_as_group,
                 "their group (default: the user's primary group)");
  std::optional<int64_t> spawn_log_max_bytes;
  app.add_option("--spawn-log-max-bytes", spawn_log_max_bytes,
                 "bytes a spawned program's stdout or stderr log keeps: past it the oldest "
                 "output is dropped; 0: no cap (default 16777216)");
  app.add_option("--socket-group", socket_group,
                 "a group that may use the unix socket too (socket 0660, state directory 0710)");
  app.add_option("--admin-group", admin_group,
                 "a group whose members may signal every process of this host and read every "
                 "spawn log, like root (others: their own uid's processes and those spawned for "
                 "them)");
  app.add_flag("--print-config", print_config, "print the effective configuration and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }

  tocl::daemon::DaemonConfig config;
  if (config_file) {
    tocl::Status loaded = tocl::daemon::LoadConfigFile(*config_file, config);
    if (!loaded.ok()) {
      std::fprintf(stderr, "toclsd: %s\n", loaded.message().c_str());
      return 2;
    }
  }
  if (state_dir) config.state_dir = *state_dir;
  if (socket) config.socket = *socket;
  if (listen) config.listen = *listen;
  if (log_level) config.log_level = *log_level;
  if (host_name) config.host_name = *host_name;
  if (grace_period) config.grace_period_seconds = *grace_period;
  if (host_id) config.host_id = *host_id;
  if (networks) config.networks = *networks;
  if (credentials) config.credentials = *credentials;
  if (seed) config.seed = true;
  if (!join.empty()) config.join = join;
  if (advertise) config.advertise = *advertise;
  if (heartbeat_interval) config.heartbeat_interval_seconds = *heartbeat_interval;
  if (down_after) config.down_after_seconds = *down_after;
  if (join_timeout) config.join_timeout_seconds = *join_timeout;
  if (change_log_keep) config.change_log_keep = *change_log_keep;
  if (retain_exited) config.retain_exited_seconds = *retain_exited;
  if (!spawn_allow.empty()) config.spawn_allow = spawn_allow;
  if (spawn_run_as) config.spawn_run_as = *spawn_run_as;
  if (spawn_run_as_group) config.spawn_run_as_group = *spawn_run_as_group;
  if (spawn_log_max_bytes) config.spawn_log_max_bytes = *spawn_log_max_bytes;
  if (socket_group) config.socket_group = *socket_group;
  if (admin_group) config.admin_group = *admin_group;
  for (const std::string& flag : attribute_flags) {
    tocl::Status parsed = tocl::daemon::ParseAttributeFlag(flag, config.attributes);
    if (!parsed.ok()) {
      std::fprintf(stderr, "toclsd: %s\n", parsed.message().c_str());
      return 2;
    }
  }
  tocl::Status finished = tocl::daemon::FinishConfig(config);
  if (!finished.ok()) {
    std::fprintf(stderr, "toclsd: %s\n", finished.message().c_str());
    return 2;
  }
  if (print_config) {
    std::fputs(tocl::daemon::ConfigToToml(config).c_str(), stdout);
    return 0;
  }

  // After FinishConfig, which set the log level.
  tocl::Result<rlimit> descriptors = tocl::daemon::RaiseDescriptorLimit();
  if (descriptors.ok()) {
    spdlog::debug("file descriptors: soft limit {}, hard limit {}", descriptors->rlim_cur,
                  descriptors->rlim_max);
  } else {
    spdlog::warn("the file descriptor limit stays as it was: {}", descriptors.status().ToString());
  }

  auto daemon = tocl::daemon::Daemon::Start(config);
  if (!daemon.ok()) {
    spdlog::critical("cannot start: {}", daemon.status().ToString());
    std::fprintf(stderr, "toclsd: %s\n", daemon.status().ToString().c_str());
    return 1;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("received {}", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  (*daemon)->Shutdown();
  return 0;
}
