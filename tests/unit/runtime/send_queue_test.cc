// The send queue of one destination process, without networks: routes that
// take frames, say TryAgain or break; frames posted at once, queued in
// order, flushed, rerouted or failed; sequence numbers per thread pair;
// back-pressure; every frame counted once, by the route that took it; the
// receive lanes' way without the queue's lock, opened and closed around
// what waits, raced by threads that post, queue and close.
#include "runtime/send_queue.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "runtime/fragment_scheduler.h"
#include "wire/frame.h"
#include "wire/lanes.h"

namespace tocl::runtime {
namespace {

constexpr Gid kPeer = Gid::Process(1, 9);
constexpr Gid kAlice = Gid::Thread(1, 2, 3);  // senders of this process
constexpr Gid kBob = Gid::Thread(1, 2, 4);
constexpr Gid kCarol = Gid::Thread(kPeer, 1);  // receivers in the peer
constexpr Gid kDave = Gid::Thread(kPeer, 2);
constexpr uint32_t kPayload = 8;
constexpr uint64_t kFrameBytes = wire::kHeaderBytes + kPayload;
// The largest frame a lane of a FakeRoute with lanes takes.
constexpr uint32_t kLaneBytes = wire::kHeaderBytes + 32;

// What a route's lane posts are checked against, kept by the test: it
// outlives the route (Close destroys routes). Atomics: lane posts run on
// several threads, and Catch's macros may not.
struct LaneWatch {
  std::atomic<int> in_lane_posts{0};
  std::atomic<int> lane_overlaps{0};     // two threads on one lane at once
  std::atomic<int> destroyed_in_use{0};  // the route went while a lane post ran
};

// A route that takes frames (setting them kSent and dropping the
// reference, as a subsystem does when done), says TryAgain, or is broken;
// with `lane_bytes`, also on receive lanes (as shm's does).
class FakeRoute final : public subsystem::Route {
 public:
  // kHold: takes frames and keeps them, as a route does until its peer
  // acknowledges them (tcp's window).
  enum class Mode { kAccept, kTryAgain, kBroken, kHold };

  explicit FakeRoute(bool copies, uint32_t lane_bytes = 0, LaneWatch* watch = nullptr)
      : copies_(copies), lane_bytes_(lane_bytes), watch_(watch) {}
  ~FakeRoute() override {
    if (watch_ != nullptr && watch_->in_lane_posts.load() != 0) ++watch_->destroyed_in_use;
  }

  Status Post(detail::BufferSlot* slot) override {
    ++calls;
    if (Status refused = Refusal(mode); !refused.ok()) return refused;
    Take(slot->header());
    if (mode == Mode::kHold) {
      slot->set_state(BufferState::kInFlight);
      held.emplace_back(slot);
      return Status::Ok();
    }
    slot->set_state(BufferState::kSent);
    slot->pool->Unref(slot);
    return Status::Ok();
  }
  Status PostCopy(const wire::Header& header, std::span<const std::byte> payload) override {
    if (!copies_) return Status(StatusCode::kUnimplemented, "no copy path");
    ++calls;
    if (Status refused = Refusal(mode); !refused.ok()) return refused;
    CHECK(payload.size() == header.length);
    Take(header);
    return Status::Ok();
  }
  // Called by one thread at a time per lane (the queue's lane lock), so
  // each lane's record needs no lock of its own; the watch counts any
  // overlap.
  Status PostLane(uint32_t lane, const wire::Header& header,
                  std::span<const std::byte> payload) override {
    if (lane_bytes_ == 0 || wire::kHeaderBytes + payload.size() > lane_bytes_) {
      return Status(StatusCode::kUnimplemented, "not a frame for a lane");
    }
    if (watch_ != nullptr) ++watch_->in_lane_posts;
    if (lane_busy_[lane].exchange(true) && watch_ != nullptr) ++watch_->lane_overlaps;
    for (int i = 0; i < lane_yields; ++i) std::this_thread::yield();
    Status status = Refusal(mode == Mode::kBroken ? mode.load() : lane_mode.load());
    if (status.ok() && header.source == full_for.load()) status = Refusal(Mode::kTryAgain);
    if (status.ok()) {
      lane_taken[lane].push_back(header);
      lane_stamps[lane].push_back(next_stamp_++);
    }
    lane_busy_[lane].store(false);
    if (watch_ != nullptr) --watch_->in_lane_posts;
    return status;
  }
  uint32_t LaneFrameBytes() const override { return lane_bytes_; }
  bool Drained() const override { return held.empty(); }
  bool Broken() const override { return mode == Mode::kBroken; }
  bool Down() const override { return down; }
  std::vector<buffers::SlotRef> TakeUnacknowledged() override {
    if (!down) return {};
    return std::exchange(held, {});
  }
  void Abandon(std::string_view why) override {
    abandoned = std::string(why);
    for (auto& slot : held) slot->set_state(BufferState::kFailed);
    held.clear();
  }

  // The sequence numbers of what it took, in order (not on lanes).
  std::vector<uint64_t> Seqs() const {
    std::vector<uint64_t> seqs;
    for (const wire::Header& header : taken) seqs.push_back(header.seq);
    return seqs;
  }
  // The same of what it took on lane `lane`.
  std::vector<uint64_t> LaneSeqs(uint32_t lane) const {
    std::vector<uint64_t> seqs;
    for (const wire::Header& header : lane_taken[lane]) seqs.push_back(header.seq);
    return seqs;
  }
  size_t LaneFrames() const {
    size_t frames = 0;
    for (const auto& lane : lane_taken) frames += lane.size();
    return frames;
  }

