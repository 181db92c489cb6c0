// Pair order on the receive side: frames of a (source thread, destination
// thread) pair delivered in sequence order, early ones held and counted,
// duplicates and broken senders refused, long messages given up skipped.
#include "runtime/pair_order.h"

#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

constexpr Gid kSender = Gid::Thread(1, 2, 3);
constexpr Gid kSenderSibling = Gid::Thread(1, 2, 4);  // another thread of its process
constexpr Gid kOtherSender = Gid::Thread(1, 5, 3);    // a thread of another process
constexpr Gid kReceiver = Gid::Thread(1, 9, 1);
constexpr Gid kRelay = Gid::Process(1, 11);  // carries kSender's multicasts
const size_t kFrameBytes = buffers::ClassBytes(0);
constexpr uint32_t kTag = 5;

// Frames in a real pool, and what the pair order delivered (as
// "source-thread:seq"), with its accounting in `unexpected`.
struct Fixture {
  explicit Fixture(size_t process_cap = 16 * kFrameBytes)
      : budget(size_t{4} << 20),
        pool(Network::kShm, 9, memory, budget),
        order(process_cap, unexpected, [this](Gid from_process, buffers::SlotRef slot) {
          // A relay's frames (multicast) come from the relay's process.
          CHECK((from_process == Gid::FromRaw(slot->header().source).process() ||
                 from_process == kRelay));
          delivered.push_back(std::to_string(Gid::FromRaw(slot->header().source).thread_index()) +
                              ":" + std::to_string(slot->header().seq));
          return Status::Ok();
        }) {}

  // A short message, or a long message's start, numbered `seq`.
  buffers::SlotRef Frame(Gid source, uint64_t seq,
                         wire::FrameKind kind = wire::FrameKind::kMessage) {
    REQUIRE((kind == wire::FrameKind::kMessage || kind == wire::FrameKind::kLongStart));
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    slot->header() = kind == wire::FrameKind::kLongStart
                         ? wire::LongStartHeader(source, kReceiver, kTag, /*total=*/1 << 20,
                                                 /*fragment_bytes=*/65472, seq)
                         : wire::MessageHeader(source, kReceiver, kTag, /*length=*/0, seq);
    return slot;
  }
  Status Arrive(Gid source, uint64_t seq, wire::FrameKind kind = wire::FrameKind::kMessage) {
    return order.OnOrdered(source.process(), Frame(source, seq, kind));
  }
  Status Skip(Gid source, uint64_t seq) {
    return order.Skip(source.process(), LongKey{source.raw(), kReceiver.raw(), seq});
  }
  uint64_t InUse() const { return pool.Stats()[0].in_use; }

  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
  std::atomic<size_t> unexpected{0};
  std::vector<std::string> delivered;
  PairOrder order;
};

using Delivered = std::vector<std::string>;

