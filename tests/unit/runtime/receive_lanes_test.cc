// The receive lanes of a process (runtime/receive_lanes.h): frames put in
// order per pair in the lane of their receiving thread, under that lane's
// lock, by several threads at once; a lane's holder delivering for its own
// lane; held bytes capped per lane; a broken sender dropped from every lane;
// skips in the right lane.
#include "runtime/receive_lanes.h"

#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "wire/frame.h"
#include "wire/lanes.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kLanes = wire::kReceiveLanes;
constexpr Gid kSendingProcess = Gid::Process(1, 2);
constexpr Gid kOtherProcess = Gid::Process(1, 5);
constexpr Gid kReceivingProcess = Gid::Process(1, 9);
const size_t kFrameBytes = buffers::ClassBytes(0);
constexpr uint32_t kTag = 5;

// Receiving thread `n` of lane `lane` (thread index lane + 8 * (n + 1)).
constexpr Gid ReceiverIn(uint32_t lane, uint32_t n = 0) {
  return Gid::Thread(kReceivingProcess, lane + kLanes * (n + 1));
}

// Looks at `done` every millisecond until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

// Lanes over frames in a real pool. Each delivery is recorded per pair (as
// the sequence numbers delivered, in order) and checked to be alone in its
// lane: two deliveries in one lane at once mean its lock did not hold.
struct Fixture {
  explicit Fixture(size_t process_cap = size_t{64} << 20,
                   PairOrder::Clock::duration grace = std::chrono::seconds(10))
      : budget(size_t{256} << 20),
        pool(Network::kShm, 9, memory, budget),
        lanes(
            process_cap, unexpected,
            [this](Gid from_process, buffers::SlotRef slot) {
              return Deliver(from_process, std::move(slot));
            },
            {}, grace) {}

  Status Deliver(Gid from_process, buffers::SlotRef slot) {
    const wire::Header& header = slot->header();
    const uint32_t lane = wire::LaneOf(Gid::FromRaw(header.destination));
    if (inside[lane].fetch_add(1) != 0) overlaps.fetch_add(1);
    if (Gid::FromRaw(header.source).process() != from_process) wrong_process.fetch_add(1);
    {
      std::lock_guard lock(mu);
      delivered[{header.source, header.destination}].push_back(header.seq);
    }
    // A little while in the lane, so that an unlocked lane shows.
    for (int i = 0; i < 3; ++i) std::this_thread::yield();
    inside[lane].fetch_sub(1);
    return Status::Ok();
  }

  // From any thread (no Catch2 assertions here).
  Status Arrive(Gid source, Gid destination, uint64_t seq) {
    buffers::SlotRef slot(pool.TryGet(0));
    if (!slot) return ResourceExhausted("the test pool is spent");
    slot->header() = wire::MessageHeader(source, destination, kTag, /*length=*/0, seq);
    return lanes.OnOrdered(source.process(), std::move(slot));
  }
  // A multicast's marker: `source`'s number `seq`, carried by `carrier`.
  Status Marker(Gid source, Gid destination, uint64_t seq, Gid carrier, uint64_t nonce) {
    buffers::SlotRef slot(pool.TryGet(0));
    if (!slot) return ResourceExhausted("the test pool is spent");
    slot->header() = wire::MarkerHeader(source, destination, kTag, 0, carrier, seq);
    slot->header().reserved = nonce;
    return lanes.OnOrdered(source.process(), std::move(slot));
  }
  std::vector<uint64_t> Delivered(Gid source, Gid destination) {
    std::lock_guard lock(mu);
    return delivered[{source.raw(), destination.raw()}];
  }
  uint64_t InUse() const { return pool.Stats()[0].in_use; }

  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
  std::atomic<size_t> unexpected{0};
  std::atomic<int> inside[kLanes] = {};
  std::atomic<int> overlaps{0};
  std::atomic<int> wrong_process{0};
  std::mutex mu;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint64_t>> delivered;  // guarded by mu
  ReceiveLanes lanes;
};

std::vector<uint64_t> Sequence(uint64_t count, uint64_t first = 0) {
  std::vector<uint64_t> seqs;
  for (uint64_t seq = first; seq < first + count; ++seq) seqs.push_back(seq);
  return seqs;
}

