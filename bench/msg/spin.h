// Waiting by spinning, as the raw baselines do, with a bound: a peer that
// died must not hang the benchmark.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>

namespace tocl::bench::msg {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// How long a raw wait spins before it gives up on its peer.
inline constexpr std::chrono::seconds kSpinTimeout{30};

// The bound of one wait loop. Every 4096 spins (tens of microseconds) it
// yields the CPU once, so that on a loaded machine the peer being waited for
// gets to run instead of the waiter burning its time slice, and reads the
// clock: a wait that ends quickly costs neither. The timeout counts from the
// first read.
class SpinLimit {
 public:
  explicit SpinLimit(std::chrono::nanoseconds timeout = kSpinTimeout) : timeout_(timeout) {}
  // Counts one spin; true once the timeout has passed.
  bool Expired() {
    if ((++spins_ & 4095) != 0) return false;
    sched_yield();
    auto now = std::chrono::steady_clock::now();
    if (limit_ == std::chrono::steady_clock::time_point{}) {
      limit_ = now + timeout_;
      return false;
    }
    return now > limit_;
  }
  uint64_t spins() const { return spins_; }

 private:
  std::chrono::nanoseconds timeout_;
  uint64_t spins_ = 0;
  std::chrono::steady_clock::time_point limit_{};
};

// Spins until `done()` is true; false when the timeout passed first. With
// `yield_every` > 0 the thread also yields every that many spins (for runs
// with more spinning threads than cores).
template <typename Done>
inline bool SpinUntil(Done&& done, uint32_t yield_every = 0) {
  SpinLimit limit;
  while (!done()) {
    CpuRelax();
    if (limit.Expired()) return false;
    if (yield_every != 0 && limit.spins() % yield_every == 0) sched_yield();
  }
  return true;
}

}  // namespace tocl::bench::msg