  // Post, PostCopy and Broken obey `mode` (a broken route refuses lane
  // posts too); PostLane obeys `lane_mode`.
  std::atomic<Mode> mode{Mode::kAccept};
  std::atomic<Mode> lane_mode{Mode::kAccept};
  // Down (connecting again): TakeUnacknowledged hands `held` over.
  bool down = false;
  std::vector<buffers::SlotRef> held;
  std::string abandoned;  // Abandon's reason
  // Frames from this sender (a raw Gid) find their lane full.
  std::atomic<uint64_t> full_for{0};
  // A wider window for whoever races a post (Close, another poster).
  int lane_yields = 0;
  int calls = 0;
  // What it took, each with a stamp of when among all it took (lanes
  // included): a pair's frames must be taken in the order of their numbers.
  std::vector<wire::Header> taken;
  std::vector<uint64_t> stamps;
  std::array<std::vector<wire::Header>, wire::kReceiveLanes> lane_taken;
  std::array<std::vector<uint64_t>, wire::kReceiveLanes> lane_stamps;

 private:
  static Status Refusal(Mode mode) {
    if (mode == Mode::kTryAgain) return Status(StatusCode::kTryAgain, "no room");
    if (mode == Mode::kBroken) return Unavailable("connection lost");
    return Status::Ok();
  }
  void Take(const wire::Header& header) {
    taken.push_back(header);
    stamps.push_back(next_stamp_++);
  }

  const bool copies_;
  const uint32_t lane_bytes_;
  LaneWatch* const watch_;
  std::atomic<uint64_t> next_stamp_{0};
  std::array<std::atomic<bool>, wire::kReceiveLanes> lane_busy_{};
};

using Seqs = std::vector<uint64_t>;

BufferState StateOf(const buffers::SlotRef& slot) {
  return static_cast<BufferState>(slot->state.load(std::memory_order_acquire));
}

// A queue with frames from a real pool, recording what it tells the runtime.
struct Fixture : SendQueue::Events {
  explicit Fixture(size_t depth = 64)
      : budget(size_t{4} << 20),
        pool(Network::kShm, 9, memory, budget),
        queue(kPeer, depth, *this) {}

  // A route over network `network` that starts in `mode`; the queue is
  // ready with the routes so far (the first the default).
  FakeRoute& AddRoute(int network, FakeRoute::Mode mode = FakeRoute::Mode::kAccept,
                      bool copies = false, uint32_t lane_bytes = 0, LaneWatch* watch = nullptr) {
    auto route = std::make_unique<FakeRoute>(copies, lane_bytes, watch);
    route->mode = mode;
    FakeRoute& raw = *route;
    queue.AddRoute(network, std::move(route), pool);
    queue.Ready();
    return raw;
  }
  // A route with receive lanes that copies (as shm's).
  FakeRoute& AddLaneRoute(int network, LaneWatch* watch = nullptr) {
    return AddRoute(network, FakeRoute::Mode::kAccept, /*copies=*/true, kLaneBytes, watch);
  }
  buffers::SlotRef Message(Gid from, Gid to) {
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    slot->header() = wire::MessageHeader(from, to, 7, kPayload);
    return slot;
  }
  // Posts a message; the slot (empty when taken) is returned to look at.
  buffers::SlotRef Post(Gid from, Gid to, Status* status = nullptr, int route = -1) {
    buffers::SlotRef slot = Message(from, to);
    Status posted = queue.Post(from, to, slot, route);
    if (status != nullptr) {
      *status = posted;
    } else {
      CHECK(posted.ok());
    }
    return slot;
  }
  // Posts a message and keeps a reference of the test's to watch its state.
  buffers::SlotRef PostWatched(Gid from, Gid to) {
    buffers::SlotRef slot = Message(from, to);
    buffers::SlotRef watched = slot.Share();
    REQUIRE(queue.Post(from, to, slot, -1).ok());
    return watched;
  }
  uint64_t InUse() const { return pool.Stats()[0].in_use; }

  void Queued(SendQueue& queued, bool list) override {
    CHECK(&queued == &queue);
    ++queued_events;
    if (list) ++listed;
  }
  void Rerouted(const SendQueue&, int broken, int alternative) override {
    rerouted.emplace_back(broken, alternative);
  }
  void AwaitProgress() override {
    ++progress_calls;
    if (on_progress) on_progress();
  }

  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
  int queued_events = 0;
  int listed = 0;
  std::vector<std::pair<int, int>> rerouted;
  std::atomic<int> progress_calls{0};  // AwaitRoom's, from any sender
  std::function<void()> on_progress;
  SendQueue queue;  // last: its frames go back to `pool`
};

TEST_CASE("a message goes straight to its route when nothing waits, numbered and counted once",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0);
  for (int i = 0; i < 3; ++i) CHECK_FALSE(f.Post(kAlice, kCarol));  // taken: the handle is empty
  CHECK(route.Seqs() == Seqs{0, 1, 2});
  CHECK(route.taken[0].kind == wire::FrameKind::kMessage);
  CHECK(f.queued_events == 0);
  CHECK(f.queue.rails()[0].frames_sent == 3);
  CHECK(f.queue.rails()[0].bytes_sent == 3 * kFrameBytes);
  CHECK(f.queue.Drained());
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "a route that says TryAgain queues frames in order, and Flush posts them first in, first out",
    "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kTryAgain);
  std::vector<buffers::SlotRef> watched;
  for (int i = 0; i < 3; ++i) watched.push_back(f.PostWatched(kAlice, kCarol));
  for (auto& slot : watched) CHECK(StateOf(slot) == BufferState::kQueued);
  CHECK(f.queued_events == 3);
  CHECK(f.listed == 1);  // put on the poller's list once
  CHECK_FALSE(f.queue.Drained());
  CHECK(f.queue.Flush());  // still no room
  CHECK(f.queue.rails()[0].frames_sent == 0);

  route.mode = FakeRoute::Mode::kAccept;
  CHECK_FALSE(f.queue.Flush());
  CHECK(route.Seqs() == Seqs{0, 1, 2});
  for (auto& slot : watched) CHECK(StateOf(slot) == BufferState::kSent);
  CHECK(f.queue.rails()[0].frames_sent == 3);
  CHECK(f.queue.rails()[0].bytes_sent == 3 * kFrameBytes);
  CHECK(f.queue.Drained());
}

TEST_CASE("a post sends what waits before it, and the poller's Retry lists the queue again",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kTryAgain);
  (void)f.Post(kAlice, kCarol);
  CHECK(f.queue.Retry());  // still waiting: stays listed
  route.mode = FakeRoute::Mode::kAccept;
  (void)f.Post(kAlice, kCarol);
  CHECK(route.Seqs() == Seqs{0, 1});
  CHECK_FALSE(f.queue.Retry());  // nothing waits: off the list

