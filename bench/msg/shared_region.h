// The memory the two peer processes of a pair share for the raw baselines:
// one anonymous MAP_SHARED mapping made by the coordinator before it forks
// the peers, so both inherit it at the same address.
//
// Layout: every word one side writes and the other spins on has its own
// 128-byte block (two cache lines: the adjacent-line prefetcher would
// otherwise make neighbours share). A ping-pong slot is a sequence word with
// the payload right behind it, as a message header would be: an 8-byte
// message travels in the same cache line as its flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "protocol.h"
#include "tocl/status.h"

namespace tocl::bench::msg {

struct alignas(128) PingPongSlot {
  std::atomic<uint64_t> seq{0};
  std::byte payload[kMaxPayload];
};

struct alignas(128) FutexWord {
  std::atomic<uint32_t> value{0};
};

struct alignas(128) SharedWord {
  std::atomic<uint64_t> value{0};
};

// One single-producer, single-consumer ring (raw_shm.h).
struct RingControl {
  SharedWord consumed;  // written by the consumer: run tag | messages consumed
  SharedWord ack;       // written by the consumer: run tag | index of an acknowledged marker
};

inline constexpr size_t kRingBytes = size_t{1} << 20;

struct SharedLayout {
  PingPongSlot ping;  // initiator -> responder
  PingPongSlot pong;  // responder -> initiator
  FutexWord futex_ping;
  FutexWord futex_pong;
  RingControl ring_control[kMaxPairs];
  alignas(4096) std::byte rings[kMaxPairs][kRingBytes];
};

// Owns the mapping; move-only. Pages are touched only when used.
class SharedRegion {
 public:
  static Result<SharedRegion> Create();

  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  SharedLayout& layout() const { return *layout_; }

 private:
  explicit SharedRegion(SharedLayout* layout) : layout_(layout) {}
  SharedLayout* layout_ = nullptr;
};

}  // namespace tocl::bench::msg
