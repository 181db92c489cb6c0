// The library's one way to talk to the operating system: a Status from
// errno, an owned file descriptor, and futex waits and wakes. Internal to
// tocl (libtocl, toclsd and the tools), not part of the public API.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "tocl/status.h"

namespace tocl {

// The Status for a failed system call: `operation` and errno's text, with a
// code that says what the caller may do about it (Unavailable for a peer
// that refused or went away, ResourceExhausted for fd or memory limits,
// Internal otherwise).
Status ErrnoStatus(std::string_view operation, int error);

// An owned file descriptor, closed when destroyed. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Close(); }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Close();

 private:
  int fd_ = -1;
};

// Futexes. Private ones are for words in this process's memory; shared
// ones (kShared) for words in memory mapped by several processes.
enum class FutexScope { kPrivate, kShared };

// Sleeps while `word` holds `expected`, until a wake or `deadline`
// (time_point::max(): no deadline). Spurious returns are allowed: callers
// re-check their condition.
void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
               std::chrono::steady_clock::time_point deadline, FutexScope scope);
// Wakes every thread sleeping on `word`.
void FutexWakeAll(std::atomic<uint32_t>& word, FutexScope scope);

}  // namespace tocl
