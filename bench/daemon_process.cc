#include "daemon_process.h"

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "tocl/directory_client.h"

extern char** environ;

namespace tocl::bench {
namespace {

std::string ErrnoText(std::string_view operation, int error) {
  return fmt::format("{}: {}", operation, std::strerror(error));
}

// Reaps `pid` if it has exited; true when it has.
bool Reaped(pid_t pid, int* wait_status) {
  pid_t result = ::waitpid(pid, wait_status, WNOHANG);
  return result == pid || (result < 0 && errno == ECHILD);
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with status {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return fmt::format("killed by signal {}", WTERMSIG(wait_status));
  return "ended";
}

}  // namespace

Result<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const std::string& toclsd_path, std::chrono::milliseconds deadline,
    const std::vector<std::string>& extra_args) {
  auto until = std::chrono::steady_clock::now() + deadline;
  // The socket lives in the state directory and unix socket paths are short
  // (108 bytes): a short temporary directory keeps it well inside the limit.
  std::string pattern = (std::filesystem::temp_directory_path() / "tocl-bench-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Internal(ErrnoText(fmt::format("mkdtemp {}", pattern), errno));
  }
  std::vector<std::string> args = {toclsd_path, "--state-dir", pattern, "--listen",
                                   "none",      "--log-level", "warn"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The daemon logs to stdout, which carries the figures (--json): its
  // lines go to stderr with our progress lines.
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = -1;
  int spawned = ::posix_spawn(&pid, toclsd_path.c_str(), &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    std::error_code ignored;
    std::filesystem::remove_all(pattern, ignored);
    return Unavailable(ErrnoText(fmt::format("start {}", toclsd_path), spawned));
  }
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess(pattern, pid));
  TOCL_RETURN_IF_ERROR(daemon->WaitUntilServing(until));
  return daemon;
}

DaemonProcess::DaemonProcess(std::string state_dir, pid_t pid)
    : state_dir_(std::move(state_dir)),
      address_("unix:" + state_dir_ + "/toclsd.sock"),
      pid_(pid) {}

DaemonProcess::~DaemonProcess() {
  Status stopped = Stop();
  if (!stopped.ok()) fmt::print(stderr, "tocl-bench: {}\n", stopped.ToString());
  std::error_code ignored;
  std::filesystem::remove_all(state_dir_, ignored);
}

Status DaemonProcess::WaitUntilServing(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int wait_status = 0;
    if (Reaped(pid_, &wait_status)) {
      pid_ = -1;
      return Unavailable(fmt::format("toclsd {} before it served", DescribeExit(wait_status)));
    }
    auto client = DirectoryClient::Connect(address_, std::chrono::milliseconds(200));
    if (client.ok() && (*client)->Ping().ok()) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Unavailable(fmt::format("toclsd did not answer Ping on {} in time", address_));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status DaemonProcess::Stop(std::chrono::milliseconds deadline) {
  if (pid_ < 0) return Status::Ok();
  if (::kill(pid_, SIGTERM) != 0 && errno != ESRCH) {
    return Internal(ErrnoText(fmt::format("kill -TERM {}", pid_), errno));
  }
  auto until = std::chrono::steady_clock::now() + deadline;
  int wait_status = 0;
  while (!Reaped(pid_, &wait_status)) {
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &wait_status, 0);
      pid_ = -1;
      return DeadlineExceeded(
          fmt::format("toclsd did not stop within {} ms of SIGTERM; killed", deadline.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return Internal(fmt::format("toclsd {} on SIGTERM", DescribeExit(wait_status)));
  }
  return Status::Ok();
}

Result<uint64_t> DaemonProcess::ResidentBytes() const {
  return ProcStatusBytes(pid_, "VmRSS");
}

Result<uint64_t> DaemonProcess::PeakResidentBytes() const {
  return ProcStatusBytes(pid_, "VmHWM");
}

Result<uint64_t> ProcStatusBytes(pid_t pid, const std::string& key) {
  if (pid <= 0) return FailedPrecondition("no process to measure");
  std::string path = fmt::format("/proc/{}/status", pid);
  std::ifstream status(path);
  if (!status) return NotFound(fmt::format("cannot read {}", path));
  std::string line;
  std::string prefix = key + ":";
  while (std::getline(status, line)) {
    if (!line.starts_with(prefix)) continue;
    // "VmRSS:	  123456 kB"
    uint64_t kib = std::strtoull(line.c_str() + prefix.size(), nullptr, 10);
    return kib * 1024;
  }
  return NotFound(fmt::format("no {} in {}", key, path));
}

uint64_t DatabaseFileBytes(const std::string& path) {
  uint64_t total = 0;
  for (const char* suffix : {"", "-wal"}) {
    std::error_code error;
    uintmax_t size = std::filesystem::file_size(path + suffix, error);
    if (!error) total += size;
  }
  return total;
}

}  // namespace tocl::bench
