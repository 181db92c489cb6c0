// A deadline `timeout` from now that does not overflow: the API takes
// timeouts up to duration::max() ("wait for ever").
#pragma once

#include <chrono>

namespace tocl {

template <typename Clock = std::chrono::steady_clock, typename Rep, typename Period>
typename Clock::time_point DeadlineAfter(std::chrono::duration<Rep, Period> timeout) {
  // The default of every waiting call: no clock read.
  if (timeout == std::chrono::duration<Rep, Period>::max()) return Clock::time_point::max();
  const auto now = Clock::now();
  if (timeout <= timeout.zero()) return now;
  // Compared in the caller's unit: max() - now in it never overflows, a
  // coarse timeout in the clock's unit may.
  using Timeout = std::chrono::duration<Rep, Period>;
  if (timeout >= std::chrono::duration_cast<Timeout>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + std::chrono::duration_cast<typename Clock::duration>(timeout);
}

}  // namespace tocl