TEST_CASE("frames for threads of every lane are put in order by several threads at once, each once",
          "[lanes]") {
  Fixture f;
  // Two pairs per lane (two sending processes), each fed by two threads at
  // once: one with its even numbers, one with its odd ones, so that frames
  // come ahead of their turn and wait, and every lane has two feeders.
  constexpr uint64_t kPerPair = 600;
  auto source_of = [](uint32_t lane, uint32_t pair) {
    return Gid::Thread(pair == 0 ? kSendingProcess : kOtherProcess, 1 + lane);
  };
  std::vector<std::thread> feeders;
  std::atomic<int> refused{0};
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    for (uint64_t parity = 0; parity < 2; ++parity) {
      feeders.emplace_back([&, lane, parity] {
        for (uint64_t seq = parity; seq < kPerPair; seq += 2) {
          for (uint32_t pair = 0; pair < 2; ++pair) {
            if (!f.Arrive(source_of(lane, pair), ReceiverIn(lane, pair), seq).ok()) ++refused;
          }
        }
      });
    }
  }
  for (auto& feeder : feeders) feeder.join();
  CHECK(refused.load() == 0);
  CHECK(f.overlaps.load() == 0);
  CHECK(f.wrong_process.load() == 0);
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    for (uint32_t pair = 0; pair < 2; ++pair) {
      INFO("lane " << lane << " pair " << pair);
      CHECK(f.Delivered(source_of(lane, pair), ReceiverIn(lane, pair)) == Sequence(kPerPair));
    }
  }
  CHECK(f.unexpected.load() == 0);
  CHECK(f.lanes.HeldBytes(kSendingProcess) == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a thread holding a lane delivers for that lane without waiting for itself, others wait",
          "[lanes]") {
  // Leaked if the holder hangs (a deadlock): its thread is then left behind.
  auto f = std::make_unique<Fixture>();
  constexpr uint32_t kLane = 3;
  const Gid source = Gid::Thread(kSendingProcess, 1);
  const Gid own = ReceiverIn(kLane, 0);
  const Gid neighbour = ReceiverIn(kLane, 1);  // the same lane, another thread
  std::atomic<bool> holding{false};
  std::atomic<bool> neighbour_started{false};
  std::atomic<bool> done{false};
  std::atomic<int> neighbour_delivered_while_held{-1};
  Status first, second, skip;
  std::thread holder([&, fp = f.get()] {
    fp->lanes.Enter(kLane);
    holding.store(true);
    // As a subsystem draining the lane hands its frames on: the lane is
    // this thread's already.
    first = fp->Arrive(source, own, 1);
    second = fp->Arrive(source, own, 0);
    skip = fp->lanes.Skip(kSendingProcess, LongKey{source.raw(), own.raw(), 3});
    // The neighbour's delivery waits for the lane (a while, to give it the chance).
    if (Eventually([&] { return neighbour_started.load(); }, 10s)) {
      for (int i = 0; i < 2000; ++i) std::this_thread::yield();
      neighbour_delivered_while_held.store(
          static_cast<int>(fp->Delivered(source, neighbour).size()));
    }
    fp->lanes.Leave(kLane);
    done.store(true);
  });
  REQUIRE(Eventually([&] { return holding.load(); }, 10s));
  std::thread other([&, fp = f.get()] {
    neighbour_started.store(true);
    (void)fp->Arrive(source, neighbour, 0);
  });
  const bool finished = Eventually([&] { return done.load(); }, 10s);
  if (!finished) {
    holder.detach();
    other.detach();
    (void)f.release();
    FAIL("the lane's holder is stuck delivering for its own lane");
  }
  holder.join();
  other.join();
  CHECK(first.ok());
  CHECK(second.ok());
  CHECK(skip.ok());
  CHECK(f->Delivered(source, own) == std::vector<uint64_t>{0, 1});
  CHECK(neighbour_delivered_while_held.load() == 0);
  CHECK(f->Delivered(source, neighbour) == std::vector<uint64_t>{0});
  // The skip of 3 holds: 2 and then 4 follow at once.
  REQUIRE(f->Arrive(source, own, 2).ok());
  REQUIRE(f->Arrive(source, own, 4).ok());
  CHECK(f->Delivered(source, own) == std::vector<uint64_t>{0, 1, 2, 4});
  CHECK(f->overlaps.load() == 0);
  CHECK(f->unexpected.load() == 0);
}

