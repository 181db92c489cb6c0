// A private toclsd for one benchmark run.
//
// Start() makes a fresh state directory (mkdtemp), runs
// `toclsd --state-dir DIR --listen none --log-level warn` (plus any extra
// arguments, e.g. `--spawn-allow GLOB`), its stdout and stderr on our
// stderr, and returns once the daemon answers Ping on its unix socket. The destructor stops it
// (SIGTERM, then SIGKILL after a deadline) and removes the directory.
//
// Errors: Unavailable when the daemon does not answer before the deadline
// or exits early (its stderr goes to ours, so its own message is visible).
// Threading: one owner; the accessors may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tocl/status.h"

namespace tocl::bench {

class DaemonProcess {
 public:
  static Result<std::unique_ptr<DaemonProcess>> Start(
      const std::string& toclsd_path, std::chrono::milliseconds deadline = std::chrono::seconds(15),
      const std::vector<std::string>& extra_args = {});

  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // SIGTERM, and SIGKILL if it has not exited within `deadline`. Idempotent.
  Status Stop(std::chrono::milliseconds deadline = std::chrono::seconds(10));

  pid_t pid() const { return pid_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& address() const { return address_; }  // "unix:DIR/toclsd.sock"
  std::string database_path() const { return state_dir_ + "/directory.db"; }

  // VmRSS and VmHWM (peak) of the daemon, from /proc/PID/status.
  Result<uint64_t> ResidentBytes() const;
  Result<uint64_t> PeakResidentBytes() const;

 private:
  DaemonProcess(std::string state_dir, pid_t pid);
  Status WaitUntilServing(std::chrono::steady_clock::time_point deadline);

  std::string state_dir_;
  std::string address_;
  pid_t pid_ = -1;  // -1 once reaped
};

// The value of one "Key:   123 kB" line of /proc/PID/status, in bytes.
Result<uint64_t> ProcStatusBytes(pid_t pid, const std::string& key);

// Size of a SQLite database file plus its -wal file (0 for a missing one).
uint64_t DatabaseFileBytes(const std::string& path);

}  // namespace tocl::bench