  route.mode = FakeRoute::Mode::kTryAgain;
  (void)f.Post(kAlice, kCarol);
  CHECK(f.listed == 2);  // listed again after Retry found the queue empty
}

TEST_CASE("sequence numbers count per (sending thread, receiving thread) pair and per queue",
          "[send_queue]") {
  Fixture f;
  Fixture other;
  FakeRoute& route = f.AddRoute(0);
  FakeRoute& other_route = other.AddRoute(0);
  (void)f.Post(kAlice, kCarol);
  (void)f.Post(kAlice, kDave);
  (void)f.Post(kAlice, kCarol);
  (void)other.Post(kAlice, kCarol);  // the same pair to another process
  (void)f.Post(kBob, kCarol);
  (void)f.Post(kAlice, kCarol);
  CHECK(route.Seqs() == Seqs{0, 0, 1, 0, 2});
  CHECK(other_route.Seqs() == Seqs{0});
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 3);
  CHECK(f.queue.NextSeq(kBob, kDave) == 0);
}

TEST_CASE("a multicast's fill is posted with its marker's number, without moving the pair's count",
          "[send_queue][multicast]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0);
  (void)f.Post(kAlice, kCarol);
  (void)f.Post(kAlice, kCarol);  // number 1 stands for the marker
  (void)f.Post(kAlice, kCarol);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 3);
  // The relay failed: the sender posts the fill itself, with the marker's
  // number, behind what waits.
  buffers::SlotRef fill = f.Message(kAlice, kCarol);
  fill->header().seq = 1;
  fill->header().flags = wire::kFlagRelayed;
  {
    std::lock_guard lock(f.queue.mu());
    REQUIRE(f.queue.PostNumbered(fill, -1).ok());
  }
  CHECK(route.Seqs() == Seqs{0, 1, 2, 1});
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 3);
  // A relay's fill for a thread of another process goes the same way.
  buffers::SlotRef relayed = f.Message(Gid::Thread(3, 5, 1), kCarol);
  relayed->header().seq = 40;
  relayed->header().flags = wire::kFlagRelayed;
  {
    std::lock_guard lock(f.queue.mu());
    REQUIRE(f.queue.PostNumbered(relayed, -1).ok());
  }
  CHECK(route.Seqs() == Seqs{0, 1, 2, 1, 40});
  CHECK(f.queue.NextSeq(Gid::Thread(3, 5, 1), kCarol) == 0);
  CHECK(f.InUse() == 0);
}

TEST_CASE("PostCopy sends from the caller's memory at once, but never past frames that wait",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kAccept, /*copies=*/true);
  const std::vector<std::byte> payload(kPayload, std::byte{1});
  CHECK(f.queue.PostCopy(kAlice, kCarol, 7, payload).ok());
  CHECK(route.taken.back().length == kPayload);
  CHECK(f.queue.rails()[0].frames_sent == 1);
  CHECK(f.queue.rails()[0].bytes_sent == kFrameBytes);

  route.mode = FakeRoute::Mode::kTryAgain;
  // No room: worth a retry (TryAgain), no number used.
  CHECK(f.queue.PostCopy(kAlice, kCarol, 7, payload).code() == StatusCode::kTryAgain);
  (void)f.Post(kAlice, kCarol);  // queued
  route.mode = FakeRoute::Mode::kAccept;
  CHECK(f.queue.PostCopy(kAlice, kCarol, 7, payload).ok());  // after the queued one
  CHECK(route.Seqs() == Seqs{0, 1, 2});
  CHECK(f.queue.rails()[0].frames_sent == 3);
}

TEST_CASE("frames queued for a route that breaks go over another, but the control frame it refused",
          "[send_queue]") {
  Fixture f;
  FakeRoute& shm = f.AddRoute(3, FakeRoute::Mode::kTryAgain);
  FakeRoute& tcp = f.AddRoute(5);
  REQUIRE(
      f.queue
          .PostControl(0, wire::ControlHeader(wire::FrameKind::kGrant, kAlice, kCarol, /*seq=*/9))
          .ok());  // queued
  CHECK(f.queued_events == 1);
  CHECK(f.InUse() == 1);  // the queue's
  std::vector<buffers::SlotRef> watched;
  watched.push_back(f.PostWatched(kAlice, kCarol));
  watched.push_back(f.PostWatched(kAlice, kCarol));

  shm.mode = FakeRoute::Mode::kBroken;
  CHECK_FALSE(f.queue.Flush());
  CHECK(f.rerouted == std::vector<std::pair<int, int>>{{3, 5}});
  CHECK(tcp.Seqs() == Seqs{0, 1});  // the messages, in order; not the grant
  for (auto& slot : watched) CHECK(StateOf(slot) == BufferState::kSent);
  CHECK(f.queue.default_route() == 1);
  // Failed for good: no retry time ever comes.
  const RailHealth& broken = f.queue.health()[0];
  CHECK(broken.broken);
  CHECK(broken.failed);
  CHECK(broken.retry_at == RailHealth::Clock::time_point::max());
  CHECK_FALSE(broken.UsableAt(RailHealth::Clock::now() + std::chrono::hours(24 * 365)));
  CHECK(f.queue.health()[1].UsableAt(RailHealth::Clock::now()));
  CHECK(f.queue.rails()[0].frames_sent == 0);
  CHECK(f.queue.rails()[1].frames_sent == 2);
  CHECK(f.queue.state() == SendQueue::State::kReady);

  (void)f.Post(kAlice, kCarol);  // the default is the live route now
  CHECK(tcp.Seqs() == Seqs{0, 1, 2});
  CHECK(f.rerouted.size() == 1);  // reported once
  CHECK(f.InUse() == 2);          // the test's watched references
}

