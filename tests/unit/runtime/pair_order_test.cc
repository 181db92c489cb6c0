// Pair order on the receive side: frames of a (source thread, destination
// thread) pair delivered in sequence order, early ones held and counted,
// duplicates and broken senders refused, long messages given up skipped.
#include "runtime/pair_order.h"

#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
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
constexpr uint64_t kNonce = 0x5EC4E7;              // the multicast call's (wire/frame.h)
constexpr auto kGrace = std::chrono::seconds(10);  // PairOrder's default carrier_grace

// Frames in a real pool, and what the pair order delivered (as
// "source-thread:seq"), with its accounting in `unexpected`.
struct Fixture {
  explicit Fixture(size_t process_cap = 16 * kFrameBytes)
      : budget(size_t{4} << 20),
        pool(Network::kShm, 9, memory, budget),
        order(
            process_cap, unexpected,
            [this](Gid from_process, buffers::SlotRef slot) {
              delivered.push_back(
                  std::to_string(Gid::FromRaw(slot->header().source).thread_index()) + ":" +
                  std::to_string(slot->header().seq));
              carriers.push_back(from_process);
              return Status::Ok();
            },
            [this](Gid from_process) { broken.push_back(from_process); },
            [this](Gid from_process, buffers::SlotRef slot, bool given_up) {
              refilled.push_back(std::to_string(slot->header().seq) + (given_up ? "!" : ""));
              carriers.push_back(from_process);
              return Status::Ok();
            }) {}

  // A short message, or a long message's start, numbered `seq`.
  // (In size class `size_class`: ClassBytes(size_class) held.)
  buffers::SlotRef Frame(Gid source, uint64_t seq, wire::FrameKind kind = wire::FrameKind::kMessage,
                         uint32_t size_class = 0) {
    REQUIRE((kind == wire::FrameKind::kMessage || kind == wire::FrameKind::kLongStart));
    buffers::SlotRef slot(pool.TryGet(size_class));
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
  // A multicast's marker from `source`'s process: `seq` is carried by
  // `carrier` (its fill: Fill, `total` bytes as Frame makes them).
  Status Marker(Gid source, uint64_t seq, Gid carrier, uint64_t total = 0) {
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    slot->header() = wire::MarkerHeader(source, kReceiver, kTag, total, carrier, seq);
    slot->header().reserved = kNonce;
    return order.OnOrdered(source.process(), std::move(slot));
  }
  // The fill of `source`'s number `seq`, brought by `carrier` (with the
  // call's nonce, or `nonce`: one someone else had the carrier bring).
  Status Fill(Gid carrier, Gid source, uint64_t seq,
              wire::FrameKind kind = wire::FrameKind::kMessage, uint64_t nonce = kNonce,
              uint32_t size_class = 0) {
    buffers::SlotRef slot = Frame(source, seq, kind, size_class);
    slot->header().flags = wire::kFlagRelayed;
    slot->header().offset = nonce;
    return order.OnOrdered(carrier, std::move(slot));
  }
  Status ForgedFill(Gid carrier, Gid source, uint64_t seq) {
    return Fill(carrier, source, seq, wire::FrameKind::kMessage, /*nonce=*/0);
  }
  // Markers for `source`'s numbers 0 to n - 1 carried by `carrier`, then
  // a message numbered n.
  Status MarkersThenMessage(Gid source, uint64_t n, Gid carrier) {
    for (uint64_t seq = 0; seq < n; ++seq) TOCL_RETURN_IF_ERROR(Marker(source, seq, carrier));
    return Arrive(source, n);
  }
  Status Skip(Gid source, uint64_t seq) {
    return order.Skip(source.process(), LongKey{source.raw(), kReceiver.raw(), seq});
  }
  // A fill in a larger size class: ClassBytes(size_class) held.
  Status BigFill(Gid carrier, Gid source, uint64_t seq, uint32_t size_class) {
    return Fill(carrier, source, seq, wire::FrameKind::kMessage, kNonce, size_class);
  }
  uint64_t InUse() const {
    uint64_t in_use = 0;
    for (const auto& stats : pool.Stats()) in_use += stats.in_use;
    return in_use;
  }
  // The pair order's fill and note indexes are in step.
  void CheckIndexes() const { CHECK(order.CheckInvariants() == std::string()); }

  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
  std::atomic<size_t> unexpected{0};
  std::vector<std::string> delivered;
  std::vector<Gid> carriers;  // each delivery's from_process (and refills')
  std::vector<Gid> broken;
  std::vector<std::string> refilled;  // seq, with "!" when given up
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

constexpr Gid kForger = Gid::Process(1, 13);  // neither the sender's process nor its relay
constexpr uint64_t kLong = 1 << 20;           // Frame's long start

TEST_CASE("a fill takes its marker's place, delivered under the process that carried it",
          "[order][multicast]") {
  Fixture f;
  // Number 1 is the multicast, carried by the relay; 0 and 2 came direct.
  // The fill came first: held, counted against the relay.
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  REQUIRE(f.Arrive(kSender, 2).ok());
  CHECK(f.delivered.empty());
  CHECK(f.order.HeldBytes(kSender.process()) == kFrameBytes);
  CHECK(f.order.HeldBytes(kRelay) == kFrameBytes);
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process(), kRelay, kSender.process()});
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.order.HeldBytes(kRelay) == 0);
  CHECK(f.unexpected == 0);
  // The sender's own second try (its relay was slow) is a second copy.
  REQUIRE(f.Fill(kSender.process(), kSender, 1).ok());
  CHECK(f.order.duplicates() == 1);
  CHECK(f.broken.empty());
  CHECK(f.InUse() == 0);
}

