// Messages for the mailbox tests, in a real pool so that Leave and the
// destructor can give them back: short ones (one class-0 buffer) and long
// ones still arriving (library memory), as the runtime queues them.
#pragma once

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/large_slot.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"

namespace tocl::runtime {

struct MailboxMessages {
  MailboxMessages(Gid receiver, size_t budget_bytes)
      : receiver_(receiver), budget(budget_bytes), pool(Network::kShm, 9, memory, budget) {}

  detail::BufferSlot* Make(Gid source, Tag tag, uint32_t length = 8) {
    detail::BufferSlot* slot = pool.TryGet(0);
    REQUIRE(slot != nullptr);
    slot->header().source = source.raw();
    slot->header().destination = receiver_.raw();
    slot->header().tag = tag;
    slot->header().flags = 0;  // a reused slot may hold a piece's
    slot->header().length = length;
    slot->header().total = length;
    return slot;
  }
  buffers::LargeSlot* MakeArriving(Gid source, Tag tag, uint64_t size) {
    auto made = buffers::NewLargeSlot(&pool, size, nullptr, nullptr);
    REQUIRE(made.ok());
    buffers::LargeSlot* large = *made;
    large->header().source = source.raw();
    large->header().destination = receiver_.raw();
    large->header().tag = tag;
    large->header().total = size;
    large->set_state(BufferState::kInFlight);
    return large;
  }
  void Drop(detail::BufferSlot* slot) { slot->pool->Unref(slot); }
  uint64_t InUse() const { return pool.Stats()[0].in_use; }

 private:
  const Gid receiver_;

 public:
  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
};

}  // namespace tocl::runtime
