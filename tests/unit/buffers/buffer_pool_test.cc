// BufferPool: reuse, growth by slabs, the process-wide budget cap, and the
// ways Get behaves at the cap.
#include "buffers/buffer_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"

namespace tocl::buffers {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;
// A class-0 slab is 64 KiB: 256 buffers of 256 B.
constexpr size_t kClass0SlabBytes = 64 * kKiB;
constexpr size_t kClass0PerSlab = kClass0SlabBytes / 256;

// A pool with its own memory and budget.
struct TestPool {
  explicit TestPool(size_t cap, uint32_t classes = 9, Network network = Network::kTcp)
      : budget(cap), pool(network, classes, memory, budget) {}

  PoolClassStats ClassStats(uint32_t class_index) const { return pool.Stats().at(class_index); }

  AnonymousSlabMemory memory;
  PoolBudget budget;
  BufferPool pool;
};

// Takes `n` buffers of `class_index`, all of which must be there.
std::vector<detail::BufferSlot*> TakeAll(BufferPool& pool, uint32_t class_index, size_t n) {
  std::vector<detail::BufferSlot*> slots;
  for (size_t i = 0; i < n; ++i) {
    detail::BufferSlot* slot = pool.TryGet(class_index);
    REQUIRE(slot != nullptr);
    slots.push_back(slot);
  }
  return slots;
}

void UnrefAll(BufferPool& pool, std::vector<detail::BufferSlot*>& slots) {
  for (auto* slot : slots) pool.Unref(slot);
  slots.clear();
}

TEST_CASE("a new buffer has one reference, is idle, and has a fresh header", "[pool]") {
  TestPool p(1 * kMiB);
  detail::BufferSlot* slot = p.pool.TryGet(2);
  REQUIRE(slot != nullptr);
  CHECK(slot->refs.load() == 1);
  CHECK(slot->state.load() == static_cast<uint8_t>(BufferState::kIdle));
  CHECK(slot->class_index == 2);
  CHECK(slot->pool == &p.pool);
  CHECK(slot->header().magic == wire::kMagic);
  CHECK(slot->header().length == 0);
  CHECK(slot->payload() == slot->bytes + wire::kHeaderBytes);

  // A used buffer comes back with its header reset.
  slot->header().length = 99;
  slot->header().tag = 5;
  slot->set_state(BufferState::kSent);
  p.pool.Unref(slot);
  detail::BufferSlot* again = p.pool.TryGet(2);
  REQUIRE(again == slot);
  CHECK(again->header().length == 0);
  CHECK(again->header().tag == 0);
  CHECK(again->state.load() == static_cast<uint8_t>(BufferState::kIdle));
  p.pool.Unref(again);
}

TEST_CASE("a released buffer is reused before the pool grows", "[pool]") {
  TestPool p(1 * kMiB);
  detail::BufferSlot* first = p.pool.TryGet(0);
  REQUIRE(first != nullptr);
  p.pool.Unref(first);
  for (int i = 0; i < 100; ++i) {
    detail::BufferSlot* slot = p.pool.TryGet(0);
    REQUIRE(slot == first);
    p.pool.Unref(slot);
  }
  CHECK(p.ClassStats(0).grown == 1);
  CHECK(p.ClassStats(0).free == kClass0PerSlab);
  CHECK(p.ClassStats(0).in_use == 0);
}

TEST_CASE("a buffer with more references returns to the pool only at the last Unref", "[pool]") {
  TestPool p(1 * kMiB);
  detail::BufferSlot* slot = p.pool.TryGet(0);
  REQUIRE(slot != nullptr);
  slot->refs.fetch_add(1);
  p.pool.Unref(slot);
  CHECK(p.ClassStats(0).in_use == 1);
  p.pool.Unref(slot);
  CHECK(p.ClassStats(0).in_use == 0);
  CHECK(p.ClassStats(0).free == kClass0PerSlab);
}

TEST_CASE("an empty class grows by one slab, counted in grown and bytes_registered", "[pool]") {
  TestPool p(4 * kMiB);
  for (const PoolClassStats& stats : p.pool.Stats()) {
    CHECK(stats.network == "tcp");
    CHECK(stats.grown == 0);
    CHECK(stats.bytes_registered == 0);
    CHECK(stats.free == 0);
  }
  CHECK(p.pool.Stats().size() == 9);
  CHECK(p.pool.Stats()[8].class_bytes == 64 * kKiB);

  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab);
  PoolClassStats stats = p.ClassStats(0);
  CHECK(stats.class_bytes == 256);
  CHECK(stats.grown == 1);
  CHECK(stats.bytes_registered == kClass0SlabBytes);
  CHECK(stats.in_use == kClass0PerSlab);
  CHECK(stats.free == 0);
  CHECK(p.budget.used() == kClass0SlabBytes);

