// The send queue of one destination process (the ToCL paper's §4.2): a
// route per network that reaches it, the FIFO of frames its routes could not
// take yet, and the sequence numbers (per sending thread, receiving thread
// pair) that let the receiver keep each pair's order across networks
// (pair_order.h).
//
// Every frame to the process goes through here: short messages and
// long-message starts (Post, PostCopy, TryPostLane: numbered in their
// pair's order),
// control frames of long messages (PostControl: outside the order), and
// fragments (PostFragment: straight to one network, never queued; the
// fragment scheduler decides where and when). A frame is posted at once
// when nothing waits before it and its route takes it; otherwise it waits
// here, in order, until Flush (the sender's next post, or the poller's
// Retry) posts it. A short message that fits its route's receive lanes
// goes on its receiving thread's lane whichever way it came (PostFrame). So a frame is owned by the
// queue (a SlotRef) from the moment it is taken until a route has it.
//
// Indexes: a `route` is an index into rails() (this queue's routes, and
// their health()); a `network` is an index into Runtime::Impl::rails
// (PeerRail::rail).
//
// Failure: a route that breaks (Unavailable/FailedPrecondition from Post)
// is failed for good in its health() and hands its frames to another live
// route of the process (Reroute); with none left the process is failed:
// the frame being posted goes back to its caller with the error (state
// kFailed), every queued frame ends kFailed and is dropped, and every later
// post returns the failure. A control frame that finds its route broken is
// not moved but dropped, and its error returned when posted at once (its
// long message recovers by probes and timeouts).
//
// Back-pressure: a sender whose short message leaves `depth` or more frames
// waiting waits for room (AwaitRoom), making progress itself meanwhile.
//
// Counting: a frame is counted once, when a route takes it: in PeerRail
// (Post, PostCopy, PostLane) under mu(), or by TryPostLane in its lane's
// counters; Sent() adds the two.
//
// What it needs of the runtime goes through Events (queued frames for the
// poller, a rerouted network, progress while a sender waits), none of it on
// the path of a message its route takes at once.
//
// Threading: two kinds of lock, taken in this order.
//   - mu() guards the queue: state, routes, health, the FIFO. Every method
//     but process(), mu(), Retry(), TryPostLane(), LanesOpen() and
//     NextSeq() is called with it held. Routes are called under it (one thread at a time per
//     route, as subsystem.h expects), but for Route::PostLane.
//   - Each receive lane (wire/lanes.h: the receiving thread's) has a lock,
//     SendLane::mu, guarding the sequence numbers of the pairs whose
//     receiver is in that lane and the route's PostLane on that lane (one
//     thread at a time per lane, as subsystem.h expects). A pair's number
//     is read, used and advanced under its lane's lock only, by
//     TryPostLane (without mu(): 8 senders to 8 lanes of one process wait
//     on nobody) and by Post and PostCopy (under mu(), then the lane's).
//     A lane's holder takes no other lock of the queue.
// TryPostLane posts only while the lanes are open: the queue is kReady,
// nothing waits in the FIFO and the default route (where PostCopy would
// post too) has lanes and is not broken. Whatever queues a frame closes
// them under that frame's lane lock, so its pair's next TryPostLane finds
// them closed and takes the way through mu(), behind what waits; so does
// failing the process (later sends see the failure) and moving the default
// route. Ready, AvoidRoute and a Flush that empties the FIFO open them.
// Before the lanes post on another route, and before routes are replaced
// or destroyed (AddRoute, ResetAfterHostDown, Close), every lane's lock is
// taken and released once with the lanes closed (QuiesceLanes): no
// TryPostLane still holds the old route. So QuiesceLanes, and Flush and
// everything that may open the lanes, are never called with a lane's lock
// held.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "runtime/fragment_scheduler.h"
#include "runtime/frame_count.h"
#include "subsystem/subsystem.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"
#include "wire/lanes.h"

namespace tocl::runtime {

// One network's route to the process, with what it carried (its health,
// what the network has shown, is SendQueue::health()).
struct PeerRail {
  int rail = -1;  // the network: index in Runtime::Impl::rails
  std::unique_ptr<subsystem::Route> route;
  // The network's pool: header-only frames, fragments its route cannot
  // copy straight from the sender's memory.
  buffers::BufferPool* pool = nullptr;
  // The largest frame the route's lanes take (Route::LaneFrameBytes), 0:
  // no lanes.
  uint32_t lane_frame_bytes = 0;
  // Every frame the route took under mu(), header included in bytes_sent
  // (SendQueue::Sent adds what went over its lanes without mu()).
  uint64_t frames_sent = 0;
  uint64_t bytes_sent = 0;
  uint64_t fragments_sent = 0;
  uint64_t fragments_resent = 0;

