// Test harness for integration tests: real toclsd daemons and real child
// processes, each in its own temporary directory.
//
//   tocl::testing::Daemon daemon;                    // fresh state dir, not started
//   REQUIRE_OK(daemon.Start());                      // forks toclsd, waits until it answers
//   auto client = tocl::DirectoryClient::Connect(daemon.address());
//   ...
//   REQUIRE(daemon.Stop().value_or(-1) == 0);        // SIGTERM: a clean stop exits 0
//
// Every Daemon has its own mkdtemp() directory under /tmp (state, unix
// socket, log; DaemonOptions::state_dir puts the state elsewhere) and no TCP
// listener unless asked, so tests can run twice in a row and in parallel.
// The directory is removed by the destructor.
//
// Synchronisation is by polling with a deadline (WaitUntil), never by a bare
// sleep. A Daemon that goes away in a failed test (a Catch2 listener counts
// failed assertions) prints the tail of its log to stderr, and says whether
// toclsd had died on its own.
//
// Threading: a Daemon or ChildProcess belongs to one thread (the test's main
// thread: children are started with PR_SET_PDEATHSIG, so the thread that
// starts one must outlive it). The free functions are safe from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "temp_dir.h"
#include "tocl/directory_client.h"
#include "tocl/status.h"

namespace tocl::testing {

// Paths of the binaries under test, set by CMake (CliPath() is "" when the
// tocl command line is not built).
const char* ToclsdPath();
const char* EnrollWorkerPath();
const char* CliPath();

// Threads `first` .. `first + count - 1` of `process`, named
// "<name_prefix><index>", each with `attributes`: one batch to register.
std::vector<ThreadInfo> MakeThreads(Gid process, uint32_t first, uint32_t count,
                                    std::string_view name_prefix,
                                    const Attributes& attributes = {});

// Polls `predicate` every `interval` until it returns true (-> true) or the
// timeout passes (-> false, after one last try).
bool WaitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout,
               std::chrono::milliseconds interval = std::chrono::milliseconds(10));

struct SpawnOptions {
  // Where stdout and stderr go (appended). Empty: an anonymous in-memory
  // file, read with ChildProcess::Output().
  std::string output_path;
  // Give the child a pipe as stdin (closed by CloseStdin()); otherwise
  // stdin is /dev/null.
  bool pipe_stdin = false;
  // Extra environment entries "NAME=value" on top of ours.
  std::vector<std::string> env;
};

// A child process started with fork/exec. The destructor SIGKILLs and reaps
// it if it still runs. Move-only.
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

struct DaemonOptions {
  std::string listen = "none";              // --listen; "none" disables TCP
  std::string host_name;                    // --host-name, when not empty
  std::optional<int> grace_period_seconds;  // --grace-period, when set
  std::string log_level = "info";
  std::vector<std::string> extra_args;
  // --state-dir (database, state lock) when not empty: a directory the
  // caller creates and removes, e.g. on a small file system of its own. The
  // socket and the log stay in the Daemon's temporary directory. Empty: the
  // state lives in that temporary directory too.
  std::string state_dir;
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

  const std::string& state_dir() const {
    return options_.state_dir.empty() ? dir_.path() : options_.state_dir;
  }
  std::string socket_path() const { return dir_.path() + "/toclsd.sock"; }
  std::string address() const { return "unix:" + socket_path(); }
  std::string db_path() const { return state_dir() + "/directory.db"; }
  std::string log_path() const { return dir_.path() + "/toclsd.log"; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }

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

// Enroll options for a process called `name`.
EnrollOptions ProcessNamed(std::string name, Attributes attributes = {});

// The command line of tocl-enroll-worker (helpers/enroll_worker.cc): enroll
// as `name`, register `threads` threads in batches of `batch`; with `hold`,
// keep the session open until stdin closes (spawn with pipe_stdin).
std::vector<std::string> EnrollWorkerCommand(const std::string& address, const std::string& name,
                                             uint32_t threads, uint32_t batch, bool hold);
// The process gid a worker printed ("gid h1.p5"), NotFound before it did.
Result<Gid> WorkerGid(const std::string& output);

// Resident memory (VmRSS), open descriptors and threads of any process.
Result<int64_t> ProcessRssKib(pid_t pid);
Result<int> ProcessFdCount(pid_t pid);
Result<int> ProcessThreadCount(pid_t pid);

// The last `max_bytes` of a file ("" when it cannot be read).
std::string FileTail(const std::string& path, size_t max_bytes);

}  // namespace tocl::testing
