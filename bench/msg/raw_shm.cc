#include "raw_shm.h"

#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "payload_buffer.h"
#include "spin.h"
#include "timing.h"

namespace tocl::bench::msg {
namespace {

// A sequence word: 20 bits of run id above a 40-bit counter, so that what an
// earlier run left in the region never matches. Bit 63 ends a ping-pong.
constexpr uint64_t kCounterMask = (uint64_t{1} << 40) - 1;
constexpr uint64_t kStopBit = uint64_t{1} << 63;

uint64_t RunTag(uint32_t run_id, uint64_t counter) {
  return (uint64_t{run_id & 0xFFFFFu} << 40) | (counter & kCounterMask);
}

// --- futex -------------------------------------------------------------------

// 32-bit futex words: 12 bits of run id above a 20-bit counter.
constexpr uint32_t kFutexCounterMask = (1u << 20) - 1;
constexpr uint32_t kFutexStop = kFutexCounterMask;

uint32_t FutexTag(uint32_t run_id, uint64_t counter) {
  return ((run_id & 0xFFFu) << 20) | (static_cast<uint32_t>(counter) & kFutexCounterMask);
}

uint32_t* FutexAddress(FutexWord& word) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return reinterpret_cast<uint32_t*>(&word.value);
}

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
void FutexWake(FutexWord& word) {
  ::syscall(SYS_futex, FutexAddress(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Sleeps while the word holds `seen` (at most a second per call).
void FutexWait(FutexWord& word, uint32_t seen) {
  timespec timeout{1, 0};
  ::syscall(SYS_futex, FutexAddress(word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

// Waits until `word` is `want` or `stop`; false after kSpinTimeout.
bool FutexWaitFor(FutexWord& word, uint32_t want, uint32_t stop, uint32_t& got) {
  auto limit = Clock::now() + kSpinTimeout;
  for (;;) {
    got = word.value.load(std::memory_order_acquire);
    if (got == want || got == stop) return true;
    FutexWait(word, got);
    // The clock is read only after a sleep that did not end in the answer.
    got = word.value.load(std::memory_order_acquire);
    if (got == want || got == stop) return true;
    if (Clock::now() > limit) return false;
  }
}

// --- rings -------------------------------------------------------------------

// Where the slots of a ring of messages of one size lie. A message up to 56
// bytes shares the cache line of its sequence word (16-byte slots: four to a
// line); a larger one starts on the next line.
struct RingGeometry {
  explicit RingGeometry(size_t size) {
    if (size + 8 <= 64) {
      stride = (size + 8 + 15) / 16 * 16;
      payload_offset = 8;
    } else {
      stride = 64 + (size + 63) / 64 * 64;
      payload_offset = 64;
    }
    slots = std::min<size_t>(4096, kRingBytes / stride);
    publish_every = std::max<size_t>(1, std::min<size_t>(slots / 4, 64));
  }
  size_t stride = 0;
  size_t payload_offset = 0;
  size_t slots = 0;
  size_t publish_every = 0;  // the consumer publishes its count this often
};

std::atomic_ref<uint64_t> SlotSeq(std::byte* slot) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot));
}

Status RingSend(SharedLayout& shm, uint32_t ring, const RunSpec& spec, std::barrier<>* barrier,
                StreamResult& out) {
  const RingGeometry geometry(spec.size);
  const size_t size = spec.size;
  const uint32_t yield_every = spec.pairs > 1 ? 64 : 0;
  std::byte* base = shm.rings[ring];
  RingControl& control = shm.ring_control[ring];
  PayloadBuffer source(size);
  uint64_t sent = 0;
  uint64_t consumed = 0;  // what the consumer last published
  auto send = [&](StreamMark mark) {
    if (sent - consumed >= geometry.slots) {
      bool room = SpinUntil(
          [&] {
            uint64_t value = control.consumed.value.load(std::memory_order_acquire);
            if ((value & ~kCounterMask) == RunTag(spec.run_id, 0)) consumed = value & kCounterMask;
            return sent - consumed < geometry.slots;
          },
          yield_every);
      if (!room) return false;
    }
    std::byte* slot = base + (sent % geometry.slots) * geometry.stride;
    StoreStamp(source.data(), static_cast<uint64_t>(mark));
    std::memcpy(slot + geometry.payload_offset, source.data(), size);
    ++sent;
    SlotSeq(slot).store(RunTag(spec.run_id, sent), std::memory_order_release);
    return true;
  };
  auto wait_ack = [&] {
    const uint64_t want = RunTag(spec.run_id, sent);
    return SpinUntil([&] { return control.ack.value.load(std::memory_order_acquire) == want; },
                     yield_every);
  };
  if (!TimeStream(send, wait_ack, spec, barrier, out)) {
    return DeadlineExceeded(fmt::format("raw shm stream: ring {} stalled", ring));
  }
  return Status::Ok();
}

Status RingReceive(SharedLayout& shm, uint32_t ring, const RunSpec& spec) {
  const RingGeometry geometry(spec.size);
  const uint32_t yield_every = spec.pairs > 1 ? 64 : 0;
  std::byte* base = shm.rings[ring];
  RingControl& control = shm.ring_control[ring];
  PayloadBuffer target(spec.size);
  for (uint64_t received = 0;;) {
    std::byte* slot = base + (received % geometry.slots) * geometry.stride;
    const uint64_t want = RunTag(spec.run_id, received + 1);
    auto seq = SlotSeq(slot);
    if (!SpinUntil([&] { return seq.load(std::memory_order_acquire) == want; }, yield_every)) {
      return DeadlineExceeded(fmt::format("raw shm stream: nothing arrived on ring {}", ring));
    }
    std::memcpy(target.data(), slot + geometry.payload_offset, spec.size);
    ++received;
    auto mark = static_cast<StreamMark>(LoadStamp(target.data()));
    if (received % geometry.publish_every == 0 || mark != StreamMark::kData) {
      control.consumed.value.store(want, std::memory_order_release);
    }
    if (mark == StreamMark::kData) continue;
    control.ack.value.store(want, std::memory_order_release);
    if (mark == StreamMark::kLast) return Status::Ok();
  }
}

}  // namespace

Status RawShmPingPong(Role role, SharedLayout& shm, const RunSpec& spec, LatencyResult* out) {
  const size_t size = spec.size;
  PayloadBuffer buffer(size);
  if (role == Role::kInitiator) {
    PayloadBuffer reply(size);
    bool wrong_echo = false;
    auto round_trip = [&](uint64_t i) {
      StoreStamp(buffer.data(), i);
      std::memcpy(shm.ping.payload, buffer.data(), size);
      const uint64_t seq = RunTag(spec.run_id, i);
      shm.ping.seq.store(seq, std::memory_order_release);
      if (!SpinUntil([&] { return shm.pong.seq.load(std::memory_order_acquire) == seq; })) {
        return false;
      }
      std::memcpy(reply.data(), shm.pong.payload, size);
      wrong_echo = LoadStamp(reply.data()) != i;
      return !wrong_echo;
    };
    uint64_t next = 1;
    bool ok = TimeRoundTrips(round_trip, spec, next, *out);
    shm.ping.seq.store(RunTag(spec.run_id, next) | kStopBit, std::memory_order_release);
    if (wrong_echo) return DataLoss("raw shm ping-pong: a reply carried the wrong round");
    if (!ok) return DeadlineExceeded("raw shm ping-pong: the responder stopped answering");
    return Status::Ok();
  }
  for (uint64_t i = 1;; ++i) {
    const uint64_t want = RunTag(spec.run_id, i);
    uint64_t seq = 0;
    bool arrived = SpinUntil([&] {
      seq = shm.ping.seq.load(std::memory_order_acquire);
      return (seq & ~kStopBit) == want;
    });
    if (!arrived) return DeadlineExceeded("raw shm ping-pong: the initiator stopped sending");
    if ((seq & kStopBit) != 0) return Status::Ok();
    std::memcpy(buffer.data(), shm.ping.payload, size);
    std::memcpy(shm.pong.payload, buffer.data(), size);
    shm.pong.seq.store(want, std::memory_order_release);
  }
}

Status RawFutexPingPong(Role role, SharedLayout& shm, const RunSpec& spec, LatencyResult* out) {
  const size_t size = spec.size;
  PayloadBuffer buffer(size);
  const uint32_t stop = FutexTag(spec.run_id, kFutexStop);
  if (role == Role::kInitiator) {
    PayloadBuffer reply(size);
    bool wrong_echo = false;
    bool too_many = false;
    auto round_trip = [&](uint64_t i) {
      if (i >= kFutexStop) {
        too_many = true;
        return false;
      }
      StoreStamp(buffer.data(), i);
      std::memcpy(shm.ping.payload, buffer.data(), size);
      const uint32_t tag = FutexTag(spec.run_id, i);
      shm.futex_ping.value.store(tag, std::memory_order_release);
      FutexWake(shm.futex_ping);
      uint32_t got = 0;
      if (!FutexWaitFor(shm.futex_pong, tag, tag, got)) return false;
      std::memcpy(reply.data(), shm.pong.payload, size);
      wrong_echo = LoadStamp(reply.data()) != i;
      return !wrong_echo;
    };
    uint64_t next = 1;
    bool ok = TimeRoundTrips(round_trip, spec, next, *out);
    shm.futex_ping.value.store(stop, std::memory_order_release);
    FutexWake(shm.futex_ping);
    if (too_many) return Internal("raw futex ping-pong: more round trips than the word counts");
    if (wrong_echo) return DataLoss("raw futex ping-pong: a reply carried the wrong round");
    if (!ok) return DeadlineExceeded("raw futex ping-pong: the responder stopped answering");
    return Status::Ok();
  }
  for (uint64_t i = 1;; ++i) {
    const uint32_t want = FutexTag(spec.run_id, i);
    uint32_t got = 0;
    if (!FutexWaitFor(shm.futex_ping, want, stop, got)) {
      return DeadlineExceeded("raw futex ping-pong: the initiator stopped sending");
    }
    if (got == stop) return Status::Ok();
    std::memcpy(buffer.data(), shm.ping.payload, size);
    std::memcpy(shm.pong.payload, buffer.data(), size);
    shm.futex_pong.value.store(want, std::memory_order_release);
    FutexWake(shm.futex_pong);
  }
}

Status MemcpyStream(Role role, const RunSpec& spec, StreamResult* out) {
  if (role == Role::kResponder) return Status::Ok();
  PayloadBuffer source(spec.size);
  PayloadBuffer target(spec.size);
  auto copy = [&](StreamMark mark) {
    StoreStamp(source.data(), static_cast<uint64_t>(mark));
    std::memcpy(target.data(), source.data(), spec.size);
    asm volatile("" : : "r"(target.data()) : "memory");  // the copy is not optimised away
    return true;
  };
  auto no_ack = [] { return true; };
  TimeStream(copy, no_ack, spec, nullptr, *out);
  return Status::Ok();
}

Status RawShmStream(Role role, SharedLayout& shm, const RunSpec& spec, StreamResult* out) {
  if (spec.pairs < 1 || spec.pairs > kMaxPairs) {
    return InvalidArgument(fmt::format("raw shm stream: {} pairs", spec.pairs));
  }
  std::vector<Status> results(spec.pairs);
  std::vector<StreamResult> streams(spec.pairs);
  std::barrier<> barrier(spec.pairs);
  auto one = [&](uint32_t ring) {
    results[ring] =
        role == Role::kInitiator
            ? RingSend(shm, ring, spec, spec.pairs > 1 ? &barrier : nullptr, streams[ring])
            : RingReceive(shm, ring, spec);
  };
  if (spec.pairs == 1) {
    one(0);
  } else {
    std::vector<std::thread> threads;
    for (uint32_t ring = 0; ring < spec.pairs; ++ring) threads.emplace_back(one, ring);
    for (std::thread& thread : threads) thread.join();
  }
  for (const Status& result : results) TOCL_RETURN_IF_ERROR(result);
  if (out != nullptr) *out = CombineStreams(streams);
  return Status::Ok();
}

}  // namespace tocl::bench::msg