TEST_CASE(
    "a route that goes down hands what it holds to another at once, ahead of what waits, "
    "fragments excepted",
    "[send_queue]") {
  Fixture f;
  FakeRoute& first = f.AddRoute(3, FakeRoute::Mode::kHold);
  FakeRoute& second = f.AddRoute(5);
  std::vector<buffers::SlotRef> watched;
  watched.push_back(f.PostWatched(kAlice, kCarol));  // 0 and 1: held by the first route
  watched.push_back(f.PostWatched(kAlice, kCarol));
  REQUIRE(f.queue.PostFragment(0, wire::FragmentHeader(kAlice, kCarol, 7, 9, 0, 100, 1000),
                               std::vector<std::byte>(100), false));
  first.mode = FakeRoute::Mode::kTryAgain;
  watched.push_back(f.PostWatched(kAlice, kCarol));  // 2: waits in the queue
  CHECK(first.held.size() == 3);
  CHECK(StateOf(watched[2]) == BufferState::kQueued);

  first.down = true;
  f.queue.RouteDown(3);
  CHECK(first.held.empty());
  CHECK(second.Seqs() == Seqs{0, 1, 2});  // in order; the fragment is its long send's to resend
  for (auto& slot : watched) CHECK(StateOf(slot) == BufferState::kSent);
  CHECK(f.queue.default_route() == 1);
  CHECK(f.rerouted == std::vector<std::pair<int, int>>{{3, 5}});
  CHECK(f.queue.state() == SendQueue::State::kReady);
  CHECK(f.InUse() == 3);  // the test's references only
  (void)f.Post(kAlice, kCarol);
  CHECK(second.Seqs() == Seqs{0, 1, 2, 3});
}

TEST_CASE("a route that goes down with no other route up keeps what it holds", "[send_queue]") {
  Fixture f;
  FakeRoute& only = f.AddRoute(3, FakeRoute::Mode::kHold);
  buffers::SlotRef watched = f.PostWatched(kAlice, kCarol);
  only.down = true;
  f.queue.RouteDown(3);
  CHECK(only.held.size() == 1);  // it connects again and sends it then
  CHECK(StateOf(watched) == BufferState::kInFlight);
  CHECK(f.queue.default_route() == 0);
  CHECK(f.rerouted.empty());
  f.queue.RouteDown(9);  // a network without a route to the process: nothing
  CHECK(only.held.size() == 1);
}

TEST_CASE(
    "a process that exits fails what its routes hold, one whose host went down keeps it "
    "for the reset",
    "[send_queue]") {
  SECTION("exited") {
    Fixture f;
    FakeRoute& route = f.AddRoute(3, FakeRoute::Mode::kHold);
    buffers::SlotRef watched = f.PostWatched(kAlice, kCarol);
    f.queue.Fail(FailedPrecondition("process h1.p9 has exited (killed)"));
    CHECK(StateOf(watched) == BufferState::kFailed);
    CHECK(route.held.empty());
    CHECK(route.abandoned == "process h1.p9 has exited (killed)");
  }
  SECTION("host down") {
    Fixture f;
    FakeRoute& route = f.AddRoute(3, FakeRoute::Mode::kHold);
    buffers::SlotRef watched = f.PostWatched(kAlice, kCarol);
    f.queue.Fail(Unavailable("host h1 is down"), /*host_down=*/true);
    CHECK(route.abandoned.empty());
    CHECK(route.held.size() == 1);
    REQUIRE(f.queue.ResetAfterHostDown());  // the routes go, and what they held fails with them
  }
}

TEST_CASE("a route that broke stays failed for later long messages, with no news of it in between",
          "[send_queue]") {
  Fixture f;
  FakeRoute& shm = f.AddRoute(3, FakeRoute::Mode::kBroken);
  f.AddRoute(5);
  (void)f.PostWatched(kAlice, kCarol);  // refused: the route is failed for good
  REQUIRE(f.rerouted == std::vector<std::pair<int, int>>{{3, 5}});
  // Long messages' rounds on the queue's health, as SendLong runs them,
  // each long after a silent network would have been tried again (no news
  // of the route in between).
  FragmentScheduler::Limits limits;
  limits.fragment_timeout = std::chrono::milliseconds(10);
  FragmentScheduler scheduler(4 * kPayload, kPayload, 2, limits);
  std::span<RailHealth> health = f.queue.health();
  const RailHealth::Clock::time_point start = RailHealth::Clock::now();
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    const RailHealth::Clock::time_point now =
        start + round * 2 * limits.retry_after_timeouts * limits.fragment_timeout;
    health[0].broken = health[0].broken || shm.Broken();
    const auto failures = scheduler.StartRound(health, now, false);
    REQUIRE(failures.size() == 1);
    CHECK(failures[0].rail == 0);
    CHECK_FALSE(failures[0].news);  // told once, by the reroute
    CHECK_FALSE(health[0].UsableAt(now));
    while (const auto placement = scheduler.Next(health)) {
      CHECK(placement->rail == 1);
      scheduler.Posted(*placement, now);
      // Acknowledged at once: the live route never goes silent.
      CHECK(scheduler.Acknowledge(scheduler.Offset(placement->index),
                                  scheduler.Length(placement->index), now) == 1);
    }
  }
  CHECK(f.rerouted.size() == 1);
  CHECK(f.queue.default_route() == 1);
}

TEST_CASE("a message its route refuses as broken waits for the other route, its number kept",
          "[send_queue]") {
  Fixture f;
  f.AddRoute(0, FakeRoute::Mode::kBroken);
  FakeRoute& tcp = f.AddRoute(1);
  buffers::SlotRef watched = f.PostWatched(kAlice, kCarol);
  CHECK(StateOf(watched) == BufferState::kQueued);  // for the poller, on the other route
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 1);
  CHECK_FALSE(f.queue.Flush());
  CHECK(tcp.Seqs() == Seqs{0});
  CHECK(f.rerouted == std::vector<std::pair<int, int>>{{0, 1}});
}