  // Route::PostRef and Route::PostCopy, counting what the route took: the
  // one place frames are counted.
  Status Post(buffers::SlotRef& slot) {
    const uint32_t length = slot->header().length;
    Status status = route->PostRef(slot);
    if (status.ok()) Count(length);
    return status;
  }
  Status PostCopy(const wire::Header& header, std::span<const std::byte> payload) {
    Status status = route->PostCopy(header, payload);
    if (status.ok()) Count(header.length);
    return status;
  }
  Status PostLane(uint32_t lane, const wire::Header& header, std::span<const std::byte> payload) {
    Status status = route->PostLane(lane, header, payload);
    if (status.ok()) Count(header.length);
    return status;
  }

 private:
  void Count(uint32_t payload_bytes) {
    ++frames_sent;
    bytes_sent += wire::kHeaderBytes + payload_bytes;
  }
};

class SendQueue {
 public:
  enum class State { kUnresolved, kReady, kFailed };

  // What the queue tells the runtime. Called with mu() held, except
  // AwaitProgress.
  class Events {
   public:
    virtual ~Events() = default;
    // A frame waits in `queue` (a poll round should Retry it). `list`: the
    // first since Retry last found the queue empty: put it on the poller's
    // list.
    virtual void Queued(SendQueue& queue, bool list) = 0;
    // The route over network `broken_network` broke; the process's frames
    // go over network `alternative_network` from now on. Once per route.
    virtual void Rerouted(const SendQueue& queue, int broken_network, int alternative_network) = 0;
    // A sender waits for room in `queue` (mu() not held): poll the networks
    // if nobody else does.
    virtual void AwaitProgress() = 0;
  };

  // `depth`: queued frames at which a sender of short messages waits.
  // `events` must outlive the queue.
  SendQueue(Gid process, size_t depth, Events& events);
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  Gid process() const { return process_; }
  std::mutex& mu() { return mu_; }

  // --- routes ---
  // While kUnresolved: one more route, over `network` (the first is the
  // default).
  void AddRoute(int network, std::unique_ptr<subsystem::Route> route, buffers::BufferPool& pool);
  // The routes are complete: kReady.
  void Ready();
  State state() const { return state_; }
  // Why kFailed (ok otherwise).
  const Status& failure() const { return failure_; }
  // Fixed once kReady.
  const std::vector<PeerRail>& rails() const { return rails_; }
  // The health of each route (parallel to rails()): failed by Reroute and
  // by long sends (FragmentScheduler::StartRound), its bandwidth learned by
  // them.
  std::span<RailHealth> health() { return health_; }
  std::span<const RailHealth> health() const { return health_; }
  // The route over `network`, or -1 when none goes over it.
  int RouteOver(int network) const;
  // The route whose network owns `pool` (a buffer's own network), or -1.
  int RouteOfPool(const buffers::BufferPool* pool) const;
  // Short messages and control frames go here unless told otherwise.
  int default_route() const { return default_route_; }
  // `route` failed (a long send's finding): the default moves to the first
  // route that has not.
  void AvoidRoute(int route);
  // Counts resets (ResetAfterHostDown): a long send that waited across one
  // gives up (its route indexes are stale).
  uint64_t generation() const { return generation_; }