TEST_CASE("held frames keep their own carrier: a fill, then the sender's long start behind it",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  // The sender's long start (number 1) arrives before the relay's fill.
  REQUIRE(f.Arrive(kSender, 1, wire::FrameKind::kLongStart).ok());
  CHECK(f.delivered.empty());
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  // The long start is the sender's: its grants must go to it, not the relay.
  CHECK(f.carriers == std::vector<Gid>{kRelay, kSender.process()});
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill from a process the marker does not name is dropped, its carrier not blamed",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  // At its turn: dropped and counted (its connection stays: Ok).
  REQUIRE(f.Fill(kForger, kSender, 0).ok());
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.delivered.empty());
  // The sender's own fill still fills it.
  REQUIRE(f.Fill(kSender.process(), kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process(), kSender.process()});
  CHECK(f.broken.empty());
  CHECK(f.InUse() == 0);
}

TEST_CASE("a forged fill that came before its marker is dropped there, its carrier not blamed",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Fill(kForger, kSender, 0).ok());  // nothing to judge it by yet: held
  CHECK(f.order.HeldBytes(kForger) == kFrameBytes);
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  CHECK(f.delivered.empty());
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.order.HeldBytes(kForger) == 0);
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill for a number that was no marker's is dropped, early or late, no one blamed",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Arrive(kSender, 0).ok());
  // Late: number 0 was a plain message.
  REQUIRE(f.Fill(kSender.process(), kSender, 0).ok());
  // Ahead, where a plain message waits already.
  REQUIRE(f.Arrive(kSender, 2).ok());
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());
  CHECK(f.order.fills_dropped() == 2);
  // Ahead of a plain message that comes later: dropped then.
  REQUIRE(f.Fill(kForger, kSender, 1).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process(), kSender.process(), kSender.process()});
  CHECK(f.order.fills_dropped() == 3);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a relay asked by another to carry a fill for a plain number is not cut off: the sender's "
    "message, a multicast through it and its own message all arrive",
    "[order][multicast]") {
  // Review 3 item 1: the forged fill for (sender, receiver, 0) waits ahead;
  // number 0 is the sender's plain Send.
  Fixture f;
  REQUIRE(f.ForgedFill(kRelay, kSender, 0).ok());
  REQUIRE(f.Arrive(kSender, 0).ok());
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  const Gid relay_thread = Gid::Thread(kRelay.host_index(), kRelay.process_index(), 1);
  REQUIRE(f.Arrive(relay_thread, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "1:0"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process(), kRelay, kRelay});
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill of another size than its marker says is dropped, its relay not broken",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay, /*total=*/kLong).ok());
  // From the named relay (someone may have had it carry these bytes).
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());  // 0 bytes
  CHECK(f.delivered.empty());
  // From a third process: dropped too.
  REQUIRE(f.Fill(kForger, kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.delivered.empty());
  CHECK(f.order.fills_dropped() == 2);
  REQUIRE(f.Fill(kRelay, kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.broken.empty());
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill its relay was asked to carry by someone else is dropped: the nonce",
          "[order][multicast]") {
  Fixture f;
  // Ahead of its marker: held, dropped at the marker (the relay is not
  // broken), the real one after it delivered. (A relay carries each
  // number once, only with its sender's ticket: kFillsPerCarrier is 1.)
  REQUIRE(f.ForgedFill(kRelay, kSender, 0).ok());
  CHECK(f.order.HeldBytes(kRelay) == kFrameBytes);
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  CHECK(f.delivered.empty());
  CHECK(f.order.HeldBytes(kRelay) == 0);
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.carriers == std::vector<Gid>{kRelay});
  CHECK(f.order.HeldBytes(kRelay) == 0);
  // At its turn, and late: dropped, the connection stays.
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());
  REQUIRE(f.ForgedFill(kRelay, kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  REQUIRE(f.ForgedFill(kRelay, kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  // Another tag does not fit either.
  REQUIRE(f.Marker(kSender, 2, kRelay).ok());
  buffers::SlotRef other_tag = f.Frame(kSender, 2);
  other_tag->header().tag = kTag + 1;
  other_tag->header().flags = wire::kFlagRelayed;
  other_tag->header().offset = kNonce;
  REQUIRE(f.order.OnOrdered(kRelay, std::move(other_tag)).ok());
  CHECK(f.delivered.size() == 2);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("an early forged fill does not take its number: the relay's, held after it, is delivered",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Fill(kForger, kSender, 0).ok());
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.carriers == std::vector<Gid>{kRelay});
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill arriving while its marker waits behind a gap is judged as it arrives",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());  // 0 has not come
  // Dropped at once, from a third process or from the relay.
  REQUIRE(f.Fill(kForger, kSender, 1).ok());
  REQUIRE(f.ForgedFill(kRelay, kSender, 1).ok());
  CHECK(f.order.HeldBytes(kRelay) == 0);
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  CHECK(f.order.HeldBytes(kRelay) == kFrameBytes);
  CHECK(f.delivered.empty());
  REQUIRE(f.Arrive(kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process(), kRelay});
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("the sender's fill and the relay's, both before the marker: one delivered, the sender's",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  REQUIRE(f.Fill(kSender.process(), kSender, 0).ok());
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process()});
  CHECK(f.order.duplicates() == 1);
  // Long: the sender's start is delivered (its grants go to the sender,
  // which waits for them), the relay's goes to the refill (the long
  // receiver tells it to stop).
  REQUIRE(f.Fill(kRelay, kSender, 1, wire::FrameKind::kLongStart).ok());
  REQUIRE(f.Fill(kSender.process(), kSender, 1, wire::FrameKind::kLongStart).ok());
  REQUIRE(f.Marker(kSender, 1, kRelay, kLong).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.refilled == std::vector<std::string>{"1"});
  CHECK(f.carriers == std::vector<Gid>{kSender.process(), kSender.process(), kRelay});
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill crowding out its relay's own loses that number, with a warning, not the pair",
          "[order][multicast]") {
  // (A relay carries a number once: kFillsPerCarrier is 1. Only a relay
  // that misbehaves carries a misfit first.)
  Fixture f;
  REQUIRE(f.ForgedFill(kRelay, kSender, 0).ok());
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());  // one too many for the relay: dropped
  CHECK(f.order.HeldBytes(kRelay) == kFrameBytes);
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  CHECK(f.order.fills_lost() == 1);
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:1"});
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a carrier gone while its fill is awaited: the number is given up once the sender went on and "
    "the grace period passed",
    "[order][multicast]") {
  Fixture f;
  const auto gone_at = PairOrder::Clock::now();
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.order.CarrierGone(kRelay, gone_at);
  // Nothing waits behind it: the sender's own fill (its fallback) fills it
  // whenever it comes.
  REQUIRE(f.order.Housekeeping(gone_at + kGrace).ok());
  CHECK(f.order.fills_lost() == 0);
  REQUIRE(f.Fill(kSender.process(), kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  // The sender goes on without one: given up once the grace period passed
  // since the exit and since the stall was seen, never before, with what
  // waited behind.
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 2).ok());
  REQUIRE(f.order.Housekeeping(gone_at).ok());  // sees the stall
  REQUIRE(f.order.Housekeeping(gone_at + kGrace / 2).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  REQUIRE(f.order.Housekeeping(gone_at + kGrace).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:2"});
  CHECK(f.order.fills_lost() == 1);
  // Gone while a later frame waited already (the exit notice comes last).
  REQUIRE(f.Marker(kSender, 3, kForger).ok());
  REQUIRE(f.Arrive(kSender, 4).ok());
  f.order.CarrierGone(kForger, gone_at + kGrace);
  REQUIRE(f.order.Housekeeping(gone_at + kGrace).ok());
  REQUIRE(f.order.Housekeeping(gone_at + 2 * kGrace - std::chrono::seconds(1)).ok());
  CHECK(f.delivered.size() == 2);
  REQUIRE(f.order.Housekeeping(gone_at + 2 * kGrace).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:2", "3:4"});
  CHECK(f.order.fills_lost() == 2);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a carrier gone long before its marker is reached: the grace period counts from the stall, "
    "the sender's fallback fill after it is delivered in place",
    "[order][multicast]") {
  // Review 4 item 1: the receiver learnt of the relay's exit long before
  // the sender did (or before it reached the marker); the sender's
  // fallback fill, overtaken by its next frame, must still find its place.
  Fixture f;
  const auto gone_at = PairOrder::Clock::now();
  f.order.CarrierGone(kRelay, gone_at);
  const auto reached_at = gone_at + 3 * kGrace;
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  const auto later = reached_at + kGrace + std::chrono::seconds(1);
  REQUIRE(f.order.Housekeeping(later).ok());  // the first to see the stall
  CHECK(f.delivered.empty());
  CHECK(f.order.fills_lost() == 0);
  REQUIRE(f.Fill(kSender.process(), kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.order.duplicates() == 0);
  // Not filled for the grace period after the stall was seen: given up.
  REQUIRE(f.Marker(kSender, 2, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 3).ok());
  REQUIRE(f.order.Housekeeping(later).ok());
  REQUIRE(f.order.Housekeeping(later + kGrace - std::chrono::seconds(1)).ok());
  CHECK(f.delivered.size() == 2);
  REQUIRE(f.order.Housekeeping(later + kGrace).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:3"});
  CHECK(f.order.fills_lost() == 1);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "the sender's own fill overtaken by its next frame, its relay gone: delivered in its place",
    "[order][multicast]") {
  // Review 3 item 3: the relay died before answering; the sender's fallback
  // fill travels another network (or is a long start, posted apart from the
  // lane) and its next message comes first.
  Fixture f;
  const auto gone_at = PairOrder::Clock::now();
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.order.CarrierGone(kRelay, gone_at);
  REQUIRE(f.Arrive(kSender, 1).ok());
  REQUIRE(f.order.Housekeeping(gone_at + kGrace / 2).ok());
  CHECK(f.delivered.empty());
  REQUIRE(f.Fill(kSender.process(), kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  // Long: the same.
  REQUIRE(f.Marker(kSender, 2, kRelay, kLong).ok());
  REQUIRE(f.Arrive(kSender, 3).ok());
  REQUIRE(f.order.Housekeeping(gone_at + kGrace / 2).ok());
  REQUIRE(f.Fill(kSender.process(), kSender, 2, wire::FrameKind::kLongStart).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2", "3:3"});
  CHECK(f.order.fills_lost() == 0);
  CHECK(f.order.duplicates() == 0);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a late fill for a number given up: a long one goes to the refill marked given up",
          "[order][multicast]") {
  // Review 4 item 2: the sender's long fill after the give-up must be told
  // "not delivered", never "all here".
  Fixture f;
  const auto gone_at = PairOrder::Clock::now();
  REQUIRE(f.Marker(kSender, 0, kRelay, kLong).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  f.order.CarrierGone(kRelay, gone_at);
  REQUIRE(f.order.Housekeeping(gone_at).ok());
  REQUIRE(f.order.Housekeeping(gone_at + kGrace).ok());
  CHECK(f.delivered == Delivered{"3:1"});
  CHECK(f.order.fills_lost() == 1);
  REQUIRE(f.Fill(kSender.process(), kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.refilled == std::vector<std::string>{"0!"});
  CHECK(f.carriers.back() == kSender.process());
  // A short one given up: dropped and counted.
  REQUIRE(f.Marker(kSender, 2, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 3).ok());
  REQUIRE(f.order.Housekeeping(gone_at + kGrace).ok());
  REQUIRE(f.order.Housekeeping(gone_at + 2 * kGrace).ok());
  CHECK(f.delivered == Delivered{"3:1", "3:3"});
  const uint64_t dropped = f.order.fills_dropped();
  REQUIRE(f.Fill(kSender.process(), kSender, 2).ok());
  CHECK(f.order.fills_dropped() == dropped + 1);
  CHECK(f.delivered.size() == 2);
  // A number filled is not given up: the sender's long fill after its
  // relay's is refilled unmarked, as before.
  REQUIRE(f.Marker(kSender, 4, kRelay, kLong).ok());
  REQUIRE(f.Fill(kRelay, kSender, 4, wire::FrameKind::kLongStart).ok());
  REQUIRE(f.Fill(kSender.process(), kSender, 4, wire::FrameKind::kLongStart).ok());
  CHECK(f.refilled == std::vector<std::string>{"0!", "4"});
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("fills over their relay's budget are dropped, never the relay, their numbers given up",
          "[order][multicast]") {
  Fixture f(/*process_cap=*/2 * kFrameBytes);
  // Its fills outran the markers (honest, but over the budget).
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());  // dropped
  CHECK(f.order.fills_dropped() == 1);
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == 2 * kFrameBytes);
  CHECK(f.broken.empty());
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kSender, 2, kRelay).ok());  // its fill will not come: given up
  REQUIRE(f.Arrive(kSender, 3).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:3"});
  CHECK(f.order.fills_lost() == 1);
  // A fill further ahead than the window is dropped, its carrier kept.
  REQUIRE(f.Fill(kRelay, kSender, 4 + PairOrder::kFillWindow + 1).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 2);
  // The relay's own messages still pass.
  const Gid relay_thread = Gid::Thread(kRelay.host_index(), kRelay.process_index(), 1);
  REQUIRE(f.Arrive(relay_thread, 0).ok());
  f.CheckIndexes();
  CHECK(f.delivered.size() == 4);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "fills dropped over budget naming fresh sources leave no pairs, and the latest drops still "
    "count",
    "[order][multicast]") {
  // Review 4 item 3: a relay whose fill budget is full carries tiny fills,
  // each naming a new source thread: each drop is noted, no pair is kept.
  Fixture f(/*process_cap=*/2 * kFrameBytes);
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  f.CheckIndexes();
  CHECK(f.order.pairs() == 1);
  constexpr uint32_t kFresh = 10000;
  for (uint32_t i = 0; i < kFresh; ++i) {
    // (Fresh threads of the sender's process: its share is full.)
    REQUIRE(f.Fill(kRelay, Gid::Thread(1, 2, 100 + i), 0).ok());
  }
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == kFresh);
  CHECK(f.order.pairs() == 1);
  CHECK(f.InUse() == 2);
  // The latest drops are still judged at their marker: this one is lost.
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());
  f.CheckIndexes();
  REQUIRE(f.MarkersThenMessage(kSender, 3, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:3"});
  CHECK(f.order.fills_lost() == 1);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("the drops noted ahead of their markers are the latest ones: the oldest is forgotten",
          "[order][multicast]") {
  Fixture f(/*process_cap=*/2 * kFrameBytes);
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());  // over budget: dropped, noted first
  CHECK(f.order.drops_remembered() == 1);
  f.CheckIndexes();
  for (uint32_t i = 0; i < PairOrder::kRememberDropped; ++i) {
    REQUIRE(f.Fill(kRelay, Gid::Thread(1, 2, 100 + i), 0).ok());
    CHECK(f.order.drops_remembered() == std::min<size_t>(i + 2, PairOrder::kRememberDropped));
  }
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == PairOrder::kRememberDropped + 1);
  // Number 2's drop is forgotten: at its marker it is awaited, not lost.
  REQUIRE(f.MarkersThenMessage(kSender, 3, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_lost() == 0);
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  REQUIRE(f.Fill(kSender.process(), kSender, 2).ok());  // say, the sender's own
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2", "3:3"});
  f.CheckIndexes();
  CHECK(f.order.drops_remembered() == PairOrder::kRememberDropped);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("one carrier's drops do not flush another's notes", "[order][multicast]") {
  // Review 6 item 5: notes are kept per carrier.
  Fixture f(/*process_cap=*/2 * kFrameBytes);
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());  // over budget: dropped, noted
  CHECK(f.order.drops_remembered() == 1);
  f.CheckIndexes();
  // Another peer has more fills than the notes' capacity dropped (its
  // share full; fresh threads, so each is a new note).
  REQUIRE(f.Fill(kForger, kOtherSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kForger, kOtherSender, 1).ok());
  f.CheckIndexes();
  constexpr uint32_t kMore = PairOrder::kRememberDropped + 100;
  for (uint32_t i = 0; i < kMore; ++i) {
    REQUIRE(f.Fill(kForger, Gid::Thread(1, 5, 100 + i), 0).ok());
  }
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == kMore + 1);
  CHECK(f.order.drops_remembered() == PairOrder::kRememberDropped);
  // The relay's note is still there: at its marker number 2 is given up.
  REQUIRE(f.MarkersThenMessage(kSender, 3, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:3"});
  CHECK(f.order.fills_lost() == 1);
  CHECK(f.broken.empty());
  f.order.Clear();
  f.CheckIndexes();
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a relay dropped, not exited: its fill that comes after is delivered in its place",
          "[order][multicast]") {
  // Review 3 item 2: dropped is not gone for good.
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  f.order.DropProcess(kRelay);  // (as ReceiveLanes::DropBroken does)
  REQUIRE(f.order.Housekeeping(PairOrder::Clock::now()).ok());
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  // Back: a later marker naming it, with a frame behind, waits for its fill
  // even after the grace period.
  REQUIRE(f.Marker(kSender, 2, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 3).ok());
  REQUIRE(f.order.Housekeeping(PairOrder::Clock::now() + 2 * kGrace).ok());
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2", "3:3"});
  CHECK(f.order.fills_lost() == 0);
  CHECK(f.order.duplicates() == 0);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a marker whose fill will not come is skipped by its sender's abort",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.delivered.empty());
  // Only the sender's own process can say so.
  REQUIRE(f.order.Skip(kRelay, LongKey{kSender.raw(), kReceiver.raw(), 0}).ok());
  CHECK(f.delivered.empty());
  REQUIRE(f.Skip(kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:1"});
  // A fill that comes after all is a late second copy.
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  CHECK(f.delivered == Delivered{"3:1"});
  // The same when the sender's "no fill" comes before the marker itself:
  // the relay's late fill is dropped, not refused.
  REQUIRE(f.Skip(kSender, 2).ok());
  REQUIRE(f.Marker(kSender, 2, kRelay).ok());
  REQUIRE(f.Arrive(kSender, 3).ok());
  CHECK(f.delivered == Delivered{"3:1", "3:3"});
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());
  CHECK(f.delivered == Delivered{"3:1", "3:3"});
  CHECK(f.broken.empty());
  CHECK(f.InUse() == 0);
}

TEST_CASE("a second long fill goes to the refill, from its marker's carrier or its sender only",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay, kLong).ok());
  REQUIRE(f.Fill(kRelay, kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.refilled.empty());
  // The sender's fallback: the long receiver decides (take over, answer
  // "all here", or drop).
  REQUIRE(f.Fill(kSender.process(), kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.refilled == std::vector<std::string>{"0"});
  // The relay's again: the long receiver answers it too.
  REQUIRE(f.Fill(kRelay, kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.refilled == std::vector<std::string>{"0", "0"});
  CHECK(f.carriers == std::vector<Gid>{kRelay, kSender.process(), kRelay});
  // A short second fill is just dropped.
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  REQUIRE(f.Fill(kSender.process(), kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.order.duplicates() == 1);
  CHECK(f.refilled.size() == 2);
  // Anyone else: dropped, not refilled.
  REQUIRE(f.Fill(kForger, kSender, 0, wire::FrameKind::kLongStart).ok());
  CHECK(f.refilled.size() == 2);
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.InUse() == 0);
}

TEST_CASE("fills held for a carrier count against its own budget, not its pairs",
          "[order][multicast]") {
  Fixture f(/*process_cap=*/3 * kFrameBytes);
  for (uint64_t seq = 1; seq <= 3; ++seq) REQUIRE(f.Fill(kForger, kSender, seq).ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kForger) == 3 * kFrameBytes);
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  // One more is over its budget: that fill is dropped, nothing else.
  REQUIRE(f.Fill(kForger, kSender, 4).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.broken.empty());
  CHECK(f.order.HeldBytes(kForger) == 3 * kFrameBytes);
  // Its own pairs have their own cap: 3 frames held ahead still fit.
  const Gid forger_thread = Gid::Thread(kForger.host_index(), kForger.process_index(), 1);
  for (uint64_t seq = 1; seq <= 3; ++seq) REQUIRE(f.Arrive(forger_thread, seq).ok());
  f.CheckIndexes();
  CHECK(f.broken.empty());
  REQUIRE(f.Arrive(forger_thread, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Arrive(kSender, 0).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"1:0", "1:1", "1:2", "1:3", "3:0"});
  f.order.Clear();
  f.CheckIndexes();
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("fills held for a source that sends no markers give way to another source's, and age out",
          "[order][multicast]") {
  constexpr uint64_t kHeld = 1000;
  Fixture f(/*process_cap=*/kHeld * kFrameBytes);
  // A process has the relay carry its own multicasts' fills ahead, and
  // never sends their markers: its whole share of the relay's budget.
  for (uint64_t seq = 1; seq <= kHeld; ++seq) REQUIRE(f.Fill(kRelay, kOtherSender, seq).ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == kHeld * kFrameBytes);
  CHECK(f.order.fills_dropped() == 0);
  // A real multicast through the same relay (another source process):
  // its fill overtakes its marker, and is held (the newest of the
  // other's goes: the relay's total is process_cap) and delivered.
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.order.HeldBytes(kRelay) == kHeld * kFrameBytes);
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.order.fills_lost() == 0);
  // Before the grace nothing ages; after it the held fills are gone, with
  // their charge (and a marker that comes after all gives its number up).
  REQUIRE(f.order.Housekeeping(std::chrono::steady_clock::now()).ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == (kHeld - 1) * kFrameBytes);
  REQUIRE(f.order.Housekeeping(std::chrono::steady_clock::now() + kGrace + std::chrono::seconds(1))
              .ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == 0);
  CHECK(f.order.fills_dropped() == kHeld);
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
  REQUIRE(f.Arrive(kOtherSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kOtherSender, 1, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Arrive(kOtherSender, 2).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_lost() == 1);
  CHECK(f.delivered == Delivered{"3:0", "3:0", "3:2"});
  CHECK(f.broken.empty());
}

TEST_CASE("a fill whose marker waits behind a gap does not age out: the marker judged it",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());  // awaits its fill
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());  // held behind it
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());    // fits marker 1: held
  CHECK(f.order.HeldBytes(kRelay) == kFrameBytes);
  f.CheckIndexes();
  // Fill 0 is slow (a long message, a relay carrying to one receiver after
  // another): fill 1 has waited past the grace, but its marker is here.
  REQUIRE(f.order.Housekeeping(std::chrono::steady_clock::now() + kGrace + std::chrono::seconds(1))
              .ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 0);
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.order.fills_lost() == 0);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill that came before its marker, held behind a gap, and does not fit it ages out",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Fill(kForger, kSender, 1).ok());   // unjudged: no marker yet
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());  // awaits its fill
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());  // held behind it; names kRelay
  CHECK(f.order.HeldBytes(kForger) == kFrameBytes);
  f.CheckIndexes();
  REQUIRE(f.order.Housekeeping(std::chrono::steady_clock::now() + kGrace + std::chrono::seconds(1))
              .ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.order.HeldBytes(kForger) == 0);
  // Not noted as number 1's fill: the relay's is still taken.
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "3:1"});
  CHECK(f.order.fills_lost() == 0);
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill waits past the grace while its pair moves, and ages once the pair stalls",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Fill(kRelay, kSender, 2).ok());  // ahead of its marker
  const auto t = std::chrono::steady_clock::now();
  f.CheckIndexes();
  SECTION("moving: messages 0 and 1 come less than the grace apart, then marker 2") {
    REQUIRE(f.order.Housekeeping(t + kGrace / 2).ok());
    f.CheckIndexes();
    REQUIRE(f.Arrive(kSender, 0).ok());
    f.CheckIndexes();
    REQUIRE(f.order.Housekeeping(t + kGrace - std::chrono::seconds(1)).ok());  // moved
    REQUIRE(f.Arrive(kSender, 1).ok());
    f.CheckIndexes();
    // The fill is almost twice the grace old, but the pair moved within it.
    REQUIRE(f.order.Housekeeping(t + 2 * kGrace - std::chrono::seconds(2)).ok());
    f.CheckIndexes();
    CHECK(f.order.fills_dropped() == 0);
    REQUIRE(f.Marker(kSender, 2, kRelay).ok());
    f.CheckIndexes();
    CHECK(f.delivered == Delivered{"3:0", "3:1", "3:2"});
    CHECK(f.order.fills_lost() == 0);
  }
  SECTION("stalled after message 0: the fill ages a grace after the pair last moved") {
    REQUIRE(f.Arrive(kSender, 0).ok());
    f.CheckIndexes();
    REQUIRE(f.order.Housekeeping(t + std::chrono::seconds(1)).ok());  // moved
    REQUIRE(f.order.Housekeeping(t + kGrace).ok());
    f.CheckIndexes();
    CHECK(f.order.fills_dropped() == 0);
    REQUIRE(f.order.Housekeeping(t + kGrace + std::chrono::seconds(1)).ok());
    f.CheckIndexes();
    CHECK(f.order.fills_dropped() == 1);
    REQUIRE(f.Marker(kSender, 1, kRelay).ok());
    f.CheckIndexes();
    REQUIRE(f.Fill(kRelay, kSender, 1).ok());
    f.CheckIndexes();
    REQUIRE(f.Marker(kSender, 2, kRelay).ok());  // its fill was dropped: given up
    CHECK(f.delivered == Delivered{"3:0", "3:1"});
    f.CheckIndexes();
    CHECK(f.order.fills_lost() == 1);
  }
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("pairs made by fills that aged out go with them", "[order][multicast]") {
  constexpr uint32_t kFresh = 100;
  Fixture f(/*process_cap=*/kFresh * kFrameBytes);
  const size_t before = f.order.pairs();
  // Fills naming a fresh source thread each: a pair each, held until they
  // age out (else a carrier could leave pairs without bound, kFresh at a
  // time).
  for (uint32_t t = 0; t < kFresh; ++t) {
    REQUIRE(f.Fill(kRelay, Gid::Thread(1, 200, 10 + t), 1).ok());
  }
  f.CheckIndexes();
  CHECK(f.order.pairs() == before + kFresh);
  REQUIRE(f.order.Housekeeping(std::chrono::steady_clock::now() + kGrace + std::chrono::seconds(1))
              .ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == kFresh);
  CHECK(f.order.pairs() == before);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a carrier's fills in all are bounded at process_cap: a light source's fill gets in, the "
    "newest of the largest share goes",
    "[order][multicast]") {
  // Review 6 item 4: a carrier names fills of 4 made-up source processes
  // (or 4 processes send no markers) up to its whole budget.
  Fixture f(/*process_cap=*/8 * kFrameBytes);
  const auto source = [](uint32_t p) { return Gid::Thread(1, 100 + p, 1); };
  const uint64_t held[] = {3, 2, 2, 1};  // fills per made-up source (1..n)
  for (uint32_t p = 0; p < 4; ++p) {
    for (uint64_t seq = 1; seq <= held[p]; ++seq) REQUIRE(f.Fill(kRelay, source(p), seq).ok());
  }
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 0);
  CHECK(f.order.HeldBytes(kRelay) == 8 * kFrameBytes);
  // An honest source's fill ahead of its marker: held; the newest fill of
  // the largest share (source 0's number 3) goes in its place.
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 1);
  CHECK(f.order.HeldBytes(kRelay) == 8 * kFrameBytes);
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0"});
  // Full again; a fill whose share ties the largest (source 1 holds 2, as
  // much as any) is itself dropped.
  REQUIRE(f.Fill(kRelay, source(3), 2).ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == 8 * kFrameBytes);
  REQUIRE(f.Fill(kRelay, source(1), 3).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 2);
  CHECK(f.order.HeldBytes(kRelay) == 8 * kFrameBytes);
  // Source 0's newest was the one dropped, and noted: its number 3 is given
  // up at its marker, 1 and 2 are delivered.
  REQUIRE(f.Arrive(source(0), 0).ok());
  f.CheckIndexes();
  for (uint64_t seq = 1; seq <= 3; ++seq) REQUIRE(f.Marker(source(0), seq, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Arrive(source(0), 4).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "1:0", "1:1", "1:2", "1:4"});
  CHECK(f.order.fills_lost() == 1);
  CHECK(f.order.HeldBytes(kRelay) == 6 * kFrameBytes);
  // At the tie the arriving fill went, not another share's newest: source
  // 1's number 3 is not held, so at its marker it is given up too.
  REQUIRE(f.Arrive(source(1), 0).ok());
  f.CheckIndexes();
  for (uint64_t seq = 1; seq <= 3; ++seq) REQUIRE(f.Marker(source(1), seq, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_lost() == 2);
  CHECK(f.delivered == Delivered{"3:0", "1:0", "1:1", "1:2", "1:4", "1:0", "1:1", "1:2"});
  CHECK(f.order.HeldBytes(kRelay) == 4 * kFrameBytes);
  CHECK(f.broken.empty());
  f.order.Clear();
  f.CheckIndexes();
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a larger fill makes room by dropping several fills over two shares, the largest first, or is "
    "dropped when it would make its share the largest",
    "[order][multicast]") {
  // Review 8 item 3: fills of several frames need more than one dropped.
  Fixture f(/*process_cap=*/8 * kFrameBytes);
  const auto source = [](uint32_t p) { return Gid::Thread(1, 100 + p, 1); };
  for (uint64_t seq = 1; seq <= 4; ++seq) REQUIRE(f.Fill(kRelay, source(0), seq).ok());
  f.CheckIndexes();
  for (uint64_t seq = 1; seq <= 3; ++seq) REQUIRE(f.Fill(kRelay, source(1), seq).ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == 7 * kFrameBytes);
  // Four frames' worth (size class 2) from a source holding none: 3 frames
  // over the cap. Source 0's number 4 goes (4 > 3), then the two shares tie
  // at 3 and source 1's number 3 goes, then source 0's number 3.
  REQUIRE(buffers::ClassBytes(2) == 4 * kFrameBytes);
  REQUIRE(f.BigFill(kRelay, kSender, 0, /*size_class=*/2).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 3);
  CHECK(f.order.HeldBytes(kRelay) == 8 * kFrameBytes);
  // Its source now holds the most: one more fill of it is itself dropped
  // (and noted), nothing else.
  REQUIRE(f.Fill(kRelay, kSender, 1).ok());
  f.CheckIndexes();
  CHECK(f.order.fills_dropped() == 4);
  CHECK(f.order.HeldBytes(kRelay) == 8 * kFrameBytes);
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kSender, 1, kRelay).ok());  // its fill was dropped: given up
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0"});
  CHECK(f.order.fills_lost() == 1);
  // Sources 0 and 1 kept numbers 1 and 2; 3 and 4 of source 0 and 3 of
  // source 1 are given up at their markers.
  REQUIRE(f.Arrive(source(0), 0).ok());
  for (uint64_t seq = 1; seq <= 4; ++seq) REQUIRE(f.Marker(source(0), seq, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Arrive(source(1), 0).ok());
  for (uint64_t seq = 1; seq <= 3; ++seq) REQUIRE(f.Marker(source(1), seq, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "1:0", "1:1", "1:2", "1:0", "1:1", "1:2"});
  CHECK(f.order.fills_lost() == 4);
  CHECK(f.order.HeldBytes(kRelay) == 0);
  CHECK(f.broken.empty());
  f.order.Clear();
  f.CheckIndexes();
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill dropped to make room for a lighter source is given up at its marker",
          "[order][multicast]") {
  Fixture f(/*process_cap=*/2 * kFrameBytes);
  REQUIRE(f.Fill(kRelay, kOtherSender, 1).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kOtherSender, 2).ok());
  f.CheckIndexes();
  REQUIRE(f.Fill(kRelay, kSender, 0).ok());  // kOtherSender's number 2 goes
  CHECK(f.order.fills_dropped() == 1);
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == 2 * kFrameBytes);
  REQUIRE(f.Arrive(kOtherSender, 0).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kOtherSender, 1, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kOtherSender, 2, kRelay).ok());
  f.CheckIndexes();
  REQUIRE(f.Arrive(kOtherSender, 3).ok());
  f.CheckIndexes();
  REQUIRE(f.Marker(kSender, 0, kRelay).ok());
  f.CheckIndexes();
  CHECK(f.delivered == Delivered{"3:0", "3:1", "3:3", "3:0"});
  CHECK(f.order.fills_lost() == 1);
  CHECK(f.broken.empty());
  CHECK(f.unexpected == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a sender dropped takes the fills others carried for it, and their charge",
          "[order][multicast]") {
  Fixture f;
  REQUIRE(f.Fill(kRelay, kSender, 3).ok());
  f.CheckIndexes();
  REQUIRE(f.Arrive(kSender, 2).ok());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == kFrameBytes);
  f.order.DropProcess(kSender.process());
  f.CheckIndexes();
  CHECK(f.order.HeldBytes(kRelay) == 0);
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.unexpected == 0);
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

