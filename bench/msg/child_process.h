// A program the coordinator of `tocl-bench msg --peers` runs beside its own
// peers (ucx_perftest, mpiexec), with its stdout and stderr captured.
//
//   TOCL_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn({"ucx_perftest", "-h"}, {}));
//   TOCL_ASSIGN_OR_RETURN(ChildProcess::Output out, child.Finish(std::chrono::seconds(60)));
//
// Move-only; a child that was never finished is killed (SIGKILL) and reaped
// when its handle goes. Not thread-safe: one thread owns a child.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "tocl/status.h"

namespace tocl::bench::msg {

class ChildProcess {
 public:
  struct Output {
    int exit_code = -1;  // -1: ended by a signal
    std::string text;    // stdout and stderr, interleaved as written
  };

  // Starts argv[0] (looked up in PATH) with `env` ("NAME=value") added to
  // this process's environment.
  static Result<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // Reads its output until it closes it, and reaps it. A child still
  // running after `timeout` is killed: DeadlineExceeded, with what it wrote.
  Result<Output> Finish(std::chrono::milliseconds timeout);

  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}
  void Kill();

  pid_t pid_ = -1;
  int output_fd_ = -1;  // the read end of its stdout and stderr
};

// Whether `program` is an executable file in one of PATH's folders (or,
// with a '/', at that path).
bool ProgramInPath(const std::string& program);

}  // namespace tocl::bench::msg
