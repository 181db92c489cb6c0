#include "core/posix.h"

#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace tocl {

Status ErrnoStatus(std::string_view operation, int error) {
  std::string message = fmt::format("{}: {}", operation, std::strerror(error));
  switch (error) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
      return Unavailable(std::move(message));
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return ResourceExhausted(std::move(message));
    case EADDRINUSE:
      return AlreadyExists(std::move(message));
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
      return InvalidArgument(std::move(message));
    case EACCES:
    case EPERM:
      return PermissionDenied(std::move(message));
    default:
      return Internal(std::move(message));
  }
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Fd::Close() {
  if (fd_ >= 0) {
    // close() always releases the descriptor on Linux, even when it reports
    // EINTR: never retry.
    ::close(fd_);
    fd_ = -1;
  }
}

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
               std::chrono::steady_clock::time_point deadline, FutexScope scope) {
  const int op = scope == FutexScope::kShared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE;
  timespec relative{};
  const timespec* timeout = nullptr;
  if (deadline != std::chrono::steady_clock::time_point::max()) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0)) return;
    // A relative timeout (FUTEX_WAIT measures it on CLOCK_MONOTONIC, as
    // steady_clock does); capped so that the seconds fit.
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::min<std::chrono::steady_clock::duration>(left, std::chrono::hours(24)))
                        .count();
    relative = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    timeout = &relative;
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, expected, timeout, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word, FutexScope scope) {
  const int op = scope == FutexScope::kShared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace tocl
