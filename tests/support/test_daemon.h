// A real toclsd on its own temporary state directory, for tests and
// benchmarks (no Catch2 here).
//
//   tocl::testing::Daemon daemon;                    // fresh state dir, not started
//   REQUIRE_OK(daemon.Start());                      // forks toclsd, waits until it answers
//   auto client = tocl::DirectoryClient::Connect(daemon.address());
//   ...
//   REQUIRE(daemon.Stop().value_or(-1) == 0);        // SIGTERM: a clean stop exits 0
//
// Every Daemon has its own mkdtemp() directory under /tmp (state, unix
// socket, log; DaemonOptions::state_dir puts the state elsewhere), no TCP
// listener unless asked, and `networks = "shm,tcp:127.0.0.1/8"` unless
// asked otherwise (processes started by a test never open listeners on the
// machine's real interfaces), and may spawn only the build's test programs
// and two system ones (TestSpawnAllow), so tests can run twice in a row and
// in parallel. The directory is removed by the destructor. A Daemon that goes
// away in a failed test (failure_check.h) prints the tail of its log to
// stderr and says whether toclsd had died on its own.
//
// Threading: a Daemon belongs to one thread (see ChildProcess).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "child_process.h"
#include "temp_dir.h"
#include "tocl/directory_client.h"
#include "tocl/status.h"

namespace tocl::testing {

// The toclsd binary of this build, set by CMake.
const char* ToclsdPath();

// What Daemon gives `--networks` unless told otherwise: shm and tcp on
// loopback only.
inline constexpr const char* kLoopbackNetworks = "shm,tcp:127.0.0.1/8";

// What Daemon gives `--spawn-allow` unless told otherwise: the test programs
// of this build (tests/integration/*, tests/netns/helpers/*, by real path)
// and the system programs the spawn tests run (/usr/bin/sleep, false).
std::vector<std::string> TestSpawnAllow();

struct DaemonOptions {
  std::string toclsd_path;                   // empty: ToclsdPath()
  std::string listen = "none";               // --listen; "none" disables TCP
  std::string host_name;                     // --host-name, when not empty
  std::optional<int> host_id;                // --host-id, when set
  std::string networks = kLoopbackNetworks;  // --networks; empty: toclsd's own default
  std::optional<int> grace_period_seconds;   // --grace-period, when set
  std::string log_level = "info";
  // One --spawn-allow each; empty: spawning is refused.
  std::vector<std::string> spawn_allow = TestSpawnAllow();
  std::vector<std::string> extra_args;
  // Put before toclsd's command line, e.g. {"/usr/sbin/ip", "netns", "exec",
  // "NS"} to run it in a network namespace (which must exec toclsd itself,
  // not fork it: signals go to the child's pid).
  std::vector<std::string> command_prefix;
  // --state-dir (database, state lock) when not empty: a directory the
  // caller creates and removes, e.g. on a small file system of its own. The
  // socket and the log stay in the Daemon's temporary directory. Empty: the
  // state lives in that temporary directory too.
  std::string state_dir;
  // Cluster: --seed, one --join per address, and the timing flags when set
  // (tests use short ones: --heartbeat-interval 0.2 --down-after 1). A
  // clustered daemon needs a TCP listener: listen = "127.0.0.1:0".
  bool seed = false;
  std::vector<std::string> join;
  std::optional<double> heartbeat_interval_seconds;
  std::optional<double> down_after_seconds;
  // How long Start() waits for the daemon to answer Ping.
  std::chrono::milliseconds ready_timeout = std::chrono::seconds(10);
};

// One toclsd on its own temporary state directory.
class Daemon {
 public:
  explicit Daemon(DaemonOptions options = {});
  ~Daemon();  // SIGKILLs a running daemon, removes the directory
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Starts toclsd and waits (ready_timeout) until it answers Ping. On
  // failure the message holds the tail of the daemon's log. Also used to
  // start again on the same state directory after Stop() or Kill().
  Status Start();
  Status Restart() { return Start(); }
  // SIGTERM and wait (10 s): the exit status (0 after a clean stop).
  Result<int> Stop();
  // SIGKILL and reap: a crash.
  Status Kill();
  bool running() const { return process_ && process_->running(); }

  // The command line Start() runs; tests start rival instances with it.
  std::vector<std::string> CommandLine() const;
  const DaemonOptions& options() const { return options_; }

  const std::string& state_dir() const {
    return options_.state_dir.empty() ? dir_.path() : options_.state_dir;
  }
  std::string socket_path() const { return dir_.path() + "/toclsd.sock"; }
  std::string address() const { return "unix:" + socket_path(); }
  std::string db_path() const { return state_dir() + "/directory.db"; }
  std::string log_path() const { return dir_.path() + "/toclsd.log"; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  // The TCP address the running daemon listens on, with the port it chose
  // for "HOST:0" (read from <state_dir>/listen-address, which toclsd writes
  // before it answers); NotFound when it has no TCP listener.
  Result<std::string> tcp_address() const;
  // Sends `signal` (SIGSTOP, SIGCONT, ...) to the running daemon.
  Status Signal(int signal);

  // The last `max_bytes` of the daemon's log (all of its runs).
  std::string LogTail(size_t max_bytes = 4000) const;

  // A new client of this daemon (Connect with a 5 s timeout).
  Result<std::unique_ptr<DirectoryClient>> Connect() const;

  // Resident memory, open file descriptors and threads, from /proc/<pid>.
  Result<int64_t> rss_kib() const;
  Result<int> fd_count() const;
  Result<int> thread_count() const;

 private:
  DaemonOptions options_;
  TempDir dir_;
  std::optional<ChildProcess> process_;
};

}  // namespace tocl::testing