TEST_CASE("frames that arrive in order are delivered at once and nothing is held", "[order]") {
  Fixture f;
  for (uint64_t seq = 0; seq < 3; ++seq) REQUIRE(f.Arrive(kSender, seq).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2"});
  CHECK(f.unexpected == 0);
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("frames that arrive ahead are held, counted, and released when the gap fills",
          "[order]") {
  Fixture f;
  REQUIRE(f.Arrive(kSender, 2).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.delivered.empty());
  CHECK(f.unexpected == 2 * kFrameBytes);
  CHECK(f.order.HeldBytes(kSender.process()) == 2 * kFrameBytes);
  CHECK(f.InUse() == 2);

  REQUIRE(f.Arrive(kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2"});
  CHECK(f.unexpected == 0);
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a relay's frame takes its place in the sender's pair, counted against the sender",
          "[order][multicast]") {
  Fixture f;
  // Number 1 was the multicast, carried by the relay; 0 and 2 came direct.
  REQUIRE(f.order.OnOrdered(kRelay, f.Frame(kSender, 1)).ok());
  REQUIRE(f.Arrive(kSender, 2).ok());
  CHECK(f.delivered.empty());
  CHECK(f.order.HeldBytes(kSender.process()) == 2 * kFrameBytes);
  CHECK(f.order.HeldBytes(kRelay) == 0);
  REQUIRE(f.Arrive(kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2"});
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.unexpected == 0);
  // The sender's own second try (its relay failed) is a second copy.
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.order.duplicates() == 1);
  CHECK(f.InUse() == 0);
}

TEST_CASE("each pair has its own order: a gap in one holds up no other", "[order]") {
  Fixture f;
  REQUIRE(f.Arrive(kSender, 1).ok());
  REQUIRE(f.Arrive(kSenderSibling, 0).ok());
  REQUIRE(f.Arrive(kOtherSender, 0).ok());
  CHECK(f.delivered == Delivered{"4:0", "3:0"});  // thread index 3 of the other process
  REQUIRE(f.Arrive(kSender, 0).ok());
  CHECK(f.delivered == Delivered{"4:0", "3:0", "3:0", "3:1"});
}

TEST_CASE("a second copy, already delivered or already held, is dropped", "[order]") {
  Fixture f;
  REQUIRE(f.Arrive(kSender, 0).ok());
  REQUIRE(f.Arrive(kSender, 0).ok());  // sent again after its connection broke

  REQUIRE(f.Arrive(kSender, 3).ok());
  REQUIRE(f.Arrive(kSender, 3).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.unexpected == kFrameBytes);  // the first 3 stays held; the copy is dropped
  CHECK(f.InUse() == 1);
  CHECK(f.order.duplicates() == 2);
  REQUIRE(f.Arrive(kSender, 1).ok());
  REQUIRE(f.Arrive(kSender, 2).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2", "3:3"});
}

TEST_CASE("gaps over the cap of a sending process drop all its pairs and refuse the frame",
          "[order]") {
  Fixture f(3 * kFrameBytes);
  REQUIRE(f.Arrive(kSender, 1).ok());
  REQUIRE(f.Arrive(kSender, 2).ok());
  REQUIRE(f.Arrive(kSenderSibling, 5).ok());  // the same process: the same budget
  REQUIRE(f.Arrive(kOtherSender, 1).ok());    // another process: its own
  CHECK(f.unexpected == 4 * kFrameBytes);

  Status broken = f.Arrive(kSender, 3);
  CHECK(broken.code() == StatusCode::kInvalidArgument);
  CHECK(broken.message() ==
        fmt::format("sequence number 3 arrived while 0 never did; the frames held waiting "
                    "exceed {} bytes",
                    3 * kFrameBytes));
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.unexpected == kFrameBytes);  // the other process's frame only
  CHECK(f.InUse() == 1);

  // The process's pairs start afresh; the other process's are untouched.
  REQUIRE(f.Arrive(kSender, 0).ok());
  REQUIRE(f.Arrive(kOtherSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:0", "3:1"});
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a skipped number is not waited for, whether skipped before or after what follows came",
          "[order]") {
  Fixture f;
  SECTION("skipped first") {
    REQUIRE(f.Skip(kSender, 0).ok());
    CHECK(f.delivered.empty());
    REQUIRE(f.Arrive(kSender, 1).ok());
    CHECK(f.delivered == Delivered{"3:1"});
  }
  SECTION("skipped while what follows waits") {
    REQUIRE(f.Arrive(kSender, 1).ok());
    REQUIRE(f.Arrive(kSender, 2).ok());
    REQUIRE(f.Skip(kSender, 0).ok());
    CHECK(f.delivered == Delivered{"3:1", "3:2"});
  }
  SECTION("skipped behind a gap, then the gap fills") {
    REQUIRE(f.Skip(kSender, 1).ok());
    REQUIRE(f.Arrive(kSender, 2).ok());
    CHECK(f.delivered.empty());
    REQUIRE(f.Arrive(kSender, 0).ok());
    CHECK(f.delivered == Delivered{"3:0", "3:2"});
  }
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("the start of a long message its sender gave up is dropped, held or late", "[order]") {
  Fixture f;
  SECTION("held behind a gap when the skip comes") {
    REQUIRE(f.Arrive(kSender, 1, wire::FrameKind::kLongStart).ok());
    CHECK(f.unexpected == kFrameBytes);
    REQUIRE(f.Skip(kSender, 1).ok());
    CHECK(f.unexpected == 0);
    REQUIRE(f.Arrive(kSender, 0).ok());
    CHECK(f.delivered == Delivered{"3:0"});
  }
  SECTION("arriving after the skip, ahead of the pair") {
    REQUIRE(f.Skip(kSender, 1).ok());
    REQUIRE(f.Arrive(kSender, 1, wire::FrameKind::kLongStart).ok());
    REQUIRE(f.Arrive(kSender, 0).ok());
    CHECK(f.delivered == Delivered{"3:0"});
  }
  SECTION("arriving after the pair went past it") {
    REQUIRE(f.Skip(kSender, 0).ok());
    REQUIRE(f.Arrive(kSender, 1).ok());
    REQUIRE(f.Arrive(kSender, 0, wire::FrameKind::kLongStart).ok());
    CHECK(f.delivered == Delivered{"3:1"});
  }
  REQUIRE(f.Arrive(kSender, 2).ok());
  CHECK(f.delivered.back() == "3:2");
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a skip of a number already passed, or of another process's pair, changes nothing",
          "[order]") {
  Fixture f;
  REQUIRE(f.Arrive(kSender, 0).ok());
  REQUIRE(f.Skip(kSender, 0).ok());
  REQUIRE(f.order.Skip(kOtherSender.process(), LongKey{kSender.raw(), kReceiver.raw(), 1}).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
}

TEST_CASE("a skip far ahead of the pair is a broken sender", "[order]") {
  Fixture f;
  Status far = f.Skip(kSender, (uint64_t{1} << 20) + 1);
  CHECK(far.code() == StatusCode::kInvalidArgument);
  CHECK(far.message() ==
        "an abort of long message 1048577 while 0 is the next expected (0 others skipped)");
}

TEST_CASE("Clear drops what is held and returns its accounting", "[order]") {
  Fixture f;
  REQUIRE(f.Arrive(kSender, 4).ok());
  REQUIRE(f.Arrive(kOtherSender, 2).ok());
  CHECK(f.InUse() == 2);
  f.order.Clear();
  CHECK(f.unexpected == 0);
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.InUse() == 0);
}

}  // namespace
}  // namespace tocl::runtime