TEST_CASE("with no route left the message comes back kFailed, unnumbered, and the process fails",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kBroken);
  Status status;
  buffers::SlotRef slot = f.Post(kAlice, kCarol, &status);
  CHECK(status.code() == StatusCode::kUnavailable);
  REQUIRE(slot);  // still the caller's
  CHECK(StateOf(slot) == BufferState::kFailed);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 0);
  CHECK(f.queue.state() == SendQueue::State::kFailed);
  CHECK(f.queue.failure() == status);

  route.mode = FakeRoute::Mode::kAccept;  // too late: failed for good
  buffers::SlotRef later = f.Post(kAlice, kCarol, &status);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK(later);
  CHECK(route.taken.empty());
}

TEST_CASE("when the last route breaks every queued frame ends kFailed and is dropped",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kTryAgain);
  std::vector<buffers::SlotRef> watched;
  for (int i = 0; i < 3; ++i) watched.push_back(f.PostWatched(kAlice, kCarol));
  route.mode = FakeRoute::Mode::kBroken;
  CHECK_FALSE(f.queue.Flush());
  for (auto& slot : watched) CHECK(StateOf(slot) == BufferState::kFailed);
  CHECK(f.InUse() == 3);  // only the test's references are left
  CHECK(f.queue.state() == SendQueue::State::kFailed);
  CHECK(f.queue.Drained());
  CHECK(f.queue.rails()[0].frames_sent == 0);
}

TEST_CASE("a control frame a broken route refuses is dropped, and its caller told",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kBroken);
  CHECK(f.queue
            .PostControl(-1, wire::ControlHeader(wire::FrameKind::kAbort, kAlice, kCarol,
                                                 /*seq=*/4))
            .code() == StatusCode::kUnavailable);
  CHECK(route.calls == 1);
  CHECK(f.InUse() == 0);  // not taken: dropped
  CHECK(f.queued_events == 0);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 0);  // control frames are not numbered
}

TEST_CASE("a control frame goes over the route it names, the default when it names none",
          "[send_queue]") {
  Fixture f;
  FakeRoute& shm = f.AddRoute(3);
  FakeRoute& tcp = f.AddRoute(5);
  CHECK(f.queue.RouteOver(5) == 1);
  CHECK(f.queue.RouteOver(3) == 0);
  CHECK(f.queue.RouteOver(4) == -1);
  const wire::Header grant = wire::ControlHeader(wire::FrameKind::kGrant, kCarol, kAlice, 2);
  REQUIRE(f.queue.PostControl(f.queue.RouteOver(5), grant).ok());
  REQUIRE(f.queue.PostControl(f.queue.RouteOver(4), grant).ok());
  REQUIRE(f.queue.PostControl(/*route=*/7, grant).ok());
  CHECK(tcp.taken.size() == 1);
  REQUIRE(shm.taken.size() == 2);
  CHECK(std::memcmp(&shm.taken[0], &grant, sizeof grant) == 0);  // the header as given
  CHECK(f.InUse() == 0);
}

TEST_CASE("a process without routes takes no control frame", "[send_queue]") {
  Fixture f;
  Status status = f.queue.PostControl(
      -1, wire::ControlHeader(wire::FrameKind::kProbe, kAlice, kCarol, /*seq=*/1));
  CHECK(status.code() == StatusCode::kFailedPrecondition);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a sender waits while depth frames wait, making progress, until the route takes them",
          "[send_queue]") {
  Fixture f(/*depth=*/2);
  FakeRoute& route = f.AddRoute(0, FakeRoute::Mode::kTryAgain);
  f.on_progress = [&] {
    if (f.progress_calls == 3) route.mode = FakeRoute::Mode::kAccept;
  };
  std::unique_lock lock(f.queue.mu());
  (void)f.Post(kAlice, kCarol);
  f.queue.AwaitRoom(lock);  // one waits: room for more
  CHECK(f.progress_calls == 0);
  (void)f.Post(kAlice, kCarol);
  f.queue.AwaitRoom(lock);
  CHECK(f.progress_calls == 3);
  CHECK(lock.owns_lock());
  CHECK(route.Seqs() == Seqs{0, 1});
  CHECK(f.queue.rails()[0].frames_sent == 2);
}

TEST_CASE("a fragment goes straight to its route, through a pool buffer when it cannot copy",
          "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddRoute(0);  // no copy path
  const std::vector<std::byte> piece(100, std::byte{2});
  const wire::Header header =
      wire::FragmentHeader(kAlice, kCarol, 7, /*seq=*/5, /*offset=*/200, 100, /*total=*/1000);
  CHECK(f.queue.PostFragment(0, header, piece, /*resent=*/false));
  CHECK(f.queue.PostFragment(0, header, piece, /*resent=*/true));
  REQUIRE(route.taken.size() == 2);
  CHECK(route.taken[0].kind == wire::FrameKind::kFragment);
  CHECK(route.taken[0].offset == 200);
  route.mode = FakeRoute::Mode::kTryAgain;
  CHECK_FALSE(f.queue.PostFragment(0, header, piece, false));  // never queued
  CHECK(f.queue.Drained());
  const PeerRail& rail = f.queue.rails()[0];
  CHECK(rail.frames_sent == 2);
  CHECK(rail.bytes_sent == 2 * (wire::kHeaderBytes + 100));
  CHECK(rail.fragments_sent == 2);
  CHECK(rail.fragments_resent == 1);
  CHECK(f.InUse() == 0);
}

TEST_CASE("a process failed because its host went down is resolved again, and its numbers go on",
          "[send_queue]") {
  Fixture f;
  f.AddRoute(0);
  (void)f.Post(kAlice, kCarol);
  f.queue.Fail(Unavailable("host h1 is down"), /*host_down=*/true);
  CHECK(f.queue.state() == SendQueue::State::kFailed);
  CHECK(f.queue.ResetAfterHostDown());
  CHECK(f.queue.state() == SendQueue::State::kUnresolved);
  CHECK(f.queue.failure().ok());
  CHECK(f.queue.rails().empty());
  CHECK(f.queue.health().empty());
  CHECK(f.queue.generation() == 1);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 1);

  FakeRoute& again = f.AddRoute(0);
  (void)f.Post(kAlice, kCarol);
  CHECK(again.Seqs() == Seqs{1});

  f.queue.Fail(FailedPrecondition("exited"));
  CHECK_FALSE(f.queue.ResetAfterHostDown());  // an exit is for good
  CHECK(f.queue.state() == SendQueue::State::kFailed);
}