  // --- frames ---
  // The number the pair's next post gives.
  uint64_t NextSeq(Gid from, Gid to);
  // Called with the number a frame gets, before any network can carry it
  // (a long send names its message by it).
  using Numbered = std::function<void(uint64_t seq)>;
  // Numbers the frame in `slot` (a short message or long-message start,
  // header otherwise complete) in the (from, to) pair's order and posts it
  // on `route` (< 0: the default) behind what waits, or queues it. Ok takes
  // the reference. On error (the process failed, now or before) it is
  // still in `slot`, the caller's, kFailed if a route refused it, and the
  // number is not used. `numbered` (if any) is called with the pair's lane
  // lock held: it takes no lock of the queue.
  Status Post(Gid from, Gid to, buffers::SlotRef& slot, int route, const Numbered& numbered = {});
  // Posts a frame numbered already (a multicast's fill, wire/frame.h: the
  // number its marker took, here or in the process of its source thread)
  // behind what waits,
  // as Post does, without touching this queue's numbers. Errors as Post's.
  Status PostNumbered(buffers::SlotRef& slot, int route);
  // A short message copied from `payload` onto the receiving thread's lane
  // of the default route, numbered like Post, without mu(): a copying
  // send's first try. Ok: sent. TryAgain: the lane is full now (worth a
  // retry after progress). Another error (the lanes are closed, the frame
  // is larger than a lane takes, the route broke): nothing sent, take the
  // way through mu() (PostCopy, Post), which queues, reroutes or fails.
  // Nothing is sent and no number used unless Ok.
  Status TryPostLane(Gid from, Gid to, uint32_t tag, std::span<const std::byte> payload);
  // Whether TryPostLane may post now (a look without a lock).
  bool LanesOpen() const { return open_lane_bytes_.load(std::memory_order_relaxed) != 0; }
  // A short message copied straight from `payload` on the default route
  // (shm: onto the receiving thread's lane, or into the buffer the
  // receiver provided), numbered like Post. Not Ok: nothing sent, no number
  // used; TryAgain when the route has no room now (worth a retry after
  // progress), another error when frames wait or the route cannot take it:
  // the caller posts it through a pool buffer instead.
  Status PostCopy(Gid from, Gid to, uint32_t tag, std::span<const std::byte> payload);
  // Lets the runtime make progress (mu() not held), as AwaitRoom does.
  void AwaitProgress() { events_.AwaitProgress(); }
  // A header-only frame made from `header` in the pool of `route`'s
  // network (ResourceExhausted at the pool's cap).
  Result<buffers::SlotRef> HeaderFrame(int route, const wire::Header& header);
  // A header-only frame outside the pairs' order (a long message's control
  // frame) made from `header` and posted on `route` (< 0 or out of range:
  // the default), behind what waits. On error it is dropped:
  // ResourceExhausted (no pool buffer: the pool's cap is reached), the
  // route's (it broke) or the process's failure.
  Status PostControl(int route, const wire::Header& header);
  // A fragment straight to `route` (never queued, counted in
  // fragments_sent). False when the route cannot take it now (no room, no
  // pool buffer) or broke.
  bool PostFragment(int route, const wire::Header& header, std::span<const std::byte> piece,
                    bool resent);

  // Posts what waits, in order, until a route says TryAgain. True while
  // frames still wait.
  bool Flush();
  // The poller's Flush (takes mu()): false when nothing waits any more,
  // and then the queue is off the poller's list until Events::Queued says
  // `list` again.
  bool Retry();
  // Back-pressure after Post: while `depth` frames wait and the process is
  // ready, flushes, lets the runtime make progress with `lock` (of mu())
  // released, and finally sleeps until Flush makes room.
  void AwaitRoom(std::unique_lock<std::mutex>& lock);

  // The route over `network` lost its connection (Sink::OnRouteDown): while
  // another route is up, what it holds moves there now, ahead of what
  // waits here (fragments excepted: their long sends send them again), and
  // the default with it; else it waits in the route, which connects again.
  void RouteDown(int network);

  // --- failure ---
  // The process is failed (if it was not): queued frames end kFailed and
  // are dropped, so do the frames its routes hold (Route::Abandon), and
  // senders waiting for room wake. `host_down`: because its host went
  // down, so ResetAfterHostDown may resolve it again.
  void Fail(Status why, bool host_down = false);
  // Failed because its host went down: back to kUnresolved without routes
  // (the next send resolves it again), generation + 1; sequence numbers go
  // on. False (nothing changed) otherwise.
  bool ResetAfterHostDown();
  // Shutdown: fails the process and closes its routes.
  void Close(Status why);
  // Nothing waits here or in a live route.
  bool Drained() const;

  // --- counting ---
  struct SentCount {
    uint64_t frames = 0;  // every frame, header included in `bytes`
    uint64_t bytes = 0;
  };
  // What route `route` took, through mu() and through the lanes.
  SentCount Sent(size_t route) const;

 private:
  struct Pending {
    buffers::SlotRef slot;  // the queue's reference
    int route;              // index into rails_
  };

  // The lock and numbers of the pairs whose receiver is in one receive
  // lane, on a cache line of their own (8 senders use 8 of them at once).
  struct alignas(64) SendLane {
    std::mutex mu;
    // Guarded by mu; by thread pair (node-based: stable for SeqOf's cache).
    std::unordered_map<uint64_t, uint64_t> next_seq;
    // What TryPostLane posted on lane_route_ and QuiesceLanes has not moved
    // into its PeerRail yet: written under mu, read by mu_'s holder.
    FrameCount sent;
  };

