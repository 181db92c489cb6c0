// Frames and bytes counted by one writer at a time and read by anyone
// (statistics): a load and a store per frame, not a read-modify-write (a
// locked instruction on the way of every message). On a cache line of its
// own, so that counters of different writers can sit side by side.
#pragma once

#include <atomic>
#include <cstdint>

namespace tocl::runtime {

struct alignas(64) FrameCount {
  std::atomic<uint64_t> frames{0};
  std::atomic<uint64_t> bytes{0};

  // One frame of `frame_bytes` (header included). By the writer only.
  void Add(uint64_t frame_bytes) {
    frames.store(frames.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    bytes.store(bytes.load(std::memory_order_relaxed) + frame_bytes, std::memory_order_relaxed);
  }
};

}  // namespace tocl::runtime