// --- receive lanes: TryPostLane, without the queue's lock ---------------------------

const std::vector<std::byte> kBytes(kPayload, std::byte{1});

TEST_CASE("the lanes are open while nothing waits, closed while frames wait, and Flush opens them",
          "[send_queue][lanes]") {
  Fixture f;
  FakeRoute& route = f.AddLaneRoute(0);
  const uint32_t carol = wire::LaneOf(kCarol);
  CHECK(f.queue.LanesOpen());
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).ok());
  CHECK(route.LaneSeqs(carol) == Seqs{0});
  CHECK(route.taken.empty());  // on the lane, not the route's own way

  route.lane_mode = FakeRoute::Mode::kTryAgain;  // the receiver's lane is full
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() == StatusCode::kTryAgain);
  CHECK(f.queue.LanesOpen());    // nothing waits here
  (void)f.Post(kAlice, kCarol);  // through a pool buffer: waits in the queue
  CHECK_FALSE(f.queue.LanesOpen());
  // Closed for every pair (the check is one flag), and no number used.
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() == StatusCode::kFailedPrecondition);
  CHECK(f.queue.TryPostLane(kBob, kDave, 7, kBytes).code() == StatusCode::kFailedPrecondition);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 2);
  CHECK(f.queue.NextSeq(kBob, kDave) == 0);
  CHECK(f.queue.Flush());  // still no room: still closed
  CHECK_FALSE(f.queue.LanesOpen());

  route.lane_mode = FakeRoute::Mode::kAccept;
  CHECK_FALSE(f.queue.Flush());
  CHECK(f.queue.LanesOpen());
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).ok());
  // The queued one went on the lane too, in its place.
  CHECK(route.LaneSeqs(carol) == Seqs{0, 1, 2});
  CHECK(route.taken.empty());

  // Larger than a lane takes: the queue's way, the lanes stay open.
  const std::vector<std::byte> large(kLaneBytes, std::byte{2});
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, large).code() == StatusCode::kFailedPrecondition);
  CHECK(f.queue.LanesOpen());

  f.queue.Fail(Unavailable("the process exited"));
  CHECK_FALSE(f.queue.LanesOpen());
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() == StatusCode::kFailedPrecondition);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 3);
}

TEST_CASE("a short message in a pool buffer goes on its lane too, any other frame the route's way",
          "[send_queue][lanes]") {
  Fixture f;
  FakeRoute& route = f.AddLaneRoute(0);
  buffers::SlotRef short_one = f.PostWatched(kAlice, kCarol);
  CHECK(StateOf(short_one) == BufferState::kSent);
  CHECK(route.LaneSeqs(wire::LaneOf(kCarol)) == Seqs{0});

  buffers::SlotRef large = f.Message(kAlice, kCarol);
  large->header().length = kLaneBytes;  // larger than a lane takes
  REQUIRE(f.queue.Post(kAlice, kCarol, large, -1).ok());
  REQUIRE(f.queue
              .PostControl(-1, wire::ControlHeader(wire::FrameKind::kGrant, kAlice, kCarol,
                                                   /*seq=*/9))
              .ok());
  // PostCopy likewise.
  const std::vector<std::byte> large_bytes(kLaneBytes, std::byte{2});
  REQUIRE(f.queue.PostCopy(kAlice, kCarol, 7, large_bytes).ok());
  REQUIRE(f.queue.PostCopy(kAlice, kCarol, 7, kBytes).ok());
  REQUIRE(route.taken.size() == 3);
  CHECK(route.taken[0].seq == 1);
  CHECK(route.taken[1].kind == wire::FrameKind::kGrant);
  CHECK(route.taken[2].seq == 2);
  CHECK(route.LaneSeqs(wire::LaneOf(kCarol)) == Seqs{0, 3});
  CHECK(f.queue.Sent(0).frames == 5);
  CHECK(f.InUse() == 1);  // the test's reference only
}

TEST_CASE("a queue whose default route has no lanes never opens them", "[send_queue][lanes]") {
  Fixture f;
  Fixture unresolved;
  f.AddRoute(0, FakeRoute::Mode::kAccept, /*copies=*/true);
  CHECK_FALSE(f.queue.LanesOpen());
  CHECK_FALSE(unresolved.queue.LanesOpen());
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() == StatusCode::kFailedPrecondition);
  CHECK(unresolved.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() ==
        StatusCode::kFailedPrecondition);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 0);
}

TEST_CASE(
    "a full lane says TryAgain and a broken route sends the caller the queue's way, "
    "neither using a number",
    "[send_queue][lanes]") {
  Fixture f;
  FakeRoute& shm = f.AddLaneRoute(3);
  FakeRoute& tcp = f.AddRoute(5);
  shm.lane_mode = FakeRoute::Mode::kTryAgain;
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() == StatusCode::kTryAgain);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 0);
  CHECK(f.queue.LanesOpen());  // a full lane is the receiver's back-pressure, nothing waits here
  shm.lane_mode = FakeRoute::Mode::kAccept;
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).ok());

  shm.mode = FakeRoute::Mode::kBroken;
  CHECK(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).code() == StatusCode::kUnavailable);
  CHECK(f.queue.NextSeq(kAlice, kCarol) == 1);
  // The queue's way finds the route broken: the message goes over tcp, and
  // the lanes stay closed (tcp has none).
  (void)f.Post(kAlice, kCarol);
  CHECK(f.rerouted == std::vector<std::pair<int, int>>{{3, 5}});
  CHECK_FALSE(f.queue.Flush());
  CHECK(tcp.Seqs() == Seqs{1});
  CHECK(shm.LaneSeqs(wire::LaneOf(kCarol)) == Seqs{0});
  CHECK_FALSE(f.queue.LanesOpen());
}

