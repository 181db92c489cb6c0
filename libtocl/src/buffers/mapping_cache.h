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
// Kept mappings are given back to the kernel lazily (MADV_FREE): it may
// reclaim their pages under memory pressure (the next use then faults as a
// new mapping would), and until then they count in the process's resident
// size. At most kMaxKept mappings and `cap` bytes are kept; the oldest goes
// first.
//
// Threading: every method from any thread; `mu_` guards the list (munmap
// and madvise run outside it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace tocl::buffers {

class MappingCache {
 public:
  static constexpr size_t kMaxKept = 8;

  struct Mapping {
    void* memory = nullptr;
    size_t bytes = 0;
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

  size_t kept_bytes() const;

 private:
  const size_t cap_;
  mutable std::mutex mu_;
  std::deque<Mapping> kept_;  // guarded by mu_: oldest first
  size_t kept_bytes_ = 0;     // guarded by mu_
};

}  // namespace tocl::buffers