  slots.push_back(p.pool.TryGet(0));  // the slab is used up: one more
  REQUIRE(slots.back() != nullptr);
  stats = p.ClassStats(0);
  CHECK(stats.grown == 2);
  CHECK(stats.bytes_registered == 2 * kClass0SlabBytes);
  CHECK(stats.in_use == kClass0PerSlab + 1);
  CHECK(stats.free == kClass0PerSlab - 1);
  CHECK(p.budget.used() == 2 * kClass0SlabBytes);

  // Other classes are untouched; a big class's slab holds 8 buffers.
  CHECK(p.ClassStats(1).grown == 0);
  detail::BufferSlot* big = p.pool.TryGet(8);
  REQUIRE(big != nullptr);
  CHECK(p.ClassStats(8).bytes_registered == 8 * 64 * kKiB);
  CHECK(p.ClassStats(8).free == 7);
  p.pool.Unref(big);

  UnrefAll(p.pool, slots);
  CHECK(p.ClassStats(0).free == 2 * kClass0PerSlab);
  CHECK(p.ClassStats(0).grown == 2);  // slabs are kept
}

TEST_CASE("buffers of one pool never overlap and carry their own table index", "[pool]") {
  TestPool p(4 * kMiB);
  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab + 3);
  std::set<std::byte*> starts;
  std::set<uint64_t> offsets;
  for (auto* slot : slots) {
    starts.insert(slot->bytes);
    offsets.insert(slot->offset);
    CHECK(p.pool.SlotAt(slot->index) == slot);
  }
  CHECK(starts.size() == slots.size());
  CHECK(offsets.size() == slots.size());
  for (auto it = std::next(offsets.begin()); it != offsets.end(); ++it) {
    CHECK(*it - *std::prev(it) >= 256);
  }
  UnrefAll(p.pool, slots);
}

