// Child processes for tests and benchmarks: start a program, wait for it
// with a deadline, read what it printed, kill it. No Catch2 here (tocl-bench
// links it too).
//
//   auto child = ChildProcess::Spawn({"/bin/sleep", "10"});
//   if (!child.ok()) return child.status();
//   (void)child->Wait(std::chrono::seconds(1));  // DeadlineExceeded: still running
//   // the destructor SIGKILLs and reaps it
//
// Synchronisation is by polling with a deadline (WaitUntil), never by a bare
// sleep.
//
// Threading: a ChildProcess belongs to one thread (children are started with
// PR_SET_PDEATHSIG, so the thread that starts one must outlive it). The free
// functions are safe from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tocl/status.h"

namespace tocl::testing {

// Polls `predicate` every `interval` until it returns true (-> true) or the
// timeout passes (-> false, after one last try).
bool WaitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout,
               std::chrono::milliseconds interval = std::chrono::milliseconds(10));

// Whether /proc says `pid` is stopped (SIGSTOP takes effect a moment after
// kill returns: wait for this).
bool Stopped(pid_t pid);

struct SpawnOptions {
  // Where stdout and stderr go (appended). Empty: an anonymous in-memory
  // file, read with ChildProcess::Output().
  std::string output_path;
  // Give the child a pipe as stdin (closed by CloseStdin()); otherwise
  // stdin is /dev/null.
  bool pipe_stdin = false;
  // Environment entries "NAME=value" on top of ours; an entry replaces an
  // inherited variable of the same name.
  std::vector<std::string> env;
};

// A child process started with fork/exec (argv[0] is a path: no PATH
// search). The destructor SIGKILLs and reaps it if it still runs. Move-only.
class ChildProcess {
 public:
  static Result<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                    const SpawnOptions& options = {});

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Reaps the child if it has exited (non-blocking).
  bool running() const { return pid_ > 0 && !Exited(); }

  // Sends `signal` if the child still runs.
  Status Signal(int signal);
  // Waits for the child to exit: its exit code, or 128 + the signal that
  // killed it. DeadlineExceeded (the child keeps running) after `timeout`.
  Result<int> Wait(std::chrono::milliseconds timeout);
  // SIGKILL and reap; the exit status (137).
  Result<int> Kill();
  // Non-blocking: reaps the child if it has exited; true when it has.
  bool Exited() const;
  // Closes the write end of the child's stdin pipe (the child reads EOF).
  void CloseStdin();
  // What the child wrote to stdout and stderr so far (either kind of output).
  std::string Output() const;

 private:
  ChildProcess() = default;
  void Reset();

  pid_t pid_ = -1;
  mutable std::optional<int> exit_status_;  // set once reaped
  int stdin_fd_ = -1;                       // write end of the child's stdin, or -1
  int output_fd_ = -1;                      // what the child's stdout/stderr point to, or -1
};

struct ProgramResult {
  int exit_code = -1;      // exit code, or 128 + signal
  std::string output;      // stdout and stderr, interleaved
  bool timed_out = false;  // killed after the timeout
};

// Runs a program to completion and captures its output. A program still
// running after `timeout` is killed (timed_out = true). Error only when the
// program cannot be started.
Result<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                 const std::vector<std::string>& env = {});

// "exit code N" or "killed by signal N" for a status as Wait returns it.
std::string ExitStatusText(int status);

// The absolute path of `program` found in $PATH and the sbin directories
// (`ip` and `tc` live in /usr/sbin, which a non-root PATH may lack);
// NotFound when there is none.
Result<std::string> FindProgram(const std::string& program);

// Resident memory (VmRSS), open descriptors and threads of any process.
Result<int64_t> ProcessRssKib(pid_t pid);
Result<int> ProcessFdCount(pid_t pid);
Result<int> ProcessThreadCount(pid_t pid);

// The value of `name` in the environment of process `pid` (its
// /proc/<pid>/environ), "" when it is absent.
std::string EnvironmentOf(pid_t pid, const std::string& name);

// The last `max_bytes` of a file ("" when it cannot be read).
std::string FileTail(const std::string& path, size_t max_bytes);

}  // namespace tocl::testing
