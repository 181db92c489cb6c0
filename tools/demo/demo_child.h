// The parent's handle on one forked demo process (demo_process.h): its pid
// and the parent's ends of the two pipes between them.
//
//   DemoChildren children;
//   TOCL_ASSIGN_OR_RETURN(auto child, DemoChild::Start(daemon, process, children));
//   TOCL_ASSIGN_OR_RETURN(Gid gid, child->WaitReady(deadline));
//   TOCL_RETURN_IF_ERROR(child->Stop(deadline));  // tells it to leave, reaps it
//
// Destroying a child that still runs tells it to leave, gives it a few
// seconds, then kills it; it is always reaped. Used by one thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "demo_process.h"
#include "pipe.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::demo {

class DemoChild;
using DemoChildren = std::vector<std::unique_ptr<DemoChild>>;

class DemoChild {
 public:
  // Forks a child that runs RunDemoProcess(daemon, process, ...). `started`
  // are the children started so far: the new child closes its copies of
  // their pipe ends. Call before this process makes any gRPC object.
  static Result<std::unique_ptr<DemoChild>> Start(const std::string& daemon,
                                                  const DemoProcess& process,
                                                  DemoChildren& started);

  ~DemoChild();
  DemoChild(const DemoChild&) = delete;
  DemoChild& operator=(const DemoChild&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // The child's process id once it says it is ready; its error if it failed.
  Result<Gid> WaitReady(Deadline deadline);

  // Tells the child to leave and waits until it has exited with status 0.
  Status Stop(Deadline deadline);

 private:
  DemoChild(pid_t pid, std::string name, Fd ready, Fd go);
  // In a child forked later: drops the inherited copies of this child's
  // pipe ends without touching the process itself.
  void Forget();

  pid_t pid_;  // -1 once reaped (or forgotten)
  std::string name_;
  Fd ready_;  // the child writes "ready <gid>" or "error <message>"
  Fd go_;     // the parent writes "exit"; end of file means the same
};

}  // namespace tocl::demo