// Holds `per_lane` frames of `process` in every lane (its first number is
// missing in each pair), from thread 1 of `process` to thread lane + 8.
void HoldInEveryLane(Fixture& f, Gid process, uint64_t per_lane) {
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    for (uint64_t seq = 1; seq <= per_lane; ++seq) {
      INFO("lane " << lane << " seq " << seq);
      REQUIRE(f.Arrive(Gid::Thread(process, 1), ReceiverIn(lane), seq).ok());
    }
  }
}

TEST_CASE(
    "each lane holds a sending process's early frames up to its share of the cap, all lanes "
    "together up to the cap",
    "[lanes]") {
  constexpr uint64_t kPerLane = 4;
  const size_t process_cap = kLanes * kPerLane * kFrameBytes;
  Fixture f(process_cap);
  HoldInEveryLane(f, kSendingProcess, kPerLane);
  HoldInEveryLane(f, kOtherProcess, kPerLane);  // another process: a cap of its own
  CHECK(f.lanes.HeldBytes(kSendingProcess) == process_cap);
  CHECK(f.lanes.HeldBytes(kOtherProcess) == process_cap);
  CHECK(f.unexpected.load() == 2 * process_cap);
  CHECK(f.InUse() == 2 * kLanes * kPerLane);
  CHECK(f.delivered.empty());

  // One more in any lane is over that lane's share: the sender is broken,
  // and (this caller holding no lane) dropped from every lane at once.
  Status over = f.Arrive(Gid::Thread(kSendingProcess, 1), ReceiverIn(5), kPerLane + 1);
  CHECK(over.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(over.message(),
             Catch::Matchers::Contains(fmt::format("exceed {} bytes", kPerLane * kFrameBytes)));
  CHECK(f.unexpected.load() == process_cap);  // the other process's only
  CHECK(f.lanes.HeldBytes(kSendingProcess) == 0);
  CHECK(f.lanes.HeldBytes(kOtherProcess) == process_cap);
  CHECK(f.InUse() == kLanes * kPerLane);

  // The broken process starts afresh in every lane; the other one's gaps fill.
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    REQUIRE(f.Arrive(Gid::Thread(kSendingProcess, 1), ReceiverIn(lane), 0).ok());
    REQUIRE(f.Arrive(Gid::Thread(kOtherProcess, 1), ReceiverIn(lane), 0).ok());
    CHECK(f.Delivered(Gid::Thread(kSendingProcess, 1), ReceiverIn(lane)) ==
          std::vector<uint64_t>{0});
    CHECK(f.Delivered(Gid::Thread(kOtherProcess, 1), ReceiverIn(lane)) == Sequence(kPerLane + 1));
  }
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a sender found broken by a lane's holder leaves the other lanes once no lane is held",
          "[lanes]") {
  constexpr uint64_t kPerLane = 4;
  const size_t lane_cap = kPerLane * kFrameBytes;
  Fixture f(kLanes * lane_cap);
  HoldInEveryLane(f, kSendingProcess, kPerLane);
  HoldInEveryLane(f, kOtherProcess, 1);
  const size_t others = kLanes * kFrameBytes;

  // A subsystem draining lane 2 hands on a frame over the lane's share.
  f.lanes.Enter(2);
  Status over = f.Arrive(Gid::Thread(kSendingProcess, 1), ReceiverIn(2), 9);
  CHECK(over.code() == StatusCode::kInvalidArgument);
  // Dropped from lane 2; the holder enters no other lane, so they keep theirs.
  CHECK(f.unexpected.load() == (kLanes - 1) * lane_cap + others);
  f.lanes.DropBroken();  // still held: later
  CHECK(f.unexpected.load() == (kLanes - 1) * lane_cap + others);
  f.lanes.Leave(2);

  SECTION("by DropBroken (the poller's housekeeping)") {
    f.lanes.DropBroken();
  }
  SECTION("by the next frame from a thread that holds no lane") {
    REQUIRE(f.Arrive(Gid::Thread(kOtherProcess, 1), ReceiverIn(6), 0).ok());
  }
  SECTION("by the next skip from a thread that holds no lane") {
    const Gid source = Gid::Thread(kOtherProcess, 1);
    REQUIRE(f.lanes.Skip(kOtherProcess, LongKey{source.raw(), ReceiverIn(6).raw(), 0}).ok());
  }
  CHECK(f.lanes.HeldBytes(kSendingProcess) == 0);
  CHECK(f.unexpected.load() <= others);
  CHECK(f.lanes.HeldBytes(kOtherProcess) == f.unexpected.load());
  // Once is enough: nothing is left to drop.
  f.lanes.DropBroken();
  CHECK(f.lanes.HeldBytes(kOtherProcess) == f.unexpected.load());
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    REQUIRE(f.Arrive(Gid::Thread(kSendingProcess, 1), ReceiverIn(lane), 0).ok());
  }
  f.lanes.Clear();
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a skip goes to the lane of the message's receiving thread", "[lanes]") {
  Fixture f;
  // The sending thread's index is in another lane than the receiver's.
  const Gid source = Gid::Thread(kSendingProcess, 2);
  const Gid to = ReceiverIn(5);
  REQUIRE(wire::LaneOf(source) != wire::LaneOf(to));
  REQUIRE(f.Arrive(source, to, 1).ok());
  REQUIRE(f.Arrive(source, to, 3).ok());
  CHECK(f.unexpected.load() == 2 * kFrameBytes);
  // The long message numbered 0 was given up, and then the one numbered 2.
  REQUIRE(f.lanes.Skip(kSendingProcess, LongKey{source.raw(), to.raw(), 0}).ok());
  CHECK(f.Delivered(source, to) == std::vector<uint64_t>{1});
  REQUIRE(f.lanes.Skip(kSendingProcess, LongKey{source.raw(), to.raw(), 2}).ok());
  CHECK(f.Delivered(source, to) == std::vector<uint64_t>{1, 3});
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("skips for receivers not of this process make no state in any lane, nor a carrier gone",
          "[lanes][multicast]") {
  Fixture f;
  // Forged aborts (a relayed one names any receiver) for pairs not seen.
  const Gid source = Gid::Thread(kOtherProcess, 1);
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    REQUIRE(f.lanes
                .Skip(kOtherProcess, LongKey{source.raw(), ReceiverIn(lane).raw(), 9},
                      /*receiver_here=*/false)
                .ok());
  }
  CHECK(f.lanes.Pairs() == 0);
  // A process gone that carried nothing here changes nothing either.
  f.lanes.CarrierGone(kOtherProcess);
  CHECK(f.lanes.Pairs() == 0);
  REQUIRE(f.Arrive(source, ReceiverIn(3), 0).ok());
  CHECK(f.lanes.Pairs() == 1);
  CHECK(f.Delivered(source, ReceiverIn(3)) == std::vector<uint64_t>{0});
}

