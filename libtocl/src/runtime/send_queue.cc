#include "runtime/send_queue.h"

#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "buffers/size_class.h"
#include "core/logger.h"
#include "wire/lanes.h"

namespace tocl::runtime {

namespace {

std::atomic<uint64_t> next_queue_id{1};

// The sequence counter of the last (from, to) pair a thread sent on.
struct SeqCache {
  uint64_t queue = 0;  // SendQueue::id_
  uint64_t from = 0;
  uint64_t to = 0;
  uint64_t* seq = nullptr;
};
thread_local SeqCache seq_cache;

// The key of a (sending thread, receiving thread) pair within one pair of
// processes: both thread indexes (24 bits each).
uint64_t ThreadPairKey(Gid from, Gid to) {
  return (uint64_t{from.thread_index()} << 24) | to.thread_index();
}

// TryPostLane's "take the way through mu()": short, no allocation (taken
// once per message while a queue's lanes are closed).
Status LanesClosed() {
  return Status(StatusCode::kFailedPrecondition, "lanes closed");
}

// Sleeping for room starts after this many rounds of polling and yielding.
constexpr int kSpinRounds = 256;

}  // namespace

SendQueue::SendQueue(Gid process, size_t depth, Events& events)
    : process_(process),
      depth_(depth),
      events_(events),
      id_(next_queue_id.fetch_add(1, std::memory_order_relaxed)) {}

void SendQueue::AddRoute(int network, std::unique_ptr<subsystem::Route> route,
                         buffers::BufferPool& pool) {
  // rails_ may move: no TryPostLane may be in it. (The lanes stay closed
  // from a reset to Ready; this makes sure rather than assumes.)
  QuiesceLanes();
  PeerRail peer_rail;
  peer_rail.rail = network;
  peer_rail.lane_frame_bytes = route->LaneFrameBytes();
  peer_rail.route = std::move(route);
  peer_rail.pool = &pool;
  rails_.push_back(std::move(peer_rail));
  health_.emplace_back();
}

void SendQueue::Ready() {
  default_route_ = 0;  // the first route added (shm when it connected)
  state_ = State::kReady;
  OpenLanes();
}

int SendQueue::RouteOver(int network) const {
  for (size_t route = 0; route < rails_.size(); ++route) {
    if (rails_[route].rail == network) return static_cast<int>(route);
  }
  return -1;
}

int SendQueue::RouteOfPool(const buffers::BufferPool* pool) const {
  for (size_t route = 0; route < rails_.size(); ++route) {
    if (rails_[route].pool == pool) return static_cast<int>(route);
  }
  return -1;
}

void SendQueue::AvoidRoute(int route) {
  if (default_route_ != route) return;
  for (size_t other = 0; other < health_.size(); ++other) {
    if (!health_[other].failed) {
      default_route_ = static_cast<int>(other);
      OpenLanes();  // over the new default, or closed when it has none
      return;
    }
  }
}

uint64_t& SendQueue::SeqOf(SendLane& lane, Gid from, Gid to) {
  if (seq_cache.queue == id_ && seq_cache.from == from.raw() && seq_cache.to == to.raw()) {
    return *seq_cache.seq;
  }
  uint64_t& seq = lane.next_seq[ThreadPairKey(from, to)];
  seq_cache = SeqCache{id_, from.raw(), to.raw(), &seq};
  return seq;
}

template <typename PostFn>
Status SendQueue::PostNumberedCopy(SendLane& lane, Gid from, Gid to, uint32_t tag,
                                   std::span<const std::byte> payload, PostFn&& post) {
  uint64_t& seq = SeqOf(lane, from, to);
  Status status =
      post(wire::MessageHeader(from, to, tag, static_cast<uint32_t>(payload.size()), seq));
  if (status.ok()) ++seq;
  return status;
}

uint64_t SendQueue::NextSeq(Gid from, Gid to) {
  SendLane& lane = LaneFor(to);
  std::lock_guard lane_lock(lane.mu);
  return SeqOf(lane, from, to);
}

int SendQueue::LaneRoute() const {
  if (state_ != State::kReady || !queue_.empty() || default_route_ < 0) return -1;
  const PeerRail& rail = rails_[default_route_];
  if (rail.lane_frame_bytes == 0 || !rail.route || rail.route->Broken()) return -1;
  return default_route_;
}

void SendQueue::OpenLanes() {
  const int route = LaneRoute();
  if (route < 0) {
    // lane_route_ stays: late posters may still be counting for it.
    CloseLanes();
    return;
  }
  if (route != lane_route_) {
    QuiesceLanes();
    lane_route_ = route;
  }
  open_lane_bytes_.store(rails_[route].lane_frame_bytes, std::memory_order_release);
}

void SendQueue::QuiesceLanes() {
  CloseLanes();
  const bool counted = lane_route_ >= 0 && lane_route_ < static_cast<int>(rails_.size());
  for (SendLane& lane : lanes_) {
    std::lock_guard lane_lock(lane.mu);
    if (counted) {
      rails_[lane_route_].frames_sent += lane.sent.frames.exchange(0, std::memory_order_relaxed);
      rails_[lane_route_].bytes_sent += lane.sent.bytes.exchange(0, std::memory_order_relaxed);
    }
  }
}

SendQueue::SentCount SendQueue::Sent(size_t route) const {
  SentCount sent{rails_[route].frames_sent, rails_[route].bytes_sent};
  if (static_cast<int>(route) != lane_route_) return sent;
  for (const SendLane& lane : lanes_) {
    sent.frames += lane.sent.frames.load(std::memory_order_relaxed);
    sent.bytes += lane.sent.bytes.load(std::memory_order_relaxed);
  }
  return sent;
}

bool SendQueue::FlushAndCheckReady() {
  if (!queue_.empty()) Flush();
  return state_ == State::kReady;
}

Status SendQueue::NotReady() const {
  if (state_ == State::kFailed) return failure_;
  return FailedPrecondition(fmt::format("no route to {} yet", process_.ToString()));
}

Status SendQueue::PostOrQueue(int route, buffers::SlotRef& slot) {
  if (!FlushAndCheckReady()) return NotReady();
  return PostNowOrQueue(route, slot, /*held_lane=*/-1);
}

Status SendQueue::PostNowOrQueue(int route, buffers::SlotRef& slot, int held_lane) {
  if (queue_.empty()) {
    slot->set_state(BufferState::kInFlight);
    Status status = PostFrame(route, slot, held_lane);
    if (status.code() != StatusCode::kTryAgain) return status;
  }
  Queue(std::move(slot), route);
  return Status::Ok();
}

Status SendQueue::PostFrame(int route, buffers::SlotRef& slot, int held_lane) {
  PeerRail& rail = rails_[route];
  const wire::Header& header = slot->header();
  if (header.kind != wire::FrameKind::kMessage ||
      wire::kHeaderBytes + header.length > rail.lane_frame_bytes) {
    return rail.Post(slot);
  }
  const uint32_t lane = wire::LaneOf(Gid::FromRaw(header.destination));
  std::unique_lock<std::mutex> lane_lock;
  if (static_cast<int>(lane) != held_lane) lane_lock = std::unique_lock(lanes_[lane].mu);
  Status status = rail.PostLane(lane, header, std::span(slot->payload(), header.length));
  if (!status.ok()) return status;
  slot->set_state(BufferState::kSent);
  slot.reset();
  return status;
}

Status SendQueue::Post(Gid from, Gid to, buffers::SlotRef& slot, int route,
                       const Numbered& numbered) {
  // Flushed before the pair's lane is held: a Flush may move the lanes,
  // which waits for every lane's holder.
  if (!FlushAndCheckReady()) return NotReady();
  if (route < 0) route = default_route_;
  SendLane& lane = LaneFor(to);
  std::lock_guard lane_lock(lane.mu);
  uint64_t& seq = SeqOf(lane, from, to);
  slot->header().seq = seq;
  if (numbered) numbered(seq);
  Status status = PostOrFail(route, slot, static_cast<int>(wire::LaneOf(to)));
  if (status.ok()) ++seq;
  return status;
}

Status SendQueue::PostOrFail(int route, buffers::SlotRef& slot, int held_lane) {
  Status status = PostNowOrQueue(route, slot, held_lane);
  if (status.ok()) return status;
  if (Reroute(route)) {
    Queue(std::move(slot), default_route_);
    return Status::Ok();
  }
  // Never sent: the receiver must not wait for its number.
  slot->set_state(BufferState::kFailed);
  Fail(status);
  return status;
}

Status SendQueue::PostNumbered(buffers::SlotRef& slot, int route) {
  if (!FlushAndCheckReady()) return NotReady();
  if (route < 0) route = default_route_;
  return PostOrFail(route, slot, -1);
}

Status SendQueue::PostCopy(Gid from, Gid to, uint32_t tag, std::span<const std::byte> payload) {
  if (!FlushAndCheckReady() || !queue_.empty()) {
    return Status(StatusCode::kFailedPrecondition, "frames wait");
  }
  SendLane& lane = LaneFor(to);
  std::lock_guard lane_lock(lane.mu);
  // On the receiving thread's lane when it fits one (a full lane is the
  // receiver's back-pressure, as a full ring is), else the route's way
  // (shm: into a buffer the receiver provided). Asked by size, not by
  // PostLane's Unimplemented: that one's message costs an allocation.
  PeerRail& rail = rails_[default_route_];
  return PostNumberedCopy(lane, from, to, tag, payload, [&](const wire::Header& header) {
    return wire::kHeaderBytes + payload.size() <= rail.lane_frame_bytes
               ? rail.PostLane(wire::LaneOf(to), header, payload)
               : rail.PostCopy(header, payload);
  });
}

Status SendQueue::TryPostLane(Gid from, Gid to, uint32_t tag, std::span<const std::byte> payload) {
  const size_t frame_bytes = wire::kHeaderBytes + payload.size();
  // A look first: a queue whose lanes are closed costs no lock.
  if (frame_bytes > open_lane_bytes_.load(std::memory_order_relaxed)) {
    return LanesClosed();
  }
  const uint32_t lane_index = wire::LaneOf(to);
  SendLane& lane = lanes_[lane_index];
  std::lock_guard lane_lock(lane.mu);
  // Again under the lock: whoever queued a frame of this pair closed the
  // lanes while holding it, and this one must go behind that frame.
  if (frame_bytes > open_lane_bytes_.load(std::memory_order_acquire)) {
    return LanesClosed();
  }
  Status status = PostNumberedCopy(lane, from, to, tag, payload, [&](const wire::Header& header) {
    return rails_[lane_route_].route->PostLane(lane_index, header, payload);
  });
  if (status.ok()) lane.sent.Add(frame_bytes);  // this lane's holder is its one writer
  return status;
}

Result<buffers::SlotRef> SendQueue::HeaderFrame(int route, const wire::Header& header) {
  buffers::SlotRef slot(rails_[route].pool->TryGet(0));
  if (!slot) {
    return ResourceExhausted("no pool buffer for a control frame (the pool cap is reached)");
  }
  slot->header() = header;
  return slot;
}

Status SendQueue::PostControl(int route, const wire::Header& header) {
  if (route < 0 || route >= static_cast<int>(rails_.size())) route = default_route_;
  if (route < 0) return NotReady();  // no routes (yet, or since a reset)
  TOCL_ASSIGN_OR_RETURN(buffers::SlotRef frame, HeaderFrame(route, header));
  return PostOrQueue(route, frame);  // not taken: dropped with `frame`
}

bool SendQueue::PostFragment(int route, const wire::Header& header,
                             std::span<const std::byte> piece, bool resent) {
  PeerRail& peer_rail = rails_[route];
  // Straight from the sender's memory where the network can (shm: into the
  // buffer the receiver provided), else through a pool buffer.
  Status status = peer_rail.PostCopy(header, piece);
  if (status.code() == StatusCode::kUnimplemented) {
    buffers::SlotRef slot(peer_rail.pool->TryGet(buffers::ClassFor(piece.size())));
    if (!slot) return false;
    slot->header() = header;
    std::memcpy(slot->payload(), piece.data(), piece.size());
    slot->set_state(BufferState::kInFlight);
    status = peer_rail.Post(slot);  // not taken: dropped with `slot`
  }
  if (!status.ok()) return false;
  ++peer_rail.fragments_sent;
  if (resent) ++peer_rail.fragments_resent;
  return true;
}

void SendQueue::Queue(buffers::SlotRef slot, int route) {
  // Before the frame's pair's lane lock is released (Post): its next frame
  // must not overtake this one on a lane.
  CloseLanes();
  slot->set_state(BufferState::kQueued);
  queue_.push_back({std::move(slot), route});
  const bool list = !listed_;
  listed_ = true;
  events_.Queued(*this, list);
}

bool SendQueue::Flush() {
  while (!queue_.empty()) {
    Pending& head = queue_.front();
    // Ok leaves head.slot empty; an error leaves the reference in it.
    Status status = PostFrame(head.route, head.slot, /*held_lane=*/-1);
    if (status.code() == StatusCode::kTryAgain) return true;
    if (!status.ok() && Reroute(head.route)) {
      // Another network takes the frames that waited for this one; control
      // frames of long messages are dropped (their senders recover).
      const wire::FrameKind kind = head.slot->header().kind;
      if (kind != wire::FrameKind::kMessage && kind != wire::FrameKind::kLongStart) {
        queue_.pop_front();
      }
      continue;
    }
    if (!status.ok()) {
      head.slot->set_state(BufferState::kFailed);
      queue_.pop_front();
      Fail(status);
      return false;
    }
    queue_.pop_front();
    if (queue_.size() + 1 == depth_) space_.notify_all();
  }
  space_.notify_all();
  OpenLanes();
  return false;
}

bool SendQueue::Retry() {
  std::lock_guard lock(mu_);
  if (Flush()) return true;
  listed_ = false;
  return false;
}

void SendQueue::AwaitRoom(std::unique_lock<std::mutex>& lock) {
  // Polling when we can (the receiver's "more buffers" bell may be ours to
  // hear); sleep only after a while.
  for (int round = 0; queue_.size() >= depth_ && state_ == State::kReady; ++round) {
    if (!Flush()) break;
    lock.unlock();
    events_.AwaitProgress();
    if (round < kSpinRounds) std::this_thread::yield();
    lock.lock();
    if (round >= kSpinRounds) space_.wait_for(lock, std::chrono::milliseconds(1));
  }
}

int SendQueue::AlternativeTo(int avoid) const {
  int fallback = -1;
  for (size_t i = 0; i < rails_.size(); ++i) {
    if (static_cast<int>(i) == avoid || rails_[i].route->Broken()) continue;
    if (!rails_[i].route->Down()) return static_cast<int>(i);
    if (fallback < 0) fallback = static_cast<int>(i);
  }
  return fallback;
}

bool SendQueue::Reroute(int broken) {
  const int alternative = AlternativeTo(broken);
  if (alternative < 0) return false;
  MoveOff(broken, alternative);
  return true;
}

void SendQueue::MoveOff(int broken, int alternative) {
  RailHealth& health = health_[broken];
  if (!health.failed) events_.Rerouted(*this, rails_[broken].rail, rails_[alternative].rail);
  health.Break();
  if (default_route_ == broken) {
    // Open again (over the new default) by the Flush that sends what
    // waits: it cannot be done here, under a lane's lock (Post).
    CloseLanes();
    default_route_ = alternative;
  }
  for (Pending& pending : queue_) {
    if (pending.route == broken) pending.route = alternative;
  }
}

void SendQueue::RouteDown(int network) {
  const int route = RouteOver(network);
  if (state_ != State::kReady || route < 0 || !rails_[route].route->Down()) return;
  const int alternative = AlternativeTo(route);
  if (alternative < 0 || rails_[alternative].route->Down()) return;  // it waits in the route
  std::vector<buffers::SlotRef> frames = rails_[route].route->TakeUnacknowledged();
  MoveOff(route, alternative);
  // The route had them before anything that waits here was queued.
  size_t moved = 0;
  for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame) {
    if ((*frame)->header().kind == wire::FrameKind::kFragment) continue;
    (*frame)->set_state(BufferState::kQueued);
    queue_.push_front({std::move(*frame), alternative});
    ++moved;
  }
  Log().debug("tocl: the route to {} over network {} is down: {} frames move to network {}",
              process_.ToString(), rails_[route].rail, moved, rails_[alternative].rail);
  if (moved == 0) return;
  CloseLanes();
  const bool list = !listed_;
  listed_ = true;
  events_.Queued(*this, list);
  Flush();
}

