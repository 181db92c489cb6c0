#include "state_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace tocl::daemon {
namespace {

Status Errno(std::string_view operation, const std::string& path) {
  int error = errno;
  std::string message = fmt::format("{} {}: {}", operation, path, std::strerror(error));
  if (error == EACCES || error == EPERM || error == EROFS) return PermissionDenied(message);
  if (error == ENOSPC) return ResourceExhausted(message);
  return FailedPrecondition(message);
}

}  // namespace

Result<StateLock> StateLock::Acquire(const std::string& state_dir, const std::string& lock_path) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return FailedPrecondition(
        fmt::format("cannot create state directory {}: {}", state_dir, ec.message()));
  }
  ::chmod(state_dir.c_str(), 0700);  // best effort: the directory may not be ours to change

  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open", lock_path);
  StateLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Errno("lock", lock_path);
    char pid[32] = {};
    ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return FailedPrecondition(fmt::format(
        "another toclsd (pid {}) is already running on state directory {}", holder, state_dir));
  }
  std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    return Errno("write", lock_path);
  }
  return lock;
}

StateLock::StateLock(StateLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

StateLock::~StateLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tocl::daemon