TEST_CASE("SlotAt refuses indexes past the slot table", "[pool]") {
  TestPool p(1 * kMiB);
  CHECK(p.pool.SlotAt(0) == nullptr);  // nothing grown yet
  detail::BufferSlot* slot = p.pool.TryGet(0);
  REQUIRE(slot != nullptr);
  CHECK(p.pool.SlotAt(0) != nullptr);
  CHECK(p.pool.SlotAt(kClass0PerSlab - 1) != nullptr);
  CHECK(p.pool.SlotAt(kClass0PerSlab) == nullptr);
  CHECK(p.pool.SlotAt(1u << 31) == nullptr);
  CHECK(p.pool.SlotAt(0xFFFF'FFFFu) == nullptr);
  p.pool.Unref(slot);
}

TEST_CASE("TryGet of a class the pool does not have returns nullptr", "[pool]") {
  TestPool p(1 * kMiB, /*classes=*/3);
  CHECK(p.pool.TryGet(3) == nullptr);
  CHECK(p.pool.TryGet(100) == nullptr);
  CHECK(p.budget.used() == 0);
}

TEST_CASE("at the budget cap TryGet returns nullptr until a buffer comes back", "[pool]") {
  TestPool p(kClass0SlabBytes);  // room for exactly one class-0 slab
  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab);
  CHECK(p.pool.TryGet(0) == nullptr);
  CHECK(p.pool.TryGet(1) == nullptr);  // no room for another class's slab either
  CHECK(p.budget.used() == p.budget.cap());

  detail::BufferSlot* back = slots.back();
  slots.pop_back();
  p.pool.Unref(back);
  CHECK(p.pool.TryGet(0) == back);
  slots.push_back(back);
  UnrefAll(p.pool, slots);
}

TEST_CASE("pools sharing a budget share its cap", "[pool]") {
  AnonymousSlabMemory memory_a;
  AnonymousSlabMemory memory_b;
  PoolBudget budget(kClass0SlabBytes);
  BufferPool a(Network::kTcp, 9, memory_a, budget);
  BufferPool b(Network::kShm, 9, memory_b, budget);
  detail::BufferSlot* slot = a.TryGet(0);
  REQUIRE(slot != nullptr);
  CHECK(b.TryGet(0) == nullptr);
  CHECK(b.Stats()[0].network == "shm");
  a.Unref(slot);
}

TEST_CASE("Get with kFail at the cap is ResourceExhausted naming the cap", "[pool]") {
  TestPool p(kClass0SlabBytes);
  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab);
  auto got = p.pool.Get(0, AtCap::kFail, Clock::now() + 10s);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(got.status().message(), Catch::Matchers::Contains("cap of 65536 bytes"));
  CHECK_THAT(got.status().message(), Catch::Matchers::Contains("256 byte tcp buffer"));

  // Below the cap it just works.
  p.pool.Unref(slots.back());
  slots.pop_back();
  auto again = p.pool.Get(0, AtCap::kFail, Clock::now());
  REQUIRE(again.ok());
  slots.push_back(*again);
  UnrefAll(p.pool, slots);
}

TEST_CASE("Get with kWait at the cap is DeadlineExceeded once its deadline passes", "[pool]") {
  TestPool p(kClass0SlabBytes);
  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab);
  const auto start = Clock::now();
  const auto deadline = start + 50ms;
  auto got = p.pool.Get(0, AtCap::kWait, deadline);
  REQUIRE_FALSE(got.ok());
  CHECK(Clock::now() >= deadline);
  CHECK(got.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(got.status().message(), Catch::Matchers::Contains("no 256 byte tcp buffer"));
  CHECK_THAT(got.status().message(), Catch::Matchers::Contains("cap of 65536 bytes"));

  // A deadline already past fails at once.
  auto late = p.pool.Get(0, AtCap::kWait, Clock::now() - 1s);
  CHECK(late.status().code() == StatusCode::kDeadlineExceeded);
  UnrefAll(p.pool, slots);
}

TEST_CASE("Get with kWait is satisfied when another thread releases a buffer of its class",
          "[pool]") {
  TestPool p(kClass0SlabBytes);
  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab);
  detail::BufferSlot* released = slots.back();
  slots.pop_back();

  std::atomic<bool> waiting{false};
  Result<detail::BufferSlot*> got = ResourceExhausted("not run");
  const auto deadline = Clock::now() + 30s;
  std::thread waiter([&] {
    waiting.store(true);
    got = p.pool.Get(0, AtCap::kWait, deadline);
  });
  while (!waiting.load()) std::this_thread::yield();
  p.pool.Unref(released);
  waiter.join();

  REQUIRE(got.ok());
  CHECK(*got == released);
  CHECK(Clock::now() < deadline);
  slots.push_back(*got);
  UnrefAll(p.pool, slots);
}

TEST_CASE("Get with kWait and no deadline waits until a buffer is released", "[pool]") {
  TestPool p(kClass0SlabBytes);
  std::vector<detail::BufferSlot*> slots = TakeAll(p.pool, 0, kClass0PerSlab);
  detail::BufferSlot* released = slots.back();
  slots.pop_back();
  std::atomic<bool> waiting{false};
  Result<detail::BufferSlot*> got = ResourceExhausted("not run");
  std::thread waiter([&] {
    waiting.store(true);
    got = p.pool.Get(0, AtCap::kWait, Clock::time_point::max());
  });
  while (!waiting.load()) std::this_thread::yield();
  p.pool.Unref(released);
  waiter.join();
  REQUIRE(got.ok());
  CHECK(*got == released);
  slots.push_back(*got);
  UnrefAll(p.pool, slots);
}

