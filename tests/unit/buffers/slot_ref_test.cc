// SlotRef: one owned reference of a pool slot, released exactly once.
#include "buffers/slot_ref.h"

#include <catch2/catch.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"

namespace tocl::buffers {
namespace {

constexpr size_t kMiB = 1024 * 1024;

struct TestPool {
  TestPool() : budget(4 * kMiB), pool(Network::kTcp, 4, memory, budget) {}

  uint64_t InUse(uint32_t class_index) const { return pool.Stats().at(class_index).in_use; }
  uint64_t Free(uint32_t class_index) const { return pool.Stats().at(class_index).free; }

  AnonymousSlabMemory memory;
  PoolBudget budget;
  BufferPool pool;
};

uint32_t Refs(const detail::BufferSlot* slot) {
  return slot->refs.load();
}

static_assert(!std::is_copy_constructible_v<SlotRef> && !std::is_copy_assignable_v<SlotRef>);
static_assert(std::is_nothrow_move_constructible_v<SlotRef> &&
              std::is_nothrow_move_assignable_v<SlotRef>);
static_assert(sizeof(SlotRef) == sizeof(detail::BufferSlot*));

TEST_CASE("a slot ref drops its reference exactly once when it goes", "[pool]") {
  TestPool p;
  detail::BufferSlot* slot = p.pool.TryGet(1);
  REQUIRE(slot != nullptr);
  slot->refs.fetch_add(1);  // a second owner keeps the slot alive to look at
  {
    SlotRef ref(slot);
    CHECK(ref.get() == slot);
    CHECK(static_cast<bool>(ref));
    CHECK(Refs(slot) == 2);
  }
  CHECK(Refs(slot) == 1);
  CHECK(p.InUse(1) == 1);
  { SlotRef last(slot); }
  CHECK(p.InUse(1) == 0);
  // Back on the free list: the next get is the same slot.
  SlotRef again(p.pool.TryGet(1));
  CHECK(again.get() == slot);
}

TEST_CASE("moving a slot ref hands the reference over without counting", "[pool]") {
  TestPool p;
  SlotRef a(p.pool.TryGet(0));
  detail::BufferSlot* slot = a.get();
  REQUIRE(slot != nullptr);
  SlotRef b(std::move(a));
  CHECK(a.get() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  CHECK(b.get() == slot);
  CHECK(Refs(slot) == 1);
  SlotRef c;
  c = std::move(b);
  CHECK(b.get() == nullptr);  // NOLINT(bugprone-use-after-move)
  CHECK(Refs(slot) == 1);
  // Into a container and out again, as the send queue and pair order do.
  std::vector<SlotRef> queue;
  queue.push_back(std::move(c));
  queue.reserve(64);  // reallocation moves the element
  CHECK(Refs(slot) == 1);
  CHECK(p.InUse(0) == 1);
  queue.clear();
  CHECK(p.InUse(0) == 0);
}

TEST_CASE("assigning over a slot ref drops the reference it held", "[pool]") {
  TestPool p;
  SlotRef a(p.pool.TryGet(0));
  SlotRef b(p.pool.TryGet(0));
  detail::BufferSlot* kept = b.get();
  CHECK(p.InUse(0) == 2);
  a = std::move(b);
  CHECK(p.InUse(0) == 1);
  CHECK(a.get() == kept);
  a.reset();
  CHECK(a.get() == nullptr);
  CHECK(p.InUse(0) == 0);
  a.reset();  // an empty handle has nothing to drop
  CHECK(p.InUse(0) == 0);
}

TEST_CASE("release hands the reference on and leaves the slot ref empty", "[pool]") {
  TestPool p;
  SlotRef ref(p.pool.TryGet(2));
  detail::BufferSlot* slot = ref.get();
  detail::BufferSlot* handed = ref.release();
  CHECK(handed == slot);
  CHECK(!ref);
  CHECK(ref.release() == nullptr);
  CHECK(Refs(slot) == 1);  // still held, now by whoever took it
  CHECK(p.InUse(2) == 1);
  SlotRef adopted(handed);
  adopted.reset();
  CHECK(p.InUse(2) == 0);
}

TEST_CASE("share adds one reference that is dropped on its own", "[pool]") {
  TestPool p;
  SlotRef first(p.pool.TryGet(3));
  detail::BufferSlot* slot = first.get();
  SlotRef second = first.Share();
  CHECK(second.get() == slot);
  CHECK(Refs(slot) == 2);
  SlotRef third = SlotRef::Share(slot);
  CHECK(Refs(slot) == 3);
  first.reset();
  second.reset();
  CHECK(Refs(slot) == 1);
  CHECK(p.InUse(3) == 1);
  third.reset();
  CHECK(p.InUse(3) == 0);
}

}  // namespace
}  // namespace tocl::buffers