  SendLane& LaneFor(Gid to) { return lanes_[wire::LaneOf(to)]; }
  // The (from, to) pair's next sequence number, with `lane` (LaneFor(to))
  // held (a thread-local cache of the last pair a thread sent on skips the
  // map).
  uint64_t& SeqOf(SendLane& lane, Gid from, Gid to);
  // A short message copied from `payload`, numbered in the (from, to)
  // pair's order and handed to `post` (which posts the header and payload)
  // with `lane` (LaneFor(to)) held; the number is used only if `post` says
  // Ok.
  template <typename PostFn>
  Status PostNumberedCopy(SendLane& lane, Gid from, Gid to, uint32_t tag,
                          std::span<const std::byte> payload, PostFn&& post);
  // The route the lanes may post on now (see Threading), or -1.
  int LaneRoute() const;
  // Opens the lanes when they may be (over LaneRoute()), else closes them.
  // No lane's lock held.
  void OpenLanes();
  void CloseLanes() { open_lane_bytes_.store(0, std::memory_order_release); }
  // Closes the lanes and waits until no TryPostLane runs (it takes and
  // releases each lane's lock), moving what they counted into
  // lane_route_'s PeerRail. No lane's lock held.
  void QuiesceLanes();
  // Posts what waits first (FIFO: the receiver may have provided buffers
  // since, and nobody else may be polling for us); then whether the
  // process is ready for more (NotReady says why not).
  bool FlushAndCheckReady();
  Status NotReady() const;
  // Behind what waits (after a Flush), or on `route` now: Ok taken (posted
  // or queued); else the route's error or the failure, not taken.
  Status PostOrQueue(int route, buffers::SlotRef& slot);
  // PostOrQueue once flushed and ready. `held_lane`: the lane whose lock
  // the caller holds, or -1.
  Status PostNowOrQueue(int route, buffers::SlotRef& slot, int held_lane);
  // The frame in `slot` on `route`: a short message that fits the route's
  // lanes onto its receiving thread's lane (copied, the reference dropped),
  // any other frame by Route::PostRef. So a pair's short messages take one
  // way however they were sent (a pool buffer, after a full lane, queued):
  // a frame on another way could fall behind the lane by more than the
  // receiver holds for it (pair_order.h's cap). Ok: taken (`slot` empty).
  Status PostFrame(int route, buffers::SlotRef& slot, int held_lane);
  // PostNowOrQueue, and on failure Reroute (the frame queued for another
  // route) or Fail (the frame kFailed, the caller's).
  Status PostOrFail(int route, buffers::SlotRef& slot, int held_lane);
  void Queue(buffers::SlotRef slot, int route);
  // Route `broken` broke: failed for good, and later frames go over
  // another (true), or there is none left (false).
  bool Reroute(int broken);
  // A route for frames that leave `avoid`: the first neither broken nor
  // down, else the first not broken; -1 when none.
  int AlternativeTo(int avoid) const;
  // Marks `broken` failed in health() (telling Events once) and moves the
  // default and the frames queued for it to `alternative`.
  void MoveOff(int broken, int alternative);

  const Gid process_;
  const size_t depth_;
  Events& events_;
  // Tells thread-local sequence caches of different queues apart (an
  // address may be reused; this is not).
  const uint64_t id_;

  std::mutex mu_;
  std::condition_variable space_;  // a sender waits here while the queue is full
  State state_ = State::kUnresolved;
  Status failure_;
  std::vector<PeerRail> rails_;
  std::vector<RailHealth> health_;  // parallel to rails_
  int default_route_ = -1;
  std::deque<Pending> queue_;
  bool listed_ = false;  // on the poller's list (Events::Queued)
  bool host_down_ = false;
  uint64_t generation_ = 0;

  // The route TryPostLane posts on and its lanes' counters count for:
  // written by mu_'s holder only after QuiesceLanes, read by TryPostLane
  // only while the lanes are open (so never at the same time).
  int lane_route_ = -1;
  // 0 while the lanes are closed; else the largest frame they take. Stored
  // by mu_'s holder (release: lane_route_ before it), loaded by TryPostLane
  // without a lock and again under its lane's lock (acquire).
  std::atomic<uint32_t> open_lane_bytes_{0};
  std::array<SendLane, wire::kReceiveLanes> lanes_;
};

// What the sender knows of a destination thread.
struct DestThread {
  SendQueue* peer = nullptr;
  std::atomic<bool> exited{false};
};

}  // namespace tocl::runtime
