// The control block behind a Buffer handle. Lives in process memory (never
// in shared memory, where a peer could scribble on it); the bytes it names
// (header + payload) live in a slab of its pool.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tocl/buffer.h"
#include "wire/frame.h"

namespace tocl::buffers {
class BufferPool;
}

namespace tocl::detail {

struct BufferSlot {
  std::byte* bytes = nullptr;  // the wire header, then the payload
  uint64_t offset = 0;         // of `bytes` in the pool's memory (shm: in the segment)
  buffers::BufferPool* pool = nullptr;
  uint32_t class_index = 0;
  uint32_t index = 0;  // in the pool's slot table
  // The network's key for the slab's registration (via over ibverbs: the
  // memory region's lkey), so a send needs no lookup: the paper's
  // "descriptor as a buffer attribute". 0 where memory is not registered.
  uint32_t memory_key = 0;

  // One per Buffer handle, one while queued or in flight, one while
  // provided to a network. The slot returns to its pool's free list at zero.
  std::atomic<uint32_t> refs{0};
  // BufferState, written by whoever moves the buffer along (release), read
  // by bfstat (acquire).
  std::atomic<uint8_t> state{static_cast<uint8_t>(BufferState::kIdle)};

  // Free-list link: the next free slot's table index + 1 (0: none). Atomic
  // because a getter may read it while another takes the slot (its stale
  // read then fails the list's compare-and-swap).
  std::atomic<uint32_t> next_free{0};
  // While queued in a mailbox: the message handler (a standing posted
  // receive, runtime/posted_receive.h) that has claimed it, else null.
  // Guarded by that mailbox's lock; null again whenever the slot leaves
  // the queue, so a reused slot starts unclaimed.
  const void* claimed_by = nullptr;

  wire::Header& header() { return *reinterpret_cast<wire::Header*>(bytes); }
  std::byte* payload() { return bytes + wire::kHeaderBytes; }

  void set_state(BufferState s) { state.store(static_cast<uint8_t>(s), std::memory_order_release); }
};

}  // namespace tocl::detail
