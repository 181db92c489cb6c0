// A running tocl-spawn-worker (spawn_worker.cc) for the spawn-thread and
// notification tests: started with a stdin pipe, its process gid read from
// what it printed. Closing stdin (Finish) shuts it down.
//
// Threading: like ChildProcess, it belongs to the thread that started it.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <vector>

#include "child_process.h"
#include "test_daemon.h"
#include "tocl/gid.h"

namespace tocl::testing {

class SpawnWorkerProcess {
 public:
  static Result<SpawnWorkerProcess> Start(const Daemon& daemon, const std::string& name) {
    SpawnOptions spawn;
    spawn.pipe_stdin = true;
    TOCL_ASSIGN_OR_RETURN(
        ChildProcess child,
        ChildProcess::Spawn({TOCL_SPAWN_WORKER_PATH, "--daemon", daemon.address(), "--name", name},
                            spawn));
    SpawnWorkerProcess worker(std::move(child));
    if (!WaitUntil([&] { return worker.HasLine("ready") || !worker.child_.running(); },
                   std::chrono::seconds(30))) {
      return DeadlineExceeded("tocl-spawn-worker did not get ready: " + worker.Output());
    }
    const std::string output = worker.Output();
    const size_t at = output.find("process ");
    if (!worker.HasLine("ready") || at == std::string::npos) {
      return Internal("tocl-spawn-worker did not start: " + output);
    }
    const size_t end = output.find('\n', at);
    TOCL_ASSIGN_OR_RETURN(worker.process_, Gid::Parse(output.substr(at + 8, end - at - 8)));
    return worker;
  }

  Gid process() const { return process_; }
  ChildProcess& child() { return child_; }
  std::string Output() const { return child_.Output(); }
  bool HasLine(const std::string& line) const {
    const std::string output = Output();
    return output.starts_with(line + "\n") || output.find("\n" + line + "\n") != std::string::npos;
  }

  // Closes stdin and waits for the worker to exit: its exit code.
  Result<int> Finish(std::chrono::milliseconds timeout) {
    child_.CloseStdin();
    return child_.Wait(timeout);
  }

 private:
  explicit SpawnWorkerProcess(ChildProcess child) : child_(std::move(child)) {}
  ChildProcess child_;
  Gid process_;
};

}  // namespace tocl::testing
