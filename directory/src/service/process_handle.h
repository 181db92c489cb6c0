// A process whose pid this daemon verified (the kernel named it as the peer
// of a unix connection) or that it started itself, held through a pidfd:
// a signal reaches that very process or nothing, never another process that
// was given its pid after it exited.
//
// What it reads of /proc/<pid> (uids, namespace pids, start time) is that
// process's: each read is followed by a check through the pidfd that the
// process was still alive, so the pid was still its own (a pid is not
// reused before its process is reaped).
//
// Thread-safe: const methods only, over a descriptor that does not change.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "core/posix.h"
#include "service/proc_files.h"
#include "tocl/status.h"

namespace tocl::directory {

class ProcessHandle {
 public:
  // pidfd_open(pid). The process may have exited before and its pid gone
  // to another: only for a pid just vouched for, and checked after
  // (PinProcessStartedBy, caller.h). NotFound when there is no such
  // process; ResourceExhausted when the daemon has no descriptor left.
  static Result<ProcessHandle> Open(pid_t pid);
  // A pidfd already held for `pid` (a child the daemon started, or
  // SO_PEERPIDFD of a connection).
  ProcessHandle(pid_t pid, Fd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }

  // pidfd_send_signal. FailedPrecondition when the process has exited.
  Status Signal(int signal) const;
  // Whether the process is alive now (signal 0 through the pidfd; a process
  // the daemon may not signal is alive too). FailedPrecondition when it has
  // exited.
  Status CheckAlive() const;

  // The process's user ids now. FailedPrecondition when it has exited.
  Result<ProcessUids> Uids() const;
  // Its pid in each pid namespace from the daemon's /proc down to its own
  // (the last: what getpid() returns in it). FailedPrecondition when it
  // has exited; NotFound when the kernel does not say (before Linux 4.1).
  Result<std::vector<pid_t>> NamespacePids() const;
  // When it started, in clock ticks since boot (/proc/<pid>/stat).
  // FailedPrecondition when it has exited.
  Result<uint64_t> StartTicks() const;

 private:
  // /proc/<pid>/<name> of this process: read, then CheckAlive.
  Result<std::string> ReadOwnProcFile(const char* name) const;

  pid_t pid_;
  Fd pidfd_;
};

}  // namespace tocl::directory
