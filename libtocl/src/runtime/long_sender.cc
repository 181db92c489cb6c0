#include "runtime/long_sender.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/logger.h"

namespace tocl::runtime {

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

LongSender::LongSender(Limits limits, ReceiveSide& receive, const std::atomic<bool>& shutting_down,
                       Events& events)
    : limits_(limits), receive_(receive), shutting_down_(shutting_down), events_(events) {}

Status LongSender::Send(SendQueue& peer, Gid from, Gid to, Tag tag,
                        std::span<const std::byte> payload, uint16_t flags) {
  LongSend send;
  TOCL_RETURN_IF_ERROR(Begin(peer, from, to, tag, payload, receive_.Find(from), send, flags));
  return Carry(peer, send);
}

Status LongSender::SendFill(SendQueue& peer, Gid from, Gid to, Tag tag,
                            std::span<const std::byte> payload, uint64_t seq, uint64_t nonce,
                            Mailbox& wake) {
  LongSend send;
  send.numbered_as = seq;
  send.nonce = nonce;
  send.flags = wire::kFlagRelayed;
  TOCL_RETURN_IF_ERROR(Begin(peer, from, to, tag, payload, &wake, send));
  return Carry(peer, send);
}

Status LongSender::Carry(SendQueue& peer, LongSend& send) {
  // A network may have no room (shm: no buffer provided yet); its owner
  // rings our bell when it provides more, so the poller must hear bells.
  events_.ListenForBells(true);
  Status result;
  for (;;) {
    const uint32_t seen = send.wake->signal();
    if (std::optional<Status> done = Step(peer, send)) {
      result = *std::move(done);
      break;
    }
    // Wait for acknowledgements (or the grant), polling for them ourselves
    // when nobody else does.
    const auto until = Clock::now() + StepWait();
    receive_.AwaitSignal(*send.wake, seen, until, until);
  }
  events_.ListenForBells(false);
  End(peer, send, result);
  return result;
}

LongSender::Clock::duration LongSender::StepWait() const {
  // Look again after 2 ms at most: a wake-up that goes astray (measured:
  // rare 50 ms stalls over shm with a longer sleep) then costs little, and
  // a waiting sender wakes 500 times a second, no more.
  return std::min<Clock::duration>(limits_.fragment_timeout / 4, std::chrono::milliseconds(2));
}

Status LongSender::Begin(SendQueue& peer, Gid from, Gid to, Tag tag,
                         std::span<const std::byte> payload, Mailbox* wake, LongSend& send,
                         uint16_t flags) {
  send.data = payload;
  send.tag = tag;
  send.wake = wake;
  send.last_heard = Clock::now();  // before the poller can see it

  std::unique_lock peer_lock(peer.mu());
  TOCL_RETURN_IF_ERROR(events_.ResolveLocked(peer, peer_lock));
  // A peer reset while we wait (its host went down and came back) has new
  // routes: our indexes into them would be stale.
  send.generation = peer.generation();
  send.fragments = FragmentScheduler(payload.size(), fragment_bytes_, peer.rails().size(),
                                     {.fragment_timeout = limits_.fragment_timeout});
  // Several probes within partial_timeout: one may go over a dead network.
  send.probe_every = std::max<Clock::duration>(
      std::min<Clock::duration>(limits_.fragment_timeout, limits_.partial_timeout / 4),
      std::chrono::milliseconds(1));
  send.next_probe = Clock::now() + send.probe_every;

  // The start travels in the pair's order, like a short message (and like
  // one, moves to another network when its route breaks). Named by its
  // number, in the table before any network carries it (an answer may come
  // at once); the number is known only once the pair's lane is held (the
  // pair's short messages take theirs without peer.mu()).
  wire::Header start_header = wire::LongStartHeader(from, to, tag, payload.size(), fragment_bytes_);
  start_header.flags = send.flags | flags;
  start_header.offset = send.nonce;
  auto start = peer.HeaderFrame(peer.default_route(), start_header);
  Status posted = start.status();
  auto numbered = [&](uint64_t seq) {
    send.key = LongKey{from.raw(), to.raw(), seq};
    std::lock_guard lock(mu_);
    outbound_[send.key] = &send;
    send.registered = true;
  };
  if (posted.ok() && send.numbered_as) {
    // A multicast's fill: numbered by its marker.
    (*start)->header().seq = *send.numbered_as;
    numbered(*send.numbered_as);
    posted = peer.PostNumbered(*start, peer.default_route());
  } else if (posted.ok()) {
    posted = peer.Post(from, to, *start, peer.default_route(), numbered);
  }
  if (!posted.ok()) Unregister(send);
  return posted;
}

void LongSender::Unregister(LongSend& send) {
  if (!send.registered) return;
  std::lock_guard lock(mu_);
  outbound_.erase(send.key);
  send.registered = false;
}

void LongSender::End(SendQueue& peer, LongSend& send, const Status& result) {
  {
    std::lock_guard peer_lock(peer.mu());
    if (peer.generation() == send.generation) {
      LearnLocked(peer, send);
      if (!result.ok() && peer.state() != SendQueue::State::kFailed) {
        // Tell the receiver (best effort: its networks may be the ones gone).
        PostControlLocked(peer, peer.default_route(), wire::FrameKind::kAbort, send,
                          kAbortBySender);
      }
    }
  }
  // Out of the table before `send` goes; the poller looks it up there only.
  Unregister(send);
}

void LongSender::LearnLocked(SendQueue& peer, LongSend& send) {
  std::lock_guard lock(send.mu);
  std::span<RailHealth> health = peer.health();
  for (size_t route = 0; route < send.fragments.rails(); ++route) {
    health[route].bandwidth = send.fragments.Learned(route, health[route].bandwidth);
  }
}

// Probes while the grant is missing and places fragments once granted.
std::optional<Status> LongSender::Step(SendQueue& peer, LongSend& send) {
  std::lock_guard peer_lock(peer.mu());
  const auto now = Clock::now();
  if (peer.state() == SendQueue::State::kFailed) return peer.failure();
  if (peer.generation() != send.generation) {
    return Unavailable(fmt::format("the connection to {} was reset while the message was sent",
                                   peer.process().ToString()));
  }
  if (shutting_down_.load(std::memory_order_relaxed)) {
    return Unavailable("the runtime is shutting down");
  }
  std::unique_lock lock(send.mu);
  if (!send.aborted.ok()) return send.aborted;
  if (send.fragments.done()) return Status::Ok();
  // While we do not read (congested), nothing can be heard.
  if (receive_.Congested()) send.last_heard = now;
  if (now - send.last_heard > limits_.partial_timeout) {
    return Silence(send, limits_.partial_timeout);
  }
  const bool probe_due = !send.granted && now >= send.next_probe;
  if (send.granted) {
    if (Status placed = PlaceFragmentsLocked(peer, send, now); !placed.ok()) return placed;
  }
  lock.unlock();
  if (probe_due) {
    send.next_probe = now + send.probe_every;
    ProbeLocked(peer, send, send.probes++, now);
  }
  return std::nullopt;
}

// Networks that broke or went silent give their fragments back, then
// fragments go out until the best network's window is full or none is
// left to send (fragment_scheduler.h).
Status LongSender::PlaceFragmentsLocked(SendQueue& peer, LongSend& send, Clock::time_point now) {
  const std::vector<PeerRail>& peer_rails = peer.rails();
  std::span<RailHealth> health = peer.health();
  for (size_t route = 0; route < health.size(); ++route) {
    // Broken for good once Reroute or the route found it so.
    health[route].broken = health[route].broken || peer_rails[route].route->Broken();
  }
  const auto failures = send.fragments.StartRound(health, now, receive_.Congested());
  bool any_live = false;
  // A network that went silent (not broken) is tried again at its retry
  // time: its route may be connecting again (tcp keeps what it was given
  // and sends it once it is back), or its peer slow. Only networks broken
  // for good leave nothing to wait for; silence is bounded by
  // partial_timeout.
  bool any_left = false;
  for (const RailHealth& route_health : health) {
    any_live |= !route_health.failed;
    any_left |= !route_health.broken;
  }
  ReportFailuresLocked(peer, failures, any_live);
  if (!any_live && any_left) {
    // Nothing else to use: the silent ones are tried again after one
    // timeout, not after retry_after_timeouts of them.
    for (RailHealth& route_health : health) {
      if (!route_health.broken) {
        route_health.retry_at = std::min(route_health.retry_at, now + limits_.fragment_timeout);
      }
    }
  }
  if (!any_left) {
    std::string names;
    for (const PeerRail& failed_rail : peer_rails) {
      names +=
          fmt::format("{}{}", names.empty() ? "" : ", ", events_.NetworkName(failed_rail.rail));
    }
    const FragmentScheduler& fragments = send.fragments;
    return Unavailable(
        fmt::format("no network reaches {} any more ({} broken): {} of {} fragments of the {} byte "
                    "message were not acknowledged",
                    peer.process().ToString(), names, fragments.count() - fragments.acked(),
                    fragments.count(), send.data.size()));
  }
  while (const auto placement = send.fragments.Next(health)) {
    const uint64_t offset = send.fragments.Offset(placement->index);
    const uint64_t length = send.fragments.Length(placement->index);
    wire::Header header = wire::FragmentHeader(
        Gid::FromRaw(send.key.source), Gid::FromRaw(send.key.destination), send.tag, send.key.seq,
        offset, static_cast<uint32_t>(length), send.data.size());
    header.flags = send.flags;
    if (!peer.PostFragment(int(placement->rail), header, send.data.subspan(offset, length),
                           placement->resent)) {
      send.fragments.Full(placement->rail);
      continue;
    }
    send.fragments.Posted(*placement, now);
  }
  return Status::Ok();
}

void LongSender::ReportFailuresLocked(SendQueue& peer,
                                      const std::vector<FragmentScheduler::Failure>& failures,
                                      bool any_live) {
  for (const FragmentScheduler::Failure& failure : failures) {
    const int network = peer.rails()[failure.rail].rail;
    if (failure.news) {
      Log().warn("tocl: network {} to {} {}; its {} unacknowledged fragments {}",
                 events_.NetworkName(network), peer.process().ToString(),
                 failure.broken ? "broke" : "acknowledged nothing in time", failure.unacknowledged,
                 any_live ? "go over the other networks" : "have no other network to take");
      events_.NetworkFailed(network);
    }
    peer.AvoidRoute(int(failure.rail));
  }
}

// The network the start or the grant went by may be the one that died.
void LongSender::ProbeLocked(SendQueue& peer, const LongSend& send, size_t round,
                             Clock::time_point now) {
  std::vector<int> live;
  for (size_t route = 0; route < peer.rails().size(); ++route) {
    if (peer.health()[route].UsableAt(now) && !peer.rails()[route].route->Broken()) {
      live.push_back(int(route));
    }
  }
  const int route = live.empty() ? peer.default_route() : live[round % live.size()];
  PostControlLocked(peer, route, wire::FrameKind::kProbe, send, kProbeAsk);
}

// Best effort: a frame that cannot go now is dropped (the probe is sent
// again next round; an abort the receiver misses ends by its partial_timeout).
void LongSender::PostControlLocked(SendQueue& peer, int route, wire::FrameKind kind,
                                   const LongSend& send, Tag tag) {
  wire::Header header = wire::ControlHeader(kind, Gid::FromRaw(send.key.source),
                                            Gid::FromRaw(send.key.destination), send.key.seq, tag);
  header.flags = send.flags;
  (void)peer.PostControl(route, header);
}

void LongSender::OnControl(Gid from_process, const wire::Header& header) {
  // Only the receiver's own process speaks about its message (a relayed
  // abort or probe may name any thread: wire::SourceFits).
  if (Gid::FromRaw(header.source).process() != from_process) {
    Log().warn("tocl: ignoring a {} about message {} to {} from process {}",
               static_cast<unsigned>(header.kind), header.seq,
               Gid::FromRaw(header.source).ToString(), from_process.ToString());
    return;
  }
  std::lock_guard lock(mu_);
  // About a message we send: key (our thread, their thread, seq).
  auto it = outbound_.find(LongKey{header.destination, header.source, header.seq});
  if (it == outbound_.end()) return;  // finished already
  LongSend& send = *it->second;
  {
    std::lock_guard send_lock(send.mu);
    switch (header.kind) {
      case wire::FrameKind::kGrant:
        send.granted = true;
        send.last_heard = Clock::now();
        break;
      case wire::FrameKind::kProbe:  // the receiver waits for memory for it
        send.last_heard = Clock::now();
        break;
      case wire::FrameKind::kAbort:
        send.aborted = Unavailable(fmt::format(
            "the receiver {} gave up the message (its thread left, or the message stopped "
            "arriving for longer than its partial_timeout)",
            Gid::FromRaw(header.source).ToString()));
        break;
      case wire::FrameKind::kAck: {
        const auto now = Clock::now();
        if (send.fragments.Acknowledge(header.offset, header.total, now) > 0) {
          send.last_heard = now;
        }
        break;
      }
      default:
        break;
    }
  }
  send.wake->Wake();
}

}  // namespace tocl::runtime
