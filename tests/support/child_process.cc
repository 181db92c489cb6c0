#include "child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

extern char** environ;

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;

Status Errno(std::string_view what, int error = errno) {
  return Internal(fmt::format("{}: {}", what, std::strerror(error)));
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The name of an environment entry "NAME=value".
std::string_view EnvName(std::string_view entry) {
  return entry.substr(0, entry.find('='));
}

}  // namespace

bool Stopped(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t after_name = text.rfind(')');
  return after_name != std::string::npos && after_name + 2 < text.size() &&
         text[after_name + 2] == 'T';
}

bool WaitUntil(const std::function<bool()>& predicate, milliseconds timeout,
               milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (predicate()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return predicate();
    std::this_thread::sleep_for(interval);
  }
}

// --- ChildProcess ----------------------------------------------------------

// --- ChildProcess ----------------------------------------------------------

Result<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                         const SpawnOptions& options) {
  if (argv.empty()) return InvalidArgument("empty command line");
  // Everything the child needs is prepared before fork(): between fork and
  // exec a child of a multi-threaded process may only make async-signal-safe
  // calls.
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    bool replaced = false;
    for (const std::string& ours : options.env) replaced |= EnvName(ours) == EnvName(*entry);
    if (!replaced) envp.push_back(*entry);
  }
  for (const std::string& entry : options.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  ChildProcess child;
  if (options.output_path.empty()) {
    child.output_fd_ = ::memfd_create("child-output", MFD_CLOEXEC);
  } else {
    child.output_fd_ =
        ::open(options.output_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  if (child.output_fd_ < 0) return Errno("open output of " + argv[0]);

  int stdin_fds[2] = {-1, -1};
  if (options.pipe_stdin) {
    if (::pipe2(stdin_fds, O_CLOEXEC) != 0) return Errno("pipe");
  } else {
    stdin_fds[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (stdin_fds[0] < 0) return Errno("open /dev/null");
  }
  // exec failures come back through this pipe; it closes on a good exec.
  int exec_error[2];
  if (::pipe2(exec_error, O_CLOEXEC) != 0) {
    CloseFd(stdin_fds[0]);
    CloseFd(stdin_fds[1]);
    return Errno("pipe");
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    int error = errno;
    for (int fd : {stdin_fds[0], stdin_fds[1], exec_error[0], exec_error[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return Errno("fork", error);
  }
  if (pid == 0) {
    // The child dies with the test: a crashed test leaves no daemon behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    struct sigaction default_action = {};
    default_action.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGCHLD}) ::sigaction(sig, &default_action, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setpgid(0, 0);  // signals to the test's terminal group do not reach it
    if (::dup2(stdin_fds[0], 0) < 0 || ::dup2(child.output_fd_, 1) < 0 ||
        ::dup2(child.output_fd_, 2) < 0) {
      int error = errno;
      (void)!::write(exec_error[1], &error, sizeof error);
      ::_exit(127);
    }
    // Leave no descriptor of ours (gRPC sockets, other children's pipes)
    // open in the child; exec_error[1] is close-on-exec and must stay.
    const unsigned keep = static_cast<unsigned>(exec_error[1]);
    if ((keep > 3 && ::syscall(SYS_close_range, 3u, keep - 1, 0u) != 0) ||
        ::syscall(SYS_close_range, keep + 1, ~0u, 0u) != 0) {
      for (unsigned fd = 3; fd < 4096; ++fd) {
        if (fd != keep) ::close(static_cast<int>(fd));
      }
    }
    ::execve(args[0], args.data(), envp.data());
    int error = errno;
    (void)!::write(exec_error[1], &error, sizeof error);
    ::_exit(127);
  }

  child.pid_ = pid;
  ::close(exec_error[1]);
  CloseFd(stdin_fds[0]);
  child.stdin_fd_ = stdin_fds[1];
  int error = 0;
  ssize_t n;
  do {
    n = ::read(exec_error[0], &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  ::close(exec_error[0]);
  if (n == sizeof error) {
    (void)child.Wait(milliseconds(5000));
    return Errno("exec " + argv[0], error);
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept {
  *this = std::move(other);
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Reset();
    pid_ = std::exchange(other.pid_, -1);
    exit_status_ = std::exchange(other.exit_status_, std::nullopt);
    stdin_fd_ = std::exchange(other.stdin_fd_, -1);
    output_fd_ = std::exchange(other.output_fd_, -1);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  Reset();
}

void ChildProcess::Reset() {
  if (running()) (void)Kill();
  CloseFd(stdin_fd_);
  CloseFd(output_fd_);
  pid_ = -1;
  exit_status_.reset();
}

Status ChildProcess::Signal(int signal) {
  if (!running()) return FailedPrecondition("the child is not running");
  if (::kill(pid_, signal) != 0) return Errno(fmt::format("kill {}", pid_));
  return Status::Ok();
}

bool ChildProcess::Exited() const {
  if (pid_ <= 0) return true;
  if (exit_status_) return true;
  int status = 0;
  pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == pid_) {
    exit_status_ = DecodeWaitStatus(status);
    return true;
  }
  return false;
}

Result<int> ChildProcess::Wait(milliseconds timeout) {
  if (pid_ <= 0) return FailedPrecondition("no child");
  if (!WaitUntil([&] { return Exited(); }, timeout, milliseconds(2))) {
    return DeadlineExceeded(
        fmt::format("process {} still runs after {} ms", pid_, timeout.count()));
  }
  return *exit_status_;
}

Result<int> ChildProcess::Kill() {
  if (!running()) {
    if (exit_status_) return *exit_status_;
    return FailedPrecondition("no child");
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  pid_t done;
  do {
    done = ::waitpid(pid_, &status, 0);
  } while (done < 0 && errno == EINTR);
  if (done != pid_) return Errno(fmt::format("waitpid {}", pid_));
  exit_status_ = DecodeWaitStatus(status);
  return *exit_status_;
}

void ChildProcess::CloseStdin() {
  CloseFd(stdin_fd_);
}

std::string ChildProcess::Output() const {
  std::string output;
  if (output_fd_ < 0) return output;
  char buffer[8192];
  off_t offset = 0;
  for (;;) {
    ssize_t n = ::pread(output_fd_, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  return output;
}

Result<ProgramResult> RunProgram(const std::vector<std::string>& argv, milliseconds timeout,
                                 const std::vector<std::string>& env) {
  SpawnOptions options;
  options.env = env;
  TOCL_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn(argv, options));
  ProgramResult result;
  Result<int> code = child.Wait(timeout);
  if (!code.ok()) {
    result.timed_out = true;
    code = child.Kill();
  }
  result.exit_code = code.value_or(-1);
  result.output = child.Output();
  return result;
}

std::string ExitStatusText(int status) {
  return status >= 128 ? fmt::format("killed by signal {}", status - 128)
                       : fmt::format("exit code {}", status);
}

Result<std::string> FindProgram(const std::string& program) {
  std::string path;
  if (const char* env = std::getenv("PATH")) path = env;
  path += ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return NotFound(
      fmt::format("{} is not installed (not in $PATH or the sbin directories)", program));
}

// --- /proc -----------------------------------------------------------------

namespace {

// The number after "<field>:" in /proc/<pid>/status.
Result<int64_t> ProcStatusField(pid_t pid, std::string_view field) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  if (!status) return NotFound(fmt::format("no process {}", pid));
  std::string line;
  while (std::getline(status, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      std::istringstream fields(line.substr(field.size() + 1));
      int64_t value = 0;
      fields >> value;
      return value;
    }
  }
  return NotFound(fmt::format("no {} for process {}", field, pid));
}

}  // namespace

Result<int64_t> ProcessRssKib(pid_t pid) {
  return ProcStatusField(pid, "VmRSS");
}

Result<int> ProcessThreadCount(pid_t pid) {
  TOCL_ASSIGN_OR_RETURN(int64_t threads, ProcStatusField(pid, "Threads"));
  return static_cast<int>(threads);
}

Result<int> ProcessFdCount(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator it(fmt::format("/proc/{}/fd", pid), error);
  if (error) return NotFound(fmt::format("/proc/{}/fd: {}", pid, error.message()));
  int count = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(error)) {
    if (error) return Internal(error.message());
    ++count;
  }
  return count;
}

std::string EnvironmentOf(pid_t pid, const std::string& name) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/environ");
  std::string entry;
  while (std::getline(file, entry, '\0')) {
    if (entry.starts_with(name + "=")) return entry.substr(name.size() + 1);
  }
  return "";
}

std::string FileTail(const std::string& path, size_t max_bytes) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return {};
  file.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(file.tellg());
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  file.seekg(static_cast<std::streamoff>(start));
  std::string tail(size - start, '\0');
  file.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  return tail;
}

}  // namespace tocl::testing
