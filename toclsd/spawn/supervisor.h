// Reaps the children this daemon spawned. One thread sleeps in poll(2) on
// the children's pidfds and an eventfd (a new child, or stop): no polling
// loop, no SIGCHLD handler, and a child is reaped the moment it exits.
//
// Children outlive the supervisor: those not reaped when it stops keep
// running (after a daemon restart they are ordinary enrolled processes).
//
// Threading: Watch may be called from any thread; `on_reaped` runs on the
// supervisor's thread, one child at a time.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/posix.h"
#include "store/rows.h"
#include "tocl/status.h"

namespace tocl::daemon::spawn {

// How a reaped child ended, from its wait(2) status.
directory::ExitStatus ExitStatusOf(int wait_status);
// "exited with status 3", "killed by signal 9 (SIGKILL)".
std::string DescribeExit(const directory::ExitStatus& status);

class Supervisor {
 public:
  // Runs on the supervisor's thread for every child it reaps.
  using OnReaped = std::function<void(pid_t pid, int wait_status)>;

  static Result<std::unique_ptr<Supervisor>> Start(OnReaped on_reaped);
  ~Supervisor();  // stops the thread; children not reaped yet run on
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Reaps `pid` (a child of this process) when it exits; `pidfd` is its
  // pidfd_open(2) descriptor, taken over. A child that has already exited
  // is reaped at once.
  void Watch(pid_t pid, Fd pidfd);

 private:
  Supervisor(Fd wake, OnReaped on_reaped);
  void Loop();
  void Wake();

  Fd wake_;  // eventfd: a new child or stop
  const OnReaped on_reaped_;

  std::mutex mu_;
  std::vector<std::pair<pid_t, Fd>> added_;  // guarded by mu_: not yet taken by the thread
  bool stopping_ = false;                    // guarded by mu_

  std::thread thread_;  // last: starts after what it uses exists
};

}  // namespace tocl::daemon::spawn
