// How long a lost connection (tcp) or VI (via) waits before its next
// attempt: at once, then after 1 ms, doubling up to 1 s.
#pragma once

#include <algorithm>
#include <chrono>

namespace tocl::subsystem {

inline constexpr auto kFirstBackoff = std::chrono::milliseconds(1);
inline constexpr auto kMaxBackoff = std::chrono::milliseconds(1000);

// The wait before attempt number `attempts` (0: the first, at once).
inline std::chrono::milliseconds Backoff(int attempts) {
  if (attempts <= 0) return std::chrono::milliseconds(0);
  const int shift = std::min(attempts - 1, 10);
  return std::min(kFirstBackoff * (1 << shift), kMaxBackoff);
}

}  // namespace tocl::subsystem