TEST_CASE("what went over the lanes is counted with the route's own, also after the lanes move",
          "[send_queue][lanes]") {
  Fixture f;
  FakeRoute& first = f.AddLaneRoute(3);
  FakeRoute& second = f.AddLaneRoute(5);
  for (int i = 0; i < 3; ++i) REQUIRE(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).ok());
  (void)f.Post(kBob, kDave);  // under mu(), counted in the route's own record
  CHECK(f.queue.Sent(0).frames == 4);
  CHECK(f.queue.Sent(0).bytes == 4 * kFrameBytes);
  CHECK(f.queue.Sent(1).frames == 0);

  // A long send found the first route failing: the default moves, and the
  // lanes with it.
  f.queue.health()[0].Break();
  f.queue.AvoidRoute(0);
  REQUIRE(f.queue.default_route() == 1);
  CHECK(f.queue.LanesOpen());
  for (int i = 0; i < 2; ++i) REQUIRE(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).ok());
  CHECK(first.LaneFrames() == 4);
  CHECK(second.LaneFrames() == 2);
  CHECK(second.LaneSeqs(wire::LaneOf(kCarol)) == Seqs{3, 4});
  CHECK(f.queue.Sent(0).frames == 4);
  CHECK(f.queue.Sent(0).bytes == 4 * kFrameBytes);
  CHECK(f.queue.Sent(1).frames == 2);
  CHECK(f.queue.Sent(1).bytes == 2 * kFrameBytes);
}

TEST_CASE("Post tells a frame's number before its route can carry it", "[send_queue]") {
  Fixture f;
  FakeRoute& route = f.AddLaneRoute(0);
  REQUIRE(f.queue.TryPostLane(kAlice, kCarol, 7, kBytes).ok());
  std::vector<uint64_t> told;
  // A long message's start (which goes the route's own way).
  buffers::SlotRef slot =
      *f.queue.HeaderFrame(0, wire::LongStartHeader(kAlice, kCarol, 7, 1 << 20, 1 << 16));
  REQUIRE(f.queue
              .Post(kAlice, kCarol, slot, -1,
                    [&](uint64_t seq) {
                      CHECK(route.taken.empty());
                      told.push_back(seq);
                    })
              .ok());
  CHECK(told == Seqs{1});
  CHECK(route.Seqs() == Seqs{1});

  Fixture unresolved;  // no number to tell
  buffers::SlotRef other = unresolved.Message(kAlice, kCarol);
  CHECK_FALSE(
      unresolved.queue.Post(kAlice, kCarol, other, -1, [&](uint64_t seq) { told.push_back(seq); })
          .ok());
  CHECK(told.size() == 1);
}

// A message from `from` to `to` as SendSide::SendCopy sends it: on the
// lane without the queue's lock, else by PostCopy under it, waiting a few
// rounds for room in a full lane, then through a pool buffer (queued
// behind what waits, with back-pressure). No Catch macros: called from
// several threads.
Status SendLikeSendSide(Fixture& f, Gid from, Gid to) {
  constexpr int kFullRounds = 8;
  for (int round = 0;; ++round) {
    Status status = f.queue.TryPostLane(from, to, 7, kBytes);
    if (!status.ok() && status.code() != StatusCode::kTryAgain) {
      std::lock_guard lock(f.queue.mu());
      status = f.queue.PostCopy(from, to, 7, kBytes);
    }
    if (status.ok()) return status;
    if (status.code() != StatusCode::kTryAgain || round == kFullRounds) break;
    std::this_thread::yield();
  }
  std::unique_lock lock(f.queue.mu());
  buffers::SlotRef slot(f.pool.TryGet(0));
  if (!slot) return ResourceExhausted("no pool buffer");
  slot->header() = wire::MessageHeader(from, to, 7, kPayload);
  Status status = f.queue.Post(from, to, slot, -1);
  if (status.ok()) f.queue.AwaitRoom(lock);  // back-pressure
  return status;
}

