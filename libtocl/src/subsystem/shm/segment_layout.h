// The layout of a process's shared-memory segment (/dev/shm/tocl.PID.START.N.seg).
//
// The owner (the receiver) creates it; any process on the same host that
// sends to the owner maps it and claims one Channel. A channel is a set of
// single-producer single-consumer rings:
//   - lanes[k]: the short messages (inline frames, below) of that sender
//     for the owner's threads of receive lane k (wire/lanes.h), in the
//     order they were sent. The holder of the owner's lane k drains them
//     (its own receiver, or the owner's poller); the sender posts to a lane
//     under that lane's lock only, so its threads sending to different
//     lanes do not wait on each other;
//   - arrivals: the sender's other frames (long-message starts, control
//     frames, messages in provided buffers), in the order they were sent,
//     drained by the owner's poller. A small frame (up to
//     kInlineFrameBytes, header included) travels in the ring entry: the owner
//     finds it by looking at the entry (its `seq`), in the cache lines the
//     sender just wrote, as UCX's mm transport does. A bigger one is in a
//     buffer the owner provided, and the entry describes it;
//   - provides[class]: those receive buffers (owner produces, sender
//     consumes), one ring per size class.
// The buffers themselves are in the data region that follows the channels:
// the owner's shm buffer pool. A big message therefore costs one copy, into
// memory the receiver hands to the application as it is; a small one two
// (the second, into the owner's pool, touches only its own cache).
//
// A pair's frames on a lane and on the arrivals ring may come out in either
// order: the wire header's per-pair sequence numbers restore it
// (runtime/pair_order.h). (The sender puts every message that fits a lane
// on its lane, however it was sent, so only a pair that mixes sizes or
// long messages uses both.)
//
//   [SegmentHeader 4 KiB][Channel x kMaxChannels][data region (pool slabs)]
//
// Nothing in the segment is trusted by the owner: descriptors are checked
// against the owner's own record of what it provided to that channel.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "buffers/size_class.h"
#include "wire/lanes.h"

namespace tocl::subsystem::shm {

inline constexpr uint64_t kSegmentMagic = 0x31564D4853'4C434FULL;  // "OCLSHMV1"-ish
// Follows the frames' wire version too (5 = wire version 6): a process that
// would send frames its peer cannot read does not attach to its segment.
inline constexpr uint32_t kSegmentVersion = 5;
inline constexpr uint32_t kMaxChannels = 64;
inline constexpr uint32_t kArrivalSlots = 512;
// Per lane and channel: 96 KiB of a lane that is used. A stream of short
// messages to one thread ran at about half the rate with 256 (the sender
// found its lane full and waited for the receiver's whole batch); 1024 was
// no faster than 512.
inline constexpr uint32_t kLaneSlots = 512;
inline constexpr uint32_t kProvideSlots = 128;
inline constexpr size_t kPathBytes = 96;

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "rings in shared memory need lock-free atomics");

struct alignas(64) RingIndex {
  std::atomic<uint32_t> value{0};
};

struct Descriptor {
  uint32_t slot_index = 0;  // in the owner's pool slot table
  uint32_t length = 0;      // arrivals: header + payload bytes written
  uint64_t offset = 0;      // of the buffer in the data region
};

// An entry of the arrival ring, published by storing `seq` (the ring
// position + 1) last, with release.
struct alignas(64) ArrivalEntry {
  enum Kind : uint32_t { kDescribed = 0, kInline = 1 };
  std::atomic<uint32_t> seq{0};
  uint32_t kind = kDescribed;
  Descriptor desc;  // kInline: only desc.length (header + payload bytes)
  std::byte frame[192 - 8 - sizeof(Descriptor)];
};
static_assert(sizeof(ArrivalEntry) == 192);
// The largest frame (header included) that travels in an arrival entry.
inline constexpr uint32_t kInlineFrameBytes = sizeof(ArrivalEntry::frame);

template <uint32_t N, typename Entry = Descriptor>
struct Ring {
  static_assert((N & (N - 1)) == 0);
  RingIndex head;  // next entry the consumer reads
  RingIndex tail;  // next entry the producer writes
  Entry entries[N];
  static constexpr uint32_t kSize = N;
};

enum class ChannelState : uint32_t {
  kFree = 0,
  kClaiming = 1,  // a sender is filling in its identity
  kClaimed = 2,   // the owner has not looked yet
  kReady = 3,     // the owner provided buffers: the sender may send
  kClosed = 4,    // the owner is gone or closed the channel
};

struct alignas(64) Channel {
  std::atomic<uint32_t> state{0};
  // Set by a sender that ran out of provided buffers; the owner clears it
  // and rings the sender's bell when it provides more.
  std::atomic<uint32_t> sender_waiting{0};
  uint64_t sender_process = 0;  // Gid raw
  int32_t sender_pid = 0;
  uint64_t sender_start = 0;  // /proc starttime, against pid reuse
  char sender_segment[kPathBytes] = {};
  Ring<kArrivalSlots, ArrivalEntry> arrivals;
  // Inline entries only (kind kInline).
  Ring<kLaneSlots, ArrivalEntry> lanes[wire::kReceiveLanes];
  Ring<kProvideSlots> provides[buffers::kMaxClasses];
};

struct alignas(4096) SegmentHeader {
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t num_classes = 0;
  uint64_t owner_process = 0;  // Gid raw
  int32_t owner_pid = 0;
  uint64_t owner_start = 0;
  uint64_t data_offset = 0;  // from the start of the segment
  uint64_t data_bytes = 0;
  // 1 while the owner's poller sleeps (or is about to): senders ring the
  // bell after publishing. Ordering: seq_cst on both sides (Dekker).
  alignas(64) std::atomic<uint32_t> sleeping{0};
  // Bumped by a sender after claiming a channel.
  alignas(64) std::atomic<uint32_t> attach_seq{0};
};

struct SegmentLayout {
  static constexpr size_t kChannelsOffset = sizeof(SegmentHeader);
  static constexpr size_t kDataOffset =
      (kChannelsOffset + kMaxChannels * sizeof(Channel) + 4095) / 4096 * 4096;
};

}  // namespace tocl::subsystem::shm
