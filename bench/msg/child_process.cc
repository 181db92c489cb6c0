#include "child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

extern char** environ;

namespace tocl::bench::msg {
namespace {

using Clock = std::chrono::steady_clock;

Status Errno(std::string_view what, int error) {
  return Internal(fmt::format("{}: {}", what, std::strerror(error)));
}

}  // namespace

Result<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& env) {
  if (argv.empty()) return InvalidArgument("no program to run");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe2", errno);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);

  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  for (const std::string& added : env) {
    std::string name = added.substr(0, added.find('=') + 1);
    std::erase_if(environment, [&](const std::string& e) { return e.starts_with(name); });
    environment.push_back(added);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  int error = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (error != 0) {
    ::close(fds[0]);
    return Errno(fmt::format("cannot run {}", argv[0]), error);
  }
  return ChildProcess(pid, fds[0]);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), output_fd_(std::exchange(other.output_fd_, -1)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
    output_fd_ = std::exchange(other.output_fd_, -1);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  Kill();
}

void ChildProcess::Kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (output_fd_ >= 0) {
    ::close(output_fd_);
    output_fd_ = -1;
  }
}

Result<ChildProcess::Output> ChildProcess::Finish(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return FailedPrecondition("the child was already finished");
  Output output;
  const auto deadline = Clock::now() + timeout;
  char chunk[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      Kill();
      return DeadlineExceeded(
          fmt::format("still running after {} ms; it wrote: {}", timeout.count(), output.text));
    }
    pollfd readable{output_fd_, POLLIN, 0};
    int ready = ::poll(&readable, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Errno("poll", errno);
    if (ready == 0) continue;
    ssize_t n = ::read(output_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer closed it: the child (and its children) ended
    output.text.append(chunk, static_cast<size_t>(n));
  }
  ::close(output_fd_);
  output_fd_ = -1;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

bool ProgramInPath(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::istringstream folders(path != nullptr ? path : "/usr/bin:/bin");
  std::string folder;
  while (std::getline(folders, folder, ':')) {
    if (folder.empty()) continue;
    if (::access((folder + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace tocl::bench::msg
