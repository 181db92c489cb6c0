// Exclusive ownership of a state directory: one toclsd per directory.
#pragma once

#include <string>

#include "tocl/status.h"

namespace tocl::daemon {

class StateLock {
 public:
  // Creates the directory (0700) if needed and takes an exclusive flock on
  // <dir>/toclsd.lock, recording our pid in it. FailedPrecondition naming
  // the running daemon's pid if another toclsd holds it.
  static Result<StateLock> Acquire(const std::string& state_dir, const std::string& lock_path);

  StateLock(StateLock&& other) noexcept;
  StateLock& operator=(StateLock&&) = delete;
  ~StateLock();  // releases the lock (the kernel also does when we die)

 private:
  explicit StateLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tocl::daemon