TEST_CASE("a skip for a pair not seen makes one only for a receiver of this process",
          "[order][multicast]") {
  Fixture f;
  // Forged aborts to made-up receivers (a relayed abort names any): no state.
  for (uint32_t thread = 100; thread < 200; ++thread) {
    const Gid made_up = Gid::Thread(1, 9, thread);
    REQUIRE(f.order
                .Skip(kOtherSender.process(), LongKey{kOtherSender.raw(), made_up.raw(), 7},
                      /*receiver_here=*/false)
                .ok());
  }
  CHECK(f.order.pairs() == 0);
  // An honest sender's abort before anything of the pair came: kept.
  REQUIRE(f.Skip(kSender, 0).ok());
  CHECK(f.order.pairs() == 1);
  REQUIRE(f.Arrive(kSender, 1).ok());
  CHECK(f.delivered == Delivered{"3:1"});
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
  f.CheckIndexes();
  REQUIRE(f.Arrive(kOtherSender, 2).ok());
  f.CheckIndexes();
  CHECK(f.InUse() == 2);
  f.order.Clear();
  f.CheckIndexes();
  CHECK(f.unexpected == 0);
  CHECK(f.order.HeldBytes(kSender.process()) == 0);
  CHECK(f.InUse() == 0);
}

}  // namespace
}  // namespace tocl::runtime
