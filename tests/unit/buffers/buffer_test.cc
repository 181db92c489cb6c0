// tocl::Buffer, the move-only handle over a pool slot.
#include "tocl/buffer.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <type_traits>
#include <utility>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"

namespace tocl::buffers {
namespace {

static_assert(!std::is_copy_constructible_v<Buffer> && !std::is_copy_assignable_v<Buffer>);
static_assert(std::is_nothrow_move_constructible_v<Buffer> &&
              std::is_nothrow_move_assignable_v<Buffer>);

struct TestPool {
  explicit TestPool(Network network = Network::kTcp)
      : budget(size_t{4} << 20), pool(network, 9, memory, budget) {}

  Buffer Take(size_t payload) {
    detail::BufferSlot* slot = pool.TryGet(ClassFor(payload));
    REQUIRE(slot != nullptr);
    return Buffer(slot);
  }
  uint64_t InUse() const {
    uint64_t in_use = 0;
    for (const auto& stats : pool.Stats()) in_use += stats.in_use;
    return in_use;
  }

  AnonymousSlabMemory memory;
  PoolBudget budget;
  BufferPool pool;
};

TEST_CASE("a default buffer is empty", "[pool]") {
  Buffer buffer;
  CHECK_FALSE(buffer.valid());
  CHECK_FALSE(buffer);
  CHECK(buffer.slot() == nullptr);
  buffer.Release();  // harmless
  CHECK_FALSE(buffer.valid());
}

TEST_CASE("a buffer's capacity is its class size minus the header", "[pool]") {
  TestPool p;
  for (size_t payload : {size_t{0}, size_t{192}, size_t{193}, size_t{5000}, size_t{65472}}) {
    INFO("payload " << payload);
    Buffer buffer = p.Take(payload);
    CHECK(buffer.size_class() == ClassBytes(ClassFor(payload)));
    CHECK(buffer.capacity() == buffer.size_class() - wire::kHeaderBytes);
    CHECK(buffer.capacity() >= payload);
    CHECK(buffer.size() == 0);
    CHECK(buffer.network() == Network::kTcp);
    CHECK(buffer.state() == BufferState::kIdle);
  }
  CHECK(p.Take(0).capacity() == 192);
  CHECK(p.Take(65472).capacity() == 65472);
}

TEST_CASE("resize up to the capacity sets the payload length and beyond it fails", "[pool]") {
  TestPool p;
  Buffer buffer = p.Take(100);
  REQUIRE(buffer.capacity() == 192);
  CHECK(buffer.resize(5));
  CHECK(buffer.size() == 5);
  CHECK(buffer.span().size() == 5);
  CHECK(buffer.resize(192));
  CHECK(buffer.size() == 192);
  CHECK_FALSE(buffer.resize(193));
  CHECK(buffer.size() == 192);  // unchanged
  CHECK_FALSE(buffer.resize(size_t{1} << 33));
  CHECK(buffer.size() == 192);
  CHECK(buffer.resize(0));
  CHECK(buffer.size() == 0);
}

TEST_CASE("the payload is written after the header in the pool's memory", "[pool]") {
  TestPool p;
  Buffer buffer = p.Take(5);
  std::memcpy(buffer.data(), "hello", 5);
  REQUIRE(buffer.resize(5));
  CHECK(buffer.data() == buffer.slot()->bytes + wire::kHeaderBytes);
  CHECK(std::memcmp(buffer.slot()->payload(), "hello", 5) == 0);
  const Buffer& view = buffer;
  CHECK(view.data() == buffer.data());
  CHECK(view.span().size() == 5);
}

TEST_CASE("a buffer reads its source, destination and tag from its header", "[pool]") {
  TestPool p;
  Buffer buffer = p.Take(10);
  wire::Header& header = buffer.slot()->header();
  header.source = Gid::Thread(1, 2, 3).raw();
  header.destination = Gid::Thread(1, 4, 5).raw();
  header.tag = 77;
  CHECK(buffer.source() == Gid::Thread(1, 2, 3));
  CHECK(buffer.destination() == Gid::Thread(1, 4, 5));
  CHECK(buffer.tag() == 77);
}

TEST_CASE("moving a buffer moves its reference and leaves the source empty", "[pool]") {
  TestPool p;
  Buffer a = p.Take(10);
  detail::BufferSlot* slot = a.slot();
  Buffer b(std::move(a));
  CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the point of the test
  CHECK(b.slot() == slot);
  CHECK(slot->refs.load() == 1);
  CHECK(p.InUse() == 1);

  Buffer c;
  c = std::move(b);
  CHECK_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  CHECK(c.slot() == slot);
  CHECK(p.InUse() == 1);
}

TEST_CASE("move-assigning over a buffer gives the old one back to its pool", "[pool]") {
  TestPool p;
  Buffer a = p.Take(10);
  Buffer b = p.Take(10);
  CHECK(p.InUse() == 2);
  detail::BufferSlot* kept = b.slot();
  a = std::move(b);
  CHECK(p.InUse() == 1);
  CHECK(a.slot() == kept);
  Buffer& self = a;
  a = std::move(self);  // self-move keeps the buffer
  CHECK(a.slot() == kept);
  CHECK(p.InUse() == 1);
}

TEST_CASE("Release and the destructor give the buffer back exactly once", "[pool]") {
  TestPool p;
  {
    Buffer buffer = p.Take(10);
    CHECK(p.InUse() == 1);
    buffer.Release();
    CHECK_FALSE(buffer.valid());
    CHECK(p.InUse() == 0);
    buffer.Release();
    CHECK(p.InUse() == 0);
  }
  CHECK(p.InUse() == 0);
  CHECK(p.pool.Stats()[0].free == 256);
  {
    Buffer buffer = p.Take(10);
    CHECK(p.InUse() == 1);
  }
  CHECK(p.InUse() == 0);
}

TEST_CASE("a detached slot keeps its reference until the pool gets it back", "[pool]") {
  TestPool p;
  Buffer buffer = p.Take(10);
  detail::BufferSlot* slot = buffer.Detach();
  CHECK_FALSE(buffer.valid());
  CHECK(p.InUse() == 1);
  Buffer adopted(slot);
  adopted.Release();
  CHECK(p.InUse() == 0);
}

TEST_CASE("a buffer names its pool's network", "[pool]") {
  TestPool shm(Network::kShm);
  CHECK(shm.Take(1).network() == Network::kShm);
  CHECK(NetworkName(Network::kShm) == "shm");
  CHECK(NetworkName(Network::kTcp) == "tcp");
  CHECK(NetworkName(Network::kFastest) == "fastest");
  CHECK(BufferStateName(BufferState::kInFlight) == "in flight");
  CHECK(BufferStateName(BufferState::kFailed) == "failed");
}

}  // namespace
}  // namespace tocl::buffers