TEST_CASE("a relay dropped from every lane is not gone: its fill that comes later is delivered",
          "[lanes][multicast]") {
  // Review 3 item 2, through ReceiveLanes: DropBroken drops, it does not
  // mark the process exited.
  constexpr uint64_t kNonce = 77;
  Fixture f(kLanes * 2 * kFrameBytes);
  const Gid source = Gid::Thread(kSendingProcess, 1);
  const Gid to = ReceiverIn(3);
  const Gid relay_thread = Gid::Thread(kOtherProcess, 1);
  {
    buffers::SlotRef marker(f.pool.TryGet(0));
    REQUIRE(marker);
    marker->header() = wire::MarkerHeader(source, to, kTag, 0, kOtherProcess, 0);
    marker->header().reserved = kNonce;
    REQUIRE(f.lanes.OnOrdered(kSendingProcess, std::move(marker)).ok());
  }
  REQUIRE(f.Arrive(source, to, 1).ok());
  // The relay's own frames to another receiver outrun their gap: dropped.
  REQUIRE(f.Arrive(relay_thread, ReceiverIn(5), 1).ok());
  REQUIRE(f.Arrive(relay_thread, ReceiverIn(5), 2).ok());
  CHECK(f.Arrive(relay_thread, ReceiverIn(5), 3).code() == StatusCode::kInvalidArgument);
  f.lanes.DropBroken();
  // Housekeeping long after (some other process did exit) gives nothing up.
  f.lanes.CarrierGone(Gid::Process(1, 6));
  f.lanes.Housekeeping(Clock::now() + 1h);
  CHECK(f.Delivered(source, to).empty());
  buffers::SlotRef fill(f.pool.TryGet(0));
  REQUIRE(fill);
  fill->header() = wire::MessageHeader(source, to, kTag, /*length=*/0, 0);
  fill->header().flags = wire::kFlagRelayed;
  fill->header().offset = kNonce;
  REQUIRE(f.lanes.OnOrdered(kOtherProcess, std::move(fill)).ok());
  CHECK(f.Delivered(source, to) == std::vector<uint64_t>{0, 1});
  f.lanes.Clear();
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a carrier gone: Housekeeping gives its awaited number up after the grace period, at most "
    "once a second",
    "[lanes][multicast]") {
  // Review 4 item 7: the give-up through ReceiveLanes (every lane, rate
  // limited), with ReceiveLanes' default grace of 10 s.
  constexpr auto kGrace = 10s;
  Fixture f;
  const Gid source = Gid::Thread(kSendingProcess, 1);
  const Gid to = ReceiverIn(6);
  REQUIRE(f.Marker(source, to, 0, kOtherProcess, 77).ok());
  REQUIRE(f.Arrive(source, to, 1).ok());
  f.lanes.CarrierGone(kOtherProcess);
  const auto start = Clock::now();
  f.lanes.Housekeeping(start);  // sees the stall
  f.lanes.Housekeeping(start + kGrace - 1ms);
  CHECK(f.Delivered(source, to).empty());
  // Due, but within a second of the last run: nothing.
  f.lanes.Housekeeping(start + kGrace);
  CHECK(f.Delivered(source, to).empty());
  f.lanes.Housekeeping(start + kGrace + 1s);
  CHECK(f.Delivered(source, to) == std::vector<uint64_t>{1});
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a fill held ahead of its marker ages out through Housekeeping with no process gone",
          "[lanes][multicast]") {
  // Review 6 blocker 1: Housekeeping ran only once some carrier exited, so
  // fills waited without bound in a job where none did.
  constexpr auto kGrace = 7s;
  Fixture f(size_t{64} << 20, kGrace);
  const Gid source = Gid::Thread(kSendingProcess, 1);
  const Gid to = ReceiverIn(4);
  const auto hold_fill = [&] {
    buffers::SlotRef fill(f.pool.TryGet(0));
    REQUIRE(fill);
    fill->header() = wire::MessageHeader(source, to, kTag, /*length=*/0, 0);
    fill->header().flags = wire::kFlagRelayed;
    fill->header().offset = 77;
    REQUIRE(f.lanes.OnOrdered(kOtherProcess, std::move(fill)).ok());
  };
  hold_fill();
  CHECK(f.lanes.lanes_with_fills() == 1);
  const auto start = Clock::now();
  f.lanes.Housekeeping(start);
  CHECK(f.unexpected.load() == kFrameBytes);  // held, within the grace
  CHECK(f.InUse() == 1);
  f.lanes.Housekeeping(start + kGrace + 1s);
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
  CHECK(f.Delivered(source, to).empty());
  CHECK(f.lanes.Pairs() == 0);
  // Counted no more (else Housekeeping would run every second for nothing).
  CHECK(f.lanes.lanes_with_fills() == 0);
  hold_fill();
  CHECK(f.lanes.lanes_with_fills() == 1);
  f.lanes.Clear();
  CHECK(f.lanes.lanes_with_fills() == 0);
  CHECK(f.unexpected.load() == 0);
  CHECK(f.InUse() == 0);
}

}  // namespace
}  // namespace tocl::runtime
