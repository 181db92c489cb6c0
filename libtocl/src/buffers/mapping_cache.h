// Freed long-message mappings, kept for the next long message received
// into library memory.
//
// Why: a fresh anonymous mapping faults on the first touch of each page,
// and the kernel zeroes every page it hands out. A 4 MiB message received
// with Recv into a new mapping took 8 ms over shm where the same message
// received with RecvInto (memory already touched) took 0.14 ms (release
// build, tocl-bench msg --cases packed). A kept mapping is written again
// without a fault.
//
// Kept mappings stay resident (counted in the process's resident size):
// giving them back lazily with MADV_FREE was tried and costs as much as a
// fresh mapping here (a 4 MiB rewrite after MADV_FREE took 7 ms on these
// VMs, against 0.1 ms for a plain rewrite and 14 ms fresh). So the cache is
// bounded instead: at most kMaxKept mappings and `cap` bytes, the oldest
// going first, and the owner unmaps those unused for a while
// (ReleaseUnusedBefore, from its periodic housekeeping).
//
// Threading: every method from any thread; `mu_` guards the list (munmap
// runs outside it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace tocl::buffers {

class MappingCache {
 public:
  static constexpr size_t kMaxKept = 8;

  using Clock = std::chrono::steady_clock;

  struct Mapping {
    void* memory = nullptr;
    size_t bytes = 0;
    Clock::time_point kept_at{};  // set by Keep
  };

  explicit MappingCache(size_t cap) : cap_(cap) {}
  ~MappingCache();
  MappingCache(const MappingCache&) = delete;
  MappingCache& operator=(const MappingCache&) = delete;

  // A kept mapping of at least `bytes` and at most twice that (so a small
  // message does not hold a large mapping), or {} when there is none.
  Mapping Take(size_t bytes);
  // Keeps `mapping` (at most `cap` bytes in all), unmapping what no longer
  // fits; unmaps it at once when it alone is larger than `cap`.
  void Keep(Mapping mapping);
  // Unmaps the mappings kept before `before`.
  void ReleaseUnusedBefore(Clock::time_point before);

  size_t kept_bytes() const;

 private:
  const size_t cap_;
  mutable std::mutex mu_;
  std::deque<Mapping> kept_;  // guarded by mu_: oldest first
  size_t kept_bytes_ = 0;     // guarded by mu_
};

}  // namespace tocl::buffers
