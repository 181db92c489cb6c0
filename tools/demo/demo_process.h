// The child side of tocl-demo: one application process with its threads.
//
// Runs in a child forked by the demo, before the parent has made any gRPC
// object (gRPC state does not survive fork()). It connects its own
// DirectoryClient, enrolls, registers its threads, says "ready <gid>" on
// `ready`, waits for any line (or end of file) on `go`, then leaves the
// directory cleanly. A failure is reported as "error <message>" on `ready`.
#pragma once

#include <string>
#include <vector>

#include "pipe.h"
#include "tocl/entity.h"

namespace tocl::demo {

struct DemoThread {
  std::string name;
  Attributes attributes;
};

struct DemoProcess {
  std::string name;
  Attributes attributes;
  std::vector<DemoThread> threads;  // numbered t1, t2, ... in this order
};

// Returns the child's exit status: 0 after a clean goodbye, 1 otherwise.
int RunDemoProcess(const std::string& daemon, const DemoProcess& process, const Fd& ready,
                   const Fd& go);

}  // namespace tocl::demo
