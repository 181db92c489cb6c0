// The interface every network (subsystem) implements: shm, tcp, and the
// VIA-style via (DESIGN.md §5, the ToCL paper's §4.2).
//
// A subsystem owns one endpoint per process shared by all its threads, a
// buffer pool registered with it, and a Route per remote process it sends
// to. The runtime above it keeps the send queues, the matching and the
// ordering (sequence numbers per pair of threads in the wire header); a
// subsystem only moves whole frames (wire header + payload). A Route keeps
// the frames of one size class in the order they were posted (shm and tcp
// keep all of them in order, shm per lane; via has one connection per
// class), and the runtime's sequence numbers restore the order across
// classes and lanes.
//
// Ownership: a slot passed to Route::Post comes with one reference that the
// subsystem owns until it is done with the bytes; it then sets the slot's
// state (kSent or kFailed) and drops that reference (pool()->Unref). A slot
// passed to Sink::OnMessage carries one reference for the runtime, as a
// buffers::SlotRef (the runtime drops it on every path, errors included).
//
// Each subsystem is given, when opened, the runtime's Sink (where arrivals
// go) and Reactor (the fds it wants to be woken for).
//
// Threading: Route methods never block and are called by one thread at a
// time per route (the runtime holds the destination's lock), except
// PostLane: one thread at a time per lane (the runtime holds its lock of
// that lane, not the destination's). Poll and the reactor handlers are
// called by the polling thread only; PollLane, Address, pool and Connect
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/slot_ref.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::subsystem {

// Where a subsystem hands what arrives: the runtime's receive side.
class Sink {
 public:
  virtual ~Sink() = default;
  // A validated message frame in `slot` (header + payload), sent by
  // `from_process` as the connection authenticated it. Frames of one route
  // arrive in the order they were posted. An error means the sender broke
  // the protocol (duplicate or impossible sequence numbers): the slot was
  // taken anyway, and the subsystem closes that connection or channel with
  // the error's message. Moving the reference in costs no atomic.
  virtual Status OnMessage(Gid from_process, buffers::SlotRef slot) = 0;
  // Whether the receive side wants no more unexpected messages now
  // (flow control: subsystems stop providing buffers / reading sockets).
  virtual bool Congested() const = 0;
  // The route to `peer_process` over this subsystem's network lost its
  // connection: it connects again by itself, and the runtime may move what
  // it holds to another network (Route::TakeUnacknowledged). Called by the
  // polling thread, outside the subsystem's locks.
  virtual void OnRouteDown(Gid /*peer_process*/) {}

  // Receive lanes (wire/lanes.h): a subsystem drains a lane's own arrivals
  // (Subsystem::PollLane, and its Poll) only while it holds that lane, and
  // every frame it then hands to OnMessage is a short message for a thread
  // of that lane. TryEnterLane does not wait (another thread drains the
  // lane: nothing to do); EnterLane does (closing a channel). A holder
  // enters no other lane.
  virtual bool TryEnterLane(uint32_t lane) = 0;
  virtual void EnterLane(uint32_t lane) = 0;
  virtual void LeaveLane(uint32_t lane) = 0;
};

// The way to one remote process.
class Route {
 public:
  virtual ~Route() = default;
  // Posts the frame in `slot` (header filled in, one reference handed
  // over). Ok: taken (a route may queue it while it connects). TryAgain:
  // no room now (flow control); the slot was not taken and the reference is
  // still the caller's: retry after progress. Unavailable/FailedPrecondition: the
  // route is broken for good (peer gone); the slot was not taken.
  //
  // Post stays on raw slots: its "not taken on error" contract is the
  // caller's to keep, and subsystems keep the slots they hold in their own
  // rings and queues. PostRef is the same for a caller holding a SlotRef.
  virtual Status Post(detail::BufferSlot* slot) = 0;
  // Post of an owned reference: Ok hands it over (`slot` is left empty);
  // on any error it stays in `slot`, the caller's to retry or to drop.
  Status PostRef(buffers::SlotRef& slot) {
    Status status = Post(slot.get());
    if (status.ok()) (void)slot.release();  // the subsystem's now
    return status;
  }
  // Like Post, copying `header` and `payload` straight to the network (no
  // pool buffer on the sending side). Unimplemented if the subsystem has no
  // such path (the runtime then copies into a pool buffer and Posts).
  virtual Status PostCopy(const wire::Header& header, std::span<const std::byte> payload) = 0;
  // A short message for a thread of receive lane `lane` (wire/lanes.h),
  // copied from `header` and `payload` onto that lane's own way to the peer
  // (shm: the lane's ring). Unlike the other methods, one thread at a time
  // per lane, not per route: the caller holds its lock of that lane, and
  // other lanes and the other methods may run at once. Unimplemented when
  // the route has no lanes or the frame does not fit one (post it the
  // other way); TryAgain when the lane is full; Unavailable when the route
  // is broken, or found to be (the peer went): the runtime posts every
  // short message that fits a lane on its lane, so a full lane must not
  // hide a dead peer. Nothing is taken unless Ok.
  virtual Status PostLane(uint32_t /*lane*/, const wire::Header& /*header*/,
                          std::span<const std::byte> /*payload*/) {
    return Status(StatusCode::kUnimplemented, "no receive lanes");
  }
  // The largest frame (header included) PostLane takes; 0 when the route
  // has no lanes. Fixed for the route's life: the runtime asks once.
  virtual uint32_t LaneFrameBytes() const { return 0; }
  // Nothing posted is still waiting for the network or, where the route
  // keeps frames until the peer acknowledges them (tcp, via), for the peer.
  virtual bool Drained() const = 0;
  // The route is broken for good (peer died, not reachable for the
  // network's unreachable_timeout, protocol error): Post fails.
  virtual bool Broken() const = 0;
  // The route's connection is lost and not re-established yet; it takes
  // posts meanwhile (they wait).
  virtual bool Down() const { return false; }
  // While Down(): every frame posted and not acknowledged by the peer,
  // oldest first, each with its reference (state kInFlight), for the
  // runtime to send over another network; the route keeps none of them.
  // Empty otherwise, and for routes whose posted frames are in the peer's
  // memory already (shm).
  virtual std::vector<buffers::SlotRef> TakeUnacknowledged() { return {}; }
  // The peer is gone (its process exited): every frame held fails
  // (kFailed) and the route is broken, without trying to connect again.
  virtual void Abandon(std::string_view /*why*/) {}
};

class Subsystem {
 public:
  virtual ~Subsystem() = default;
  virtual Network network() const = 0;
  std::string_view name() const { return NetworkName(network()); }
  // What the process publishes in the directory for this subsystem.
  virtual const std::string& address() const = 0;
  virtual buffers::BufferPool& pool() = 0;
  // Whether this subsystem can reach a process that published `address`
  // from host `peer_host` (shm: only on our own host).
  virtual bool Reaches(Gid peer_process, std::string_view address) const = 0;
  // A route to `peer_process` at `address`. Connecting may finish later
  // (Post says TryAgain meanwhile). InvalidArgument for a malformed address.
  virtual Result<std::unique_ptr<Route>> Connect(Gid peer_process, std::string_view address) = 0;
  // Non-blocking progress on what the reactor does not report (shm rings,
  // re-providing receive buffers, resuming reads paused by congestion).
  // Returns the number of messages handed to the sink.
  virtual int Poll() = 0;
  // Drains what arrived on receive lane `lane` (wire/lanes.h) if another
  // thread is not doing so already: from any thread of the process (a
  // receiver of that lane polls for itself while another thread holds the
  // poll token), also during Poll, and safely after Close (nothing).
  // Returns the number of messages handed to the sink.
  virtual int PollLane(uint32_t /*lane*/) { return 0; }
  // Whether the polling thread must look at the reactor every round: this
  // subsystem has fds whose events only the reactor reports now (a via VI,
  // a tcp connection connecting, waiting for its handshake answer or for
  // room to write). False lets a spinning poller look at the fds only now
  // and then (each look is a system call).
  virtual bool WantsReactorEachRound() const { return false; }
  // Called by the poller just before it sleeps: true when it may sleep
  // (nothing arrived since the last Poll, and peers will wake it).
  virtual bool PrepareToSleep() = 0;
  virtual void FinishSleep() = 0;
  // When this subsystem is the only thing the process waits for, it may
  // offer a cheaper sleep than epoll (shm: a futex in its segment). Sleeps
  // until a peer wakes it, WakeSleeper() is called, or `deadline`; false
  // (at once) when it has no such sleep or something is already there.
  virtual bool SleepAlone(std::chrono::steady_clock::time_point /*deadline*/) { return false; }
  // Ends a SleepAlone from another thread of the process.
  virtual void WakeSleeper() {}
  // Periodic housekeeping by the polling thread, about once a second (dead
  // peers, connections that never said hello, ...).
  virtual void Housekeeping() = 0;
  // When the subsystem next needs a Poll although nothing may wake the
  // poller (a connection to try again): the poller sleeps no longer.
  virtual std::chrono::steady_clock::time_point WakeBy() {
    return std::chrono::steady_clock::time_point::max();
  }
  // Exit ordering (Runtime::Notify): hands the sink every frame from
  // `process` that has reached this process and still waits here (shm: in
  // its channels' rings; tcp: on its connections, read up to their end),
  // before an exit notice about it is delivered. By the polling thread (the
  // poll token's holder). The runtime's sink says it is not congested to
  // the calling thread meanwhile: a process that exited sends nothing
  // more, so what it left is bounded by its rings and sockets. True when
  // nothing from it is left; false when something is (the pool at its cap,
  // a connection not at its end yet): the caller may try again.
  virtual bool DrainFrom(Gid /*process*/) { return true; }
  // Closes every route and connection; queued frames fail. Called once,
  // by the polling thread, before destruction.
  virtual void Close() = 0;
};

}  // namespace tocl::subsystem
