// Sending a long message: the sending thread cuts it into fragments and
// spreads them over every network that reaches the destination
// (long_message.h explains the protocol; the frames are in wire/frame.h).
#include <fmt/format.h>

#include <cstring>

#include "buffers/large_slot.h"
#include "core/logger.h"
#include "runtime/runtime_impl.h"

namespace tocl {

using runtime::FragmentScheduler;
using runtime::LongSend;
using runtime::PeerRail;
using runtime::SendQueue;
using Clock = std::chrono::steady_clock;

namespace {

// Why a message nothing was heard about for partial_timeout failed.
Status Silence(const LongSend& send, std::chrono::milliseconds partial_timeout) {
  const Gid to = Gid::FromRaw(send.key.destination);
  const FragmentScheduler& fragments = send.fragments;
  return Unavailable(
      send.granted ? fmt::format("nothing of the {} byte message to {} was acknowledged for {} ms "
                                 "(partial_timeout); {} of {} fragments were not",
                                 send.data.size(), to.ToString(), partial_timeout.count(),
                                 fragments.count() - fragments.acked(), fragments.count())
                   : fmt::format("{} answered nothing about the {} byte message for {} ms "
                                 "(partial_timeout): its start was lost with a connection, or the "
                                 "process does not read",
                                 to.ToString(), send.data.size(), partial_timeout.count()));
}

}  // namespace

Status Runtime::Impl::SendLong(Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
  if (payload.size() > kMaxMessageBytes) {
    return InvalidArgument(fmt::format("a {} byte message is larger than the limit of {} bytes",
                                       payload.size(), kMaxMessageBytes));
  }
  TOCL_RETURN_IF_ERROR(CheckSend(from, to, tag));
  if (to.process() == process) {
    // In-process: one copy into library memory, delivered whole.
    auto large = NewReassemblySlot(payload.size());
    if (!large.ok()) return large.status();
    (*large)->header() = wire::WholeMessageHeader(from, to, tag, payload.size());
    std::memcpy((*large)->payload(), payload.data(), payload.size());
    buffers::SlotRef slot(*large);
    return DeliverLocal(slot);  // an error drops `slot`
  }

  TOCL_ASSIGN_OR_RETURN(SendQueue * destination, PeerOf(to));
  SendQueue& peer = *destination;
  LongSend send;
  send.data = payload;
  send.tag = tag;
  send.wake = receive.Find(from);
  send.last_heard = Clock::now();  // before the poller can see it
  const uint64_t fragment_bytes = buffers::ClassBytes(num_classes - 1) - wire::kHeaderBytes;

  std::unique_lock peer_lock(peer.mu());
  TOCL_RETURN_IF_ERROR(ResolvePeerLocked(peer));
  // A peer reset while we wait (its host went down and came back) has new
  // rails: our indexes into them would be stale.
  const uint64_t generation = peer.generation();
  send.fragments = FragmentScheduler(payload.size(), fragment_bytes, peer.rails().size(),
                                     {.fragment_timeout = options.fragment_timeout});
  // The number the start gets (peer.mu() is held until it is posted).
  send.key = runtime::LongKey{from.raw(), to.raw(), peer.NextSeq(from, to)};
  {
    std::lock_guard lock(outbound_mu);
    outbound[send.key] = &send;
  }
  struct Unregister {
    Runtime::Impl& impl;
    runtime::LongKey key;
    ~Unregister() {
      std::lock_guard lock(impl.outbound_mu);
      impl.outbound.erase(key);
    }
  } unregister{*this, send.key};

  // The start travels in the pair's order, like a short message (and like
  // one, moves to another network when its route breaks).
  {
    TOCL_ASSIGN_OR_RETURN(
        buffers::SlotRef start,
        peer.HeaderFrame(peer.default_route(),
                         wire::LongStartHeader(from, to, tag, payload.size(), fragment_bytes)));
    TOCL_RETURN_IF_ERROR(peer.Post(from, to, start, peer.default_route()));
  }
  Status result = AwaitLongLocked(peer, peer_lock, generation, send);

  // What this message taught about each network (its routes are the
  // peer's while the generation holds).
  if (peer.generation() == generation) {
    std::lock_guard lock(send.mu);
    std::span<runtime::RailHealth> health = peer.health();
    for (size_t route = 0; route < send.fragments.rails(); ++route) {
      health[route].bandwidth = send.fragments.Learned(route, health[route].bandwidth);
    }
  }
  if (!result.ok() && peer.state() != SendQueue::State::kFailed &&
      peer.generation() == generation) {
    // Tell the receiver (best effort: its networks may be the ones gone).
    PostSenderControlLocked(peer, peer.default_route(), wire::FrameKind::kAbort, send.key, 0);
  }
  return result;
}

// Until every fragment is acknowledged or the message fails: probes while
// the grant is missing, places fragments once granted, and waits between
// rounds with the peer's lock released.
Status Runtime::Impl::AwaitLongLocked(SendQueue& peer, std::unique_lock<std::mutex>& peer_lock,
                                      uint64_t generation, LongSend& send) {
  // Several probes within partial_timeout: one may go over a dead network.
  const auto probe_every = std::max<Clock::duration>(
      std::min<Clock::duration>(options.fragment_timeout, options.partial_timeout / 4),
      std::chrono::milliseconds(1));
  auto next_probe = Clock::now() + probe_every;
  size_t probes = 0;

  // A network may have no room (shm: no buffer provided yet); its owner
  // rings our bell when it provides more, so the poller must hear bells.
  progress->ListenForBells(true);
  struct StopListening {
    runtime::ProgressEngine& progress;
    ~StopListening() { progress.ListenForBells(false); }
  } stop_listening{*progress};
  for (;;) {
    const uint32_t seen = send.wake->signal();
    const auto now = Clock::now();
    if (peer.state() == SendQueue::State::kFailed) return peer.failure();
    if (peer.generation() != generation) {
      return Unavailable(fmt::format("the connection to {} was reset while the message was sent",
                                     peer.process().ToString()));
    }
    if (shutting_down.load(std::memory_order_relaxed)) {
      return Unavailable("the runtime is shutting down");
    }
    std::unique_lock lock(send.mu);
    if (!send.aborted.ok()) return send.aborted;
    if (send.fragments.done()) return Status::Ok();
    // While we do not read (congested), nothing can be heard.
    if (Congested()) send.last_heard = now;
    if (now - send.last_heard > options.partial_timeout) {
      return Silence(send, options.partial_timeout);
    }
    const bool probe_due = !send.granted && now >= next_probe;
    if (send.granted) TOCL_RETURN_IF_ERROR(PlaceFragmentsLocked(peer, send, now));
    lock.unlock();
    if (probe_due) {
      next_probe = now + probe_every;
      ProbeLocked(peer, send.key, probes++, now);
    }
    peer_lock.unlock();

    // Wait for acknowledgements (or the grant), polling for them ourselves
    // when nobody else does. Look again after 2 ms at most: a wake-up that
    // goes astray (measured: rare 50 ms stalls over shm with a longer
    // sleep) then costs little, and a waiting sender wakes 500 times a
    // second, no more.
    const auto until = Clock::now() + std::min<Clock::duration>(options.fragment_timeout / 4,
                                                                std::chrono::milliseconds(2));
    receive.AwaitSignal(*send.wake, seen, until, until);
    peer_lock.lock();
  }
}

// One round of placement (long_message.h, fragment_scheduler.h): networks
// that broke or went silent give their fragments back, then fragments go
// out until the best network's window is full or none is left to send.
Status Runtime::Impl::PlaceFragmentsLocked(SendQueue& peer, LongSend& send, Clock::time_point now) {
  const std::vector<PeerRail>& peer_rails = peer.rails();
  std::span<runtime::RailHealth> health = peer.health();
  for (size_t route = 0; route < health.size(); ++route) {
    // Broken for good once Reroute or the route found it so.
    health[route].broken = health[route].broken || peer_rails[route].route->Broken();
  }
  const auto failures = send.fragments.StartRound(health, now, Congested());
  bool any_live = false;
  for (const runtime::RailHealth& route_health : health) any_live |= !route_health.failed;
  for (const FragmentScheduler::Failure& failure : failures) {
    Rail& network = *rails[peer_rails[failure.rail].rail];
    if (failure.news) {
      Log().warn("tocl: network {} ({}) to {} {}; its {} unacknowledged fragments {}",
                 network.spec.name, network.spec.device, peer.process().ToString(),
                 failure.broken ? "broke" : "acknowledged nothing in time", failure.unacknowledged,
                 any_live ? "go over the other networks" : "have no other network to take");
      network.failures.fetch_add(1, std::memory_order_relaxed);
    }
    peer.AvoidRoute(int(failure.rail));
  }
  if (!any_live) {
    std::string names;
    for (const PeerRail& failed_rail : peer_rails) {
      names +=
          fmt::format("{}{} ({})", names.empty() ? "" : ", ", rails[failed_rail.rail]->spec.name,
                      rails[failed_rail.rail]->spec.device);
    }
    const FragmentScheduler& fragments = send.fragments;
    return Unavailable(
        fmt::format("no network reaches {} any more ({} failed): {} of {} fragments of the {} byte "
                    "message were not acknowledged in {} ms",
                    peer.process().ToString(), names, fragments.count() - fragments.acked(),
                    fragments.count(), send.data.size(), options.fragment_timeout.count()));
  }
  while (const auto placement = send.fragments.Next(health)) {
    const uint64_t offset = send.fragments.Offset(placement->index);
    const uint64_t length = send.fragments.Length(placement->index);
    const wire::Header header = wire::FragmentHeader(
        Gid::FromRaw(send.key.source), Gid::FromRaw(send.key.destination), send.tag, send.key.seq,
        offset, static_cast<uint32_t>(length), send.data.size());
    if (!peer.PostFragment(int(placement->rail), header, send.data.subspan(offset, length),
                           placement->resent)) {
      send.fragments.Full(placement->rail);
      continue;
    }
    send.fragments.Posted(*placement, now);
  }
  return Status::Ok();
}

// Asks the receiver what became of long message `key` (long_message.h),
// over the peer's live networks in turn: the one the start or the grant
// went by may be the one that died.
void Runtime::Impl::ProbeLocked(SendQueue& peer, const runtime::LongKey& key, size_t round,
                                Clock::time_point now) {
  std::vector<int> live;
  for (size_t route = 0; route < peer.rails().size(); ++route) {
    if (peer.health()[route].UsableAt(now) && !peer.rails()[route].route->Broken()) {
      live.push_back(int(route));
    }
  }
  const int route = live.empty() ? peer.default_route() : live[round % live.size()];
  PostSenderControlLocked(peer, route, wire::FrameKind::kProbe, key, runtime::kProbeAsk);
}

// Best effort: a frame that cannot go now is dropped (the probe is sent
// again next round; an abort the receiver misses ends by its partial_timeout).
void Runtime::Impl::PostSenderControlLocked(SendQueue& peer, int route, wire::FrameKind kind,
                                            const runtime::LongKey& key, Tag tag) {
  (void)peer.PostControl(route, wire::ControlHeader(kind, Gid::FromRaw(key.source),
                                                    Gid::FromRaw(key.destination), key.seq, tag));
}

}  // namespace tocl
