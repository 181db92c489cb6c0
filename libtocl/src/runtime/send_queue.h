// The send queue of one destination process (the ToCL paper's §4.2): a
// route per network that reaches it, the FIFO of frames its routes could not
// take yet, and the sequence numbers (per sending thread, receiving thread
// pair) that let the receiver keep each pair's order across networks
// (pair_order.h).
//
// Every frame to the process goes through here: short messages and
// long-message starts (Post, PostCopy: numbered in their pair's order),
// control frames of long messages (PostControl: outside the order), and
// fragments (PostFragment: straight to one network, never queued; the
// fragment scheduler decides where and when). A frame is posted at once
// when nothing waits before it and its route takes it; otherwise it waits
// here, in order, until Flush (the sender's next post, or the poller's
// Retry) posts it. So a frame is owned by the queue (a SlotRef) from the
// moment it is taken until a route has it.
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
// Counting: a frame is counted (PeerRail::frames_sent, bytes_sent) once,
// when a route takes it, in PeerRail::Post / PostCopy.
//
// What it needs of the runtime goes through Events (queued frames for the
// poller, a rerouted network, progress while a sender waits), none of it on
// the path of a message its route takes at once.
//
// Threading: one mutex, mu(), guards everything; every method but process(),
// mu() and Retry() is called with it held. Routes are called under it (as
// subsystem.h expects: one thread at a time per route).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "runtime/fragment_scheduler.h"
#include "subsystem/subsystem.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::runtime {

// One network's route to the process, with what it carried (its health,
// what the network has shown, is SendQueue::health()).
struct PeerRail {
  int rail = -1;  // the network: index in Runtime::Impl::rails
  std::unique_ptr<subsystem::Route> route;
  // The network's pool: header-only frames, fragments its route cannot
  // copy straight from the sender's memory.
  buffers::BufferPool* pool = nullptr;
  uint64_t frames_sent = 0;  // every frame the route took, header included in bytes_sent
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
  // The number the pair's next Post or PostCopy gives (a long send names
  // its message by it before posting its start).
  uint64_t NextSeq(Gid from, Gid to) { return SeqOf(from, to); }
  // Numbers the frame in `slot` (a short message or long-message start,
  // header otherwise complete) in the (from, to) pair's order and posts it
  // on `route` (< 0: the default) behind what waits, or queues it. Ok takes
  // the reference. On error (the process failed, now or before) it is
  // still in `slot`, the caller's, kFailed if a route refused it, and the
  // number is not used.
  Status Post(Gid from, Gid to, buffers::SlotRef& slot, int route);
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

  // --- failure ---
  // The process is failed (if it was not): queued frames end kFailed and
  // are dropped, senders waiting for room wake. `host_down`: because its
  // host went down, so ResetAfterHostDown may resolve it again.
  void Fail(Status why, bool host_down = false);
  // Failed because its host went down: back to kUnresolved without routes
  // (the next send resolves it again), generation + 1; sequence numbers go
  // on. False (nothing changed) otherwise.
  bool ResetAfterHostDown();
  // Shutdown: fails the process and closes its routes.
  void Close(Status why);
  // Nothing waits here or in a live route.
  bool Drained() const;

 private:
  struct Pending {
    buffers::SlotRef slot;  // the queue's reference
    int route;              // index into rails_
  };

  // The (from, to) pair's next sequence number (a thread-local cache of the
  // last pair a thread sent on skips the map).
  uint64_t& SeqOf(Gid from, Gid to);
  // Posts what waits first (FIFO: the receiver may have provided buffers
  // since, and nobody else may be polling for us); then whether the
  // process is ready for more (NotReady says why not).
  bool FlushAndCheckReady();
  Status NotReady() const;
  // Behind what waits (after a Flush), or on `route` now: Ok taken (posted
  // or queued); else the route's error or the failure, not taken.
  Status PostOrQueue(int route, buffers::SlotRef& slot);
  void Queue(buffers::SlotRef slot, int route);
  // Route `broken` broke: failed for good, and later frames go over
  // another (true), or there is none left (false).
  bool Reroute(int broken);

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
  std::unordered_map<uint64_t, uint64_t> next_seq_;  // by thread pair (node-based: stable)
  std::deque<Pending> queue_;
  bool listed_ = false;  // on the poller's list (Events::Queued)
  bool host_down_ = false;
  uint64_t generation_ = 0;
};

// What the sender knows of a destination thread.
struct DestThread {
  SendQueue* peer = nullptr;
  std::atomic<bool> exited{false};
};

}  // namespace tocl::runtime
