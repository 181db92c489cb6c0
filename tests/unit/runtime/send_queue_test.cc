// The send queue of one destination process, without networks: routes that
// take frames, say TryAgain or break; frames posted at once, queued in
// order, flushed, rerouted or failed; sequence numbers per thread pair;
// back-pressure; every frame counted once, by the route that took it.
#include "runtime/send_queue.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "runtime/fragment_scheduler.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

constexpr Gid kPeer = Gid::Process(1, 9);
constexpr Gid kAlice = Gid::Thread(1, 2, 3);  // senders of this process
constexpr Gid kBob = Gid::Thread(1, 2, 4);
constexpr Gid kCarol = Gid::Thread(kPeer, 1);  // receivers in the peer
constexpr Gid kDave = Gid::Thread(kPeer, 2);
constexpr uint32_t kPayload = 8;
constexpr uint64_t kFrameBytes = wire::kHeaderBytes + kPayload;

// A route that takes frames (setting them kSent and dropping the
// reference, as a subsystem does when done), says TryAgain, or is broken.
class FakeRoute final : public subsystem::Route {
 public:
  enum class Mode { kAccept, kTryAgain, kBroken };

  explicit FakeRoute(bool copies) : copies_(copies) {}

  Status Post(detail::BufferSlot* slot) override {
    ++calls;
    if (Status refused = Refusal(); !refused.ok()) return refused;
    taken.push_back(slot->header());
    slot->set_state(BufferState::kSent);
    slot->pool->Unref(slot);
    return Status::Ok();
  }
  Status PostCopy(const wire::Header& header, std::span<const std::byte> payload) override {
    if (!copies_) return Status(StatusCode::kUnimplemented, "no copy path");
    ++calls;
    if (Status refused = Refusal(); !refused.ok()) return refused;
    CHECK(payload.size() == header.length);
    taken.push_back(header);
    return Status::Ok();
  }
  bool Drained() const override { return true; }
  bool Broken() const override { return mode == Mode::kBroken; }

  // The sequence numbers of what it took, in order.
  std::vector<uint64_t> Seqs() const {
    std::vector<uint64_t> seqs;
    for (const wire::Header& header : taken) seqs.push_back(header.seq);
    return seqs;
  }

  Mode mode = Mode::kAccept;
  int calls = 0;
  std::vector<wire::Header> taken;

 private:
  Status Refusal() const {
    if (mode == Mode::kTryAgain) return Status(StatusCode::kTryAgain, "no room");
    if (mode == Mode::kBroken) return Unavailable("connection lost");
    return Status::Ok();
  }

  const bool copies_;
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
  // ready after the first.
  FakeRoute& AddRoute(int network, FakeRoute::Mode mode = FakeRoute::Mode::kAccept,
                      bool copies = false) {
    auto route = std::make_unique<FakeRoute>(copies);
    route->mode = mode;
    FakeRoute& raw = *route;
    queue.AddRoute(network, std::move(route), pool);
    if (queue.state() != SendQueue::State::kReady) queue.Ready();
    return raw;
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
  int progress_calls = 0;
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

}  // namespace
}  // namespace tocl::runtime