TEST_CASE(
    "8 threads on the lanes and one queueing frames of the same pairs: each pair's numbers "
    "are unique, gap-free and taken in order",
    "[send_queue][lanes]") {
  LaneWatch watch;
  Fixture f(/*depth=*/4096);  // a bound on the pool buffers queued, rarely reached
  FakeRoute& route = f.AddLaneRoute(0, &watch);
  route.lane_yields = 1;  // numbered, not yet taken: others' posts of the pair must wait
  constexpr int kSenders = 8;
  constexpr int kReceivers = 4;  // so each lane has two or more senders
  constexpr int kMessages = 2000;
  constexpr int kMessagesPerRound = 50;  // by each sender
  std::vector<Gid> senders;
  std::vector<Gid> receivers;
  for (int s = 0; s < kSenders; ++s) senders.push_back(Gid::Thread(1, 2, 10 + s));
  for (int r = 0; r < kReceivers; ++r) receivers.push_back(Gid::Thread(kPeer, 1 + r));

  // The senders and the numbering thread pace each other (neither runs
  // ahead by more than a round), so they overlap however they are scheduled.
  constexpr int kRounds = kMessages / kMessagesPerRound;
  std::atomic<int> rounds{0};
  std::array<std::atomic<int>, kSenders> progress{};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < kSenders; ++s) {
    threads.emplace_back([&, s] {
      for (int i = 0; i < kMessages; ++i) {
        while (rounds.load() < i / kMessagesPerRound) std::this_thread::yield();
        if (!SendLikeSendSide(f, senders[s], receivers[(s + i) % kReceivers]).ok()) ++failed;
        progress[s].store(i + 1);
      }
    });
  }
  // Numbers a frame of every pair under the queue's lock, posted at once
  // (the lanes stay open meanwhile); then one of another sender that finds
  // its lane full (queued: the lanes close, while that lane's lock is held
  // senders to it wait for it), and another of every pair behind it, and
  // lets the waiting senders run (the lanes take their frames now, but
  // they must go behind); the route takes the queued ones at once (Flush
  // opens the lanes) or, every fourth round, only in the next (the senders
  // queue behind meanwhile).
  const Gid queuer = Gid::Thread(1, 2, 99);
  auto post_each_pair = [&] {
    for (int pair = 0; pair < kSenders * kReceivers; ++pair) {
      buffers::SlotRef slot(f.pool.TryGet(0));
      if (!slot) {
        ++failed;
        continue;
      }
      const Gid from = senders[pair % kSenders];
      const Gid to = receivers[pair / kSenders];
      slot->header() = wire::MessageHeader(from, to, 7, kPayload);
      if (!f.queue.Post(from, to, slot, -1).ok()) ++failed;
    }
  };
  threads.emplace_back([&] {
    for (int round = 0; round < kRounds; ++round) {
      for (int s = 0; s < kSenders; ++s) {
        while (progress[s].load() < round * kMessagesPerRound / 2) std::this_thread::yield();
      }
      std::lock_guard lock(f.queue.mu());
      route.full_for = 0;
      if (!f.queue.Flush()) post_each_pair();  // at once
      route.full_for = queuer.raw();
      buffers::SlotRef slot(f.pool.TryGet(0));
      if (!slot) ++failed;
      if (slot) {
        slot->header() = wire::MessageHeader(queuer, receivers[0], 7, kPayload);
        if (!f.queue.Post(queuer, receivers[0], slot, -1).ok()) ++failed;
      }
      post_each_pair();  // queued
      for (int i = 0; i < 4; ++i) std::this_thread::yield();
      if (round % 4 != 0) {
        route.full_for = 0;
        (void)f.queue.Flush();
      }
      rounds.fetch_add(1);
    }
    std::lock_guard lock(f.queue.mu());
    route.full_for = 0;
  });
  for (std::thread& thread : threads) thread.join();

  CHECK(failed.load() == 0);
  CHECK(watch.lane_overlaps.load() == 0);
  CHECK_FALSE(f.queue.Flush());
  // Frames were queued (and the route took every one on a lane).
  CHECK(f.queued_events >= kRounds * kSenders * kReceivers);
  CHECK(route.taken.empty());

  // Each pair's frames in the order the route took them (by stamp).
  std::map<std::pair<uint64_t, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>> by_pair;
  auto add = [&](const wire::Header& header, uint64_t stamp) {
    by_pair[{header.source, header.destination}].emplace_back(stamp, header.seq);
  };
  for (size_t i = 0; i < route.taken.size(); ++i) add(route.taken[i], route.stamps[i]);
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    for (size_t i = 0; i < route.lane_taken[lane].size(); ++i) {
      add(route.lane_taken[lane][i], route.lane_stamps[lane][i]);
    }
  }
  CHECK(by_pair.size() == static_cast<size_t>(kSenders * kReceivers + 1));
  uint64_t frames = 0;
  for (auto& [pair, taken] : by_pair) {
    std::sort(taken.begin(), taken.end());
    std::vector<uint64_t> seqs;
    for (const auto& [stamp, seq] : taken) seqs.push_back(seq);
    std::vector<uint64_t> expected(seqs.size());
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
    INFO("pair " << Gid::FromRaw(pair.first).ToString() << " -> "
                 << Gid::FromRaw(pair.second).ToString());
    // (Not CHECK(seqs == expected): thousands of numbers in the message.)
    CHECK(std::mismatch(seqs.begin(), seqs.end(), expected.begin()).first == seqs.end());
    CHECK(f.queue.NextSeq(Gid::FromRaw(pair.first), Gid::FromRaw(pair.second)) == seqs.size());
    frames += seqs.size();
  }
  CHECK(f.queue.Sent(0).frames == frames);
  CHECK(f.queue.Sent(0).bytes == frames * kFrameBytes);
  CHECK(f.InUse() == 0);
}

TEST_CASE(
    "routes closed or reset while threads post on lanes: no post is left inside them, and "
    "each is sent or refused",
    "[send_queue][lanes]") {
  const bool reset = GENERATE(false, true);
  INFO((reset ? "ResetAfterHostDown" : "Close"));
  LaneWatch watch;
  Fixture f;
  FakeRoute& route = f.AddLaneRoute(0, &watch);
  route.lane_yields = 4;  // posts that last: Close must wait for them
  constexpr int kSenders = 8;
  std::atomic<uint64_t> sent{0};
  std::atomic<int> refused{0};
  std::atomic<bool> closed{false};
  std::vector<std::thread> threads;
  std::vector<uint64_t> sent_by(kSenders, 0);
  for (int s = 0; s < kSenders; ++s) {
    threads.emplace_back([&, s] {
      const Gid from = Gid::Thread(1, 2, 10 + s);
      const Gid to = Gid::Thread(kPeer, 1 + s);
      // Posts until one is refused after the close.
      for (;;) {
        const bool after = closed.load();
        Status status = SendLikeSendSide(f, from, to);
        if (status.ok()) {
          ++sent;
          ++sent_by[s];
        } else {
          ++refused;
          if (after) return;
        }
      }
    });
  }
  while (sent.load() < 2000) std::this_thread::yield();
  {
    std::lock_guard lock(f.queue.mu());
    if (reset) {
      f.queue.Fail(Unavailable("host h1 is down"), /*host_down=*/true);
      CHECK(f.queue.ResetAfterHostDown());
    } else {
      f.queue.Close(Unavailable("the runtime shut down"));
    }
  }
  closed.store(true);
  for (std::thread& thread : threads) thread.join();

  CHECK(watch.destroyed_in_use.load() == 0);
  CHECK(watch.lane_overlaps.load() == 0);
  CHECK(refused.load() >= kSenders);
  // A number for each message sent, none for those refused.
  for (int s = 0; s < kSenders; ++s) {
    CHECK(f.queue.NextSeq(Gid::Thread(1, 2, 10 + s), Gid::Thread(kPeer, 1 + s)) == sent_by[s]);
  }
  if (!reset) CHECK(f.queue.Sent(0).frames == sent.load());  // the routes' records outlive them
}

}  // namespace
}  // namespace tocl::runtime
