// A process whose pid this daemon verified (the kernel named it as the peer
// of a unix connection) or that it started itself, held through a pidfd:
// a signal reaches that very process or nothing, never another process that
// was given its pid after it exited.
//
// Thread-safe: const methods only, over a descriptor that does not change.
#pragma once

#include <sys/types.h>

#include "core/posix.h"
#include "tocl/status.h"

namespace tocl::directory {

// The user ids of a process, as /proc/<pid>/status has them.
struct ProcessUids {
  uid_t real = 0;
  uid_t effective = 0;
  uid_t saved = 0;
};

class ProcessHandle {
 public:
  // pidfd_open(pid). Only for a pid the kernel has just vouched for: the
  // process may have exited in between and its pid gone to another (see
  // caller.h for why that window does no harm). NotFound when there is no
  // such process.
  static Result<ProcessHandle> Open(pid_t pid);
  // A pidfd already held for `pid` (a child the daemon started, or
  // SO_PEERPIDFD of a connection).
  ProcessHandle(pid_t pid, Fd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }

  // pidfd_send_signal. FailedPrecondition when the process has exited.
  Status Signal(int signal) const;
  // The process's user ids now. Read from /proc/<pid>, then checked through
  // the pidfd that the process was still alive after the read (so the pid
  // was still its own and the ids are its). FailedPrecondition when it has
  // exited.
  Result<ProcessUids> Uids() const;

 private:
  pid_t pid_;
  Fd pidfd_;
};

}  // namespace tocl::directory
