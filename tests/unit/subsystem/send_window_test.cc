// The tcp send window (subsystem/tcp/send_window.h): frames stay until the
// peer acknowledges them, a lost connection writes them again from where
// the peer says, and taking them hands their references over.
#include "subsystem/tcp/send_window.h"

#include <catch2/catch.hpp>
#include <vector>

#include "buffers/buffer_pool.h"
#include "subsystem_harness.h"

namespace tocl::subsystem::tcp {
namespace {

constexpr Gid kA = Gid::Process(1, 1);
constexpr Gid kB = Gid::Process(1, 2);

struct Fixture {
  Fixture() : pool(Network::kTcp, 4, memory, budget) {}
  // Frame `seq` of 100 payload bytes, with a second reference for the test.
  detail::BufferSlot* Frame(uint64_t seq) {
    detail::BufferSlot* slot = testing::NewFrame(pool, kA, kB, seq, 100);
    slot->refs.fetch_add(1);
    slots.push_back(slot);
    return slot;
  }
  void Push(SendWindow& window, uint64_t seq) {
    window.Push({Frame(seq), wire::kHeaderBytes + 100});
  }
  BufferState StateOf(size_t i) const { return static_cast<BufferState>(slots[i]->state.load()); }
  ~Fixture() {
    for (detail::BufferSlot* slot : slots) pool.Unref(slot);
  }

  buffers::PoolBudget budget{size_t{16} << 20};
  buffers::AnonymousSlabMemory memory;
  buffers::BufferPool pool;
  std::vector<detail::BufferSlot*> slots;
};

constexpr size_t kFrame = wire::kHeaderBytes + 100;

TEST_CASE("a frame leaves the window only when the peer acknowledges it", "[tcp][window]") {
  Fixture f;
  SendWindow window;
  for (uint64_t seq = 0; seq < 4; ++seq) f.Push(window, seq);
  CHECK(window.size() == 4);
  CHECK(window.bytes() == 4 * kFrame);
  CHECK(window.Written(2 * kFrame + 10) == 2);  // two whole, 10 bytes of the third
  CHECK(window.unwritten() == 2);
  CHECK(window.head_written() == 10);
  CHECK(window.sent_end() == 2);
  CHECK(f.StateOf(0) != BufferState::kSent);  // written is not received

  CHECK(window.Acknowledge(1) == 1);
  CHECK(f.StateOf(0) == BufferState::kSent);
  CHECK(f.StateOf(1) != BufferState::kSent);
  CHECK(window.base() == 1);
  CHECK(window.unwritten() == 1);
  CHECK(window.head_written() == 10);
  CHECK(window.end() == 4);
  CHECK(window.bytes() == 3 * kFrame);
}

TEST_CASE("after a lost connection the window writes again from where the peer resumes",
          "[tcp][window]") {
  Fixture f;
  SendWindow window;
  for (uint64_t seq = 0; seq < 5; ++seq) f.Push(window, seq);
  window.Written(4 * kFrame);
  window.Rewind();  // the connection is lost: nothing counts as written on the next one
  CHECK(window.unwritten() == 0);
  CHECK(window.sent_end() == 4);  // but the peer may have up to 4
  // The next connection's resume answer: the peer has 0..2.
  CHECK(window.Acknowledge(3) == 3);
  CHECK(window.base() == 3);
  CHECK(window.unwritten() == 0);  // frame 3 is written again first
  CHECK(window[0].slot == f.slots[3]);
  for (size_t i = 0; i < 3; ++i) CHECK(f.StateOf(i) == BufferState::kSent);
  CHECK(f.StateOf(3) != BufferState::kSent);
}

TEST_CASE("frames taken from the window keep their references and move its base", "[tcp][window]") {
  Fixture f;
  SendWindow window;
  for (uint64_t seq = 0; seq < 3; ++seq) f.Push(window, seq);
  window.Written(kFrame);
  window.Acknowledge(1);
  const auto taken = window.Take();
  REQUIRE(taken.size() == 2);
  CHECK(taken[0].slot == f.slots[1]);
  CHECK(taken[1].slot == f.slots[2]);
  CHECK(window.empty());
  CHECK(window.base() == 3);  // a later connection resumes past them
  CHECK(window.sent_end() == 3);
  for (const auto& entry : taken) {
    CHECK(entry.slot->refs.load() == 2);  // the window's reference, now the taker's
    f.pool.Unref(entry.slot);
  }
}

TEST_CASE("a failed window fails every frame it holds", "[tcp][window]") {
  Fixture f;
  {
    SendWindow window;
    for (uint64_t seq = 0; seq < 3; ++seq) f.Push(window, seq);
    window.Written(kFrame);
    window.Acknowledge(1);
    window.Fail();
    CHECK(window.empty());
    f.Push(window, 3);  // destroyed holding it: failed too
  }
  CHECK(f.StateOf(0) == BufferState::kSent);
  CHECK(f.StateOf(1) == BufferState::kFailed);
  CHECK(f.StateOf(2) == BufferState::kFailed);
  CHECK(f.StateOf(3) == BufferState::kFailed);
  for (detail::BufferSlot* slot : f.slots) CHECK(slot->refs.load() == 1);  // ours only
}

TEST_CASE("the window grows past its first ring and keeps the order", "[tcp][window]") {
  Fixture f;
  SendWindow window;
  for (uint64_t seq = 0; seq < 200; ++seq) f.Push(window, seq);
  window.Written(150 * kFrame);
  window.Acknowledge(100);
  for (uint64_t seq = 200; seq < 300; ++seq) f.Push(window, seq);
  REQUIRE(window.size() == 200);
  for (size_t i = 0; i < window.size(); ++i) CHECK(window[i].slot == f.slots[100 + i]);
  CHECK(window.unwritten() == 50);
}

}  // namespace
}  // namespace tocl::subsystem::tcp