TEST_CASE("a waiting Get is not satisfied by the release of another class's buffer", "[pool]") {
  TestPool p(2 * kClass0SlabBytes, /*classes=*/2);  // one slab for class 0, one for class 1
  std::vector<detail::BufferSlot*> small = TakeAll(p.pool, 0, kClass0PerSlab);
  std::vector<detail::BufferSlot*> large = TakeAll(p.pool, 1, kClass0SlabBytes / 512);
  CHECK(p.budget.used() == p.budget.cap());

  std::atomic<bool> waiting{false};
  Result<detail::BufferSlot*> got = ResourceExhausted("not run");
  const auto deadline = Clock::now() + 300ms;
  std::thread waiter([&] {
    waiting.store(true);
    got = p.pool.Get(1, AtCap::kWait, deadline);
  });
  while (!waiting.load()) std::this_thread::yield();
  UnrefAll(p.pool, small);  // class 0 comes back: no use to the waiter
  waiter.join();

  CHECK(got.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(Clock::now() >= deadline);
  UnrefAll(p.pool, large);
}

TEST_CASE("many threads taking and releasing buffers keep the pool's counts consistent", "[pool]") {
  TestPool p(kClass0SlabBytes);  // 256 buffers: 4 threads x 60 at most fit, none starves
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        std::vector<detail::BufferSlot*> mine;
        for (int i = 0; i < 60; ++i) {
          auto got = p.pool.Get(0, AtCap::kWait, Clock::now() + 30s);
          if (!got.ok()) {
            failures.fetch_add(1);
            break;
          }
          (*got)->header().tag = static_cast<uint32_t>(i);
          mine.push_back(*got);
        }
        for (auto* slot : mine) p.pool.Unref(slot);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures.load() == 0);
  const PoolClassStats stats = p.ClassStats(0);
  CHECK(stats.in_use == 0);
  CHECK(stats.free == kClass0PerSlab);
  CHECK(stats.grown == 1);
}

TEST_CASE("threads racing for the buffers of one class never hold the same one at once", "[pool]") {
  // One slab of 256 buffers, all but two held by the test: 4 threads take
  // and release the last two as fast as they can, so the free list is one
  // or two long and its top changes under most takes (the ABA case, a top
  // taken and put back between a thread's read and its compare-and-swap,
  // is what the list's generation stops; too rare on 2 cores to count on).
  TestPool p(kClass0SlabBytes);
  std::vector<detail::BufferSlot*> parked = TakeAll(p.pool, 0, kClass0PerSlab - 2);
  std::vector<std::atomic<int>> holders(kClass0PerSlab);
  std::atomic<int> doubles{0};
  std::atomic<int> takes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50000; ++round) {
        detail::BufferSlot* slot = p.pool.TryGet(0);
        if (slot == nullptr) continue;
        takes.fetch_add(1, std::memory_order_relaxed);
        if (holders.at(slot->index).exchange(t + 1) != 0) doubles.fetch_add(1);
        holders.at(slot->index).store(0);
        p.pool.Unref(slot);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(doubles.load() == 0);
  CHECK(takes.load() > 0);
  UnrefAll(p.pool, parked);
  const PoolClassStats stats = p.ClassStats(0);
  CHECK(stats.in_use == 0);
  CHECK(stats.free == kClass0PerSlab);
  CHECK(stats.grown == 1);
}

TEST_CASE("provided buffers are counted apart from those in use", "[pool]") {
  TestPool p(1 * kMiB);
  detail::BufferSlot* slot = p.pool.TryGet(0);
  REQUIRE(slot != nullptr);
  p.pool.CountProvided(0, 1);
  PoolClassStats stats = p.ClassStats(0);
  CHECK(stats.provided == 1);
  CHECK(stats.in_use == 0);
  p.pool.CountProvided(0, -1);
  CHECK(p.ClassStats(0).in_use == 1);
  p.pool.Unref(slot);
}

}  // namespace
}  // namespace tocl::buffers