void SendQueue::Fail(Status why, bool host_down) {
  CloseLanes();
  if (state_ != State::kFailed) {
    state_ = State::kFailed;
    failure_ = std::move(why);
    host_down_ = host_down;
  }
  for (Pending& pending : queue_) pending.slot->set_state(BufferState::kFailed);
  if (!host_down) {
    // Gone for good: what the routes hold will not arrive either (a host
    // that went down resets them instead: ResetAfterHostDown).
    for (PeerRail& rail : rails_) {
      if (rail.route) rail.route->Abandon(failure_.message());
    }
  }
  if (!queue_.empty()) {
    Log().warn("tocl: {} queued messages to {} failed: {}", queue_.size(), process_.ToString(),
               failure_.ToString());
  }
  queue_.clear();  // drops their references
  space_.notify_all();
}

bool SendQueue::ResetAfterHostDown() {
  if (!host_down_) return false;
  QuiesceLanes();  // closed since the failure; some may still post on the old route
  lane_route_ = -1;
  host_down_ = false;
  state_ = State::kUnresolved;
  failure_ = Status::Ok();
  rails_.clear();
  health_.clear();
  default_route_ = -1;
  ++generation_;
  return true;
}

void SendQueue::Close(Status why) {
  Fail(std::move(why));
  QuiesceLanes();  // late posters out of the routes before they go
  for (PeerRail& rail : rails_) rail.route.reset();
}

bool SendQueue::Drained() const {
  if (!queue_.empty()) return false;
  for (const PeerRail& rail : rails_) {
    if (rail.route && !rail.route->Broken() && !rail.route->Drained()) return false;
  }
  return true;
}

}  // namespace tocl::runtime
