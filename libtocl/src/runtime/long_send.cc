// Sending a long message: the sending thread cuts it into fragments and
// spreads them over every network that reaches the destination
// (long_message.h explains the protocol; the frames are in wire/frame.h).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <deque>

#include "buffers/large_slot.h"
#include "core/logger.h"
#include "runtime/runtime_impl.h"

namespace tocl {

using runtime::LongSend;
using runtime::PeerRail;
using runtime::SendPeer;
using Clock = std::chrono::steady_clock;

namespace {

// Unacknowledged fragments per network and message: enough to cover the
// bandwidth-delay product of a fast link (32 x 64 KiB = 2 MiB).
constexpr uint64_t kWindowFragments = 32;
// A failed network is tried again after this many fragment timeouts.
constexpr int kRetryAfterTimeouts = 10;
// Bandwidth is trusted once this many fragments were acknowledged.
constexpr uint64_t kMeasuredAfter = 4;

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
    wire::Header& header = (*large)->header();
    header.tag = tag;
    header.source = from.raw();
    header.destination = to.raw();
    std::memcpy((*large)->payload(), payload.data(), payload.size());
    buffers::SlotRef slot(*large);
    return DeliverLocal(slot);  // an error drops `slot`
  }

  TOCL_ASSIGN_OR_RETURN(SendPeer * destination, PeerOf(to));
  SendPeer& peer = *destination;
  runtime::Mailbox* wake = threads.Find(from.thread_index());
  LongSend send;
  send.data = payload;
  send.fragment_bytes = buffers::ClassBytes(num_classes - 1) - wire::kHeaderBytes;
  const uint64_t count = (payload.size() + send.fragment_bytes - 1) / send.fragment_bytes;
  send.fragments.assign(count, LongSend::Fragment::kUnsent);
  send.rail_of.assign(count, -1);
  send.wake = wake;
  send.last_heard = Clock::now();  // before the poller can see it
  std::deque<uint64_t> retry;      // fragments to send again (their network failed)
  uint64_t next_fresh = 0;

  std::unique_lock peer_lock(peer.mu);
  TOCL_RETURN_IF_ERROR(ResolvePeerLocked(peer));
  // A peer reset while we wait (its host went down and came back) has new
  // rails: our indexes into them would be stale.
  const uint64_t generation = peer.generation;
  send.rails.resize(peer.rails.size());
  uint64_t& seq = PairSeqLocked(peer, from, to);
  send.key = runtime::LongKey{from.raw(), to.raw(), seq};
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

  // The start travels in the pair's order, like a short message.
  {
    TOCL_ASSIGN_OR_RETURN(buffers::SlotRef start,
                          ControlFrame(peer.rails[peer.default_rail].rail,
                                       wire::FrameKind::kLongStart, from, to, seq));
    start->header().tag = tag;
    start->header().total = payload.size();
    start->header().reserved = send.fragment_bytes;
    Status posted = PostControlLocked(peer, peer.default_rail, start);
    if (!posted.ok()) {
      start.reset();  // before failing the peer, as the queued frames are
      FailPeerLocked(peer, posted);
      return posted;
    }
    ++seq;
  }
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
  Status result;
  for (;;) {
    const uint32_t seen = wake->signal();
    const auto now = Clock::now();
    if (peer.state == SendPeer::State::kFailed) {
      result = peer.failure;
      break;
    }
    if (peer.generation != generation) {
      result = Unavailable(fmt::format("the connection to {} was reset while the message was sent",
                                       peer.process.ToString()));
      break;
    }
    if (shutting_down.load(std::memory_order_relaxed)) {
      result = Unavailable("the runtime is shutting down");
      break;
    }
    std::unique_lock lock(send.mu);
    if (!send.aborted.ok()) {
      result = send.aborted;
      break;
    }
    if (send.acked == count) break;
    // While we do not read (congested), nothing can be heard.
    if (Congested()) send.last_heard = now;
    if (now - send.last_heard > options.partial_timeout) {
      result = Unavailable(
          send.granted
              ? fmt::format("nothing of the {} byte message to {} was acknowledged for {} ms "
                            "(partial_timeout); {} of {} fragments were not",
                            payload.size(), to.ToString(), options.partial_timeout.count(),
                            count - send.acked, count)
              : fmt::format("{} answered nothing about the {} byte message for {} ms "
                            "(partial_timeout): its start was lost with a connection, or the "
                            "process does not read",
                            to.ToString(), payload.size(), options.partial_timeout.count()));
      break;
    }
    const bool probe_due = !send.granted && now >= next_probe;
    if (send.granted) {
      // Networks that stopped answering (or broke) give their fragments back.
      for (size_t r = 0; r < peer.rails.size(); ++r) {
        PeerRail& rail = peer.rails[r];
        LongSend::RailProgress& progress_r = send.rails[r];
        if (rail.failed && now >= rail.retry_at) rail.failed = false;
        const bool broken = rail.route->Broken();
        const bool silent = progress_r.inflight > 0 && !Congested() &&
                            now - progress_r.last_ack > options.fragment_timeout;
        if (!broken && !silent) continue;
        if (!rail.failed || progress_r.inflight > 0) {
          bool others = false;
          for (size_t other = 0; other < peer.rails.size(); ++other) {
            others |= other != r && !peer.rails[other].failed;
          }
          Log().warn("tocl: network {} ({}) to {} {}; its {} unacknowledged fragments {}",
                     rails[rail.rail]->spec.name, rails[rail.rail]->spec.device,
                     peer.process.ToString(), broken ? "broke" : "acknowledged nothing in time",
                     progress_r.inflight,
                     others ? "go over the other networks" : "have no other network to take");
          rails[rail.rail]->failures.fetch_add(1, std::memory_order_relaxed);
        }
        rail.failed = true;
        rail.retry_at = now + options.fragment_timeout * kRetryAfterTimeouts;
        for (uint64_t i = 0; i < count; ++i) {
          if (send.fragments[i] == LongSend::Fragment::kPosted && send.rail_of[i] == int(r)) {
            send.fragments[i] = LongSend::Fragment::kUnsent;
            retry.push_back(i);
          }
        }
        progress_r.inflight = 0;
        if (peer.default_rail == int(r)) {
          for (size_t other = 0; other < peer.rails.size(); ++other) {
            if (!peer.rails[other].failed) {
              peer.default_rail = int(other);
              break;
            }
          }
        }
      }
      // Bandwidth per network: this message's when measured, else what the
      // peer showed before; unknown ones count as the mean of the known.
      std::vector<double> bandwidth(peer.rails.size(), 0);
      double known_sum = 0;
      int known = 0;
      for (size_t r = 0; r < peer.rails.size(); ++r) {
        const LongSend::RailProgress& p = send.rails[r];
        const double seconds = std::chrono::duration<double>(p.last_ack - p.first_post).count();
        if (p.acked_bytes >= kMeasuredAfter * send.fragment_bytes && seconds > 0) {
          bandwidth[r] = double(p.acked_bytes) / seconds;
        } else {
          bandwidth[r] = peer.rails[r].bandwidth;
        }
        if (bandwidth[r] > 0) {
          known_sum += bandwidth[r];
          ++known;
        }
      }
      for (double& b : bandwidth) {
        if (b <= 0) b = known > 0 ? known_sum / known : 1.0;
      }
      bool any_live = false;
      for (auto& rail : peer.rails) any_live |= !rail.failed;
      if (!any_live) {
        std::string names;
        for (const PeerRail& failed_rail : peer.rails) {
          names +=
              fmt::format("{}{} ({})", names.empty() ? "" : ", ",
                          rails[failed_rail.rail]->spec.name, rails[failed_rail.rail]->spec.device);
        }
        result = Unavailable(fmt::format(
            "no network reaches {} any more ({} failed): {} of {} fragments of the {} byte "
            "message were not acknowledged in {} ms",
            peer.process.ToString(), names, count - send.acked, count, payload.size(),
            options.fragment_timeout.count()));
        break;
      }
      // Earliest expected finish: each fragment goes to the network that
      // would deliver it first, counting what it already carries; when that
      // network's window is full, wait for it rather than use a slower one.
      std::vector<bool> full(peer.rails.size(), false);
      while (!retry.empty() || next_fresh < count) {
        if (!retry.empty() && send.fragments[retry.front()] == LongSend::Fragment::kAcked) {
          retry.pop_front();
          continue;
        }
        int best = -1;
        double best_finish = 0;
        for (size_t r = 0; r < peer.rails.size(); ++r) {
          if (peer.rails[r].failed || full[r]) continue;
          const double finish =
              double((send.rails[r].inflight + 1) * send.fragment_bytes) / bandwidth[r];
          if (best < 0 || finish < best_finish) {
            best = int(r);
            best_finish = finish;
          }
        }
        if (best < 0 || send.rails[best].inflight >= kWindowFragments) break;
        PeerRail& rail = peer.rails[best];
        const uint64_t index = retry.empty() ? next_fresh : retry.front();
        const uint64_t offset = index * send.fragment_bytes;
        const uint64_t length = std::min<uint64_t>(send.fragment_bytes, payload.size() - offset);
        wire::Header header;
        header.kind = wire::FrameKind::kFragment;
        header.tag = tag;
        header.length = static_cast<uint32_t>(length);
        header.source = from.raw();
        header.destination = to.raw();
        header.seq = send.key.seq;
        header.offset = offset;
        header.total = payload.size();
        const std::span<const std::byte> piece = payload.subspan(offset, length);
        // Straight from the user's memory where the network can (shm: into
        // the buffer the receiver provided), else through a pool buffer.
        Status status = rail.route->PostCopy(header, piece);
        if (status.code() == StatusCode::kUnimplemented) {
          buffers::SlotRef slot(
              rails[rail.rail]->subsystem->pool().TryGet(buffers::ClassFor(length)));
          if (!slot) {
            full[best] = true;
            continue;
          }
          slot->header() = header;
          std::memcpy(slot->payload(), piece.data(), length);
          slot->set_state(BufferState::kInFlight);
          status = rail.route->PostRef(slot);  // not taken: dropped with `slot`
        }
        if (!status.ok()) {
          full[best] = true;  // TryAgain: later; broken: failed in the next round
          continue;
        }
        ++rail.frames_sent;
        rail.bytes_sent += wire::kHeaderBytes + length;
        ++rail.fragments_sent;
        if (send.rail_of[index] >= 0) ++rail.fragments_resent;
        if (retry.empty()) {
          ++next_fresh;
        } else {
          retry.pop_front();
        }
        LongSend::RailProgress& p = send.rails[best];
        if (p.first_post == Clock::time_point()) p.first_post = now;
        if (p.inflight == 0) p.last_ack = now;
        ++p.inflight;
        send.fragments[index] = LongSend::Fragment::kPosted;
        send.rail_of[index] = static_cast<int8_t>(best);
      }
    }
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
    AwaitSignal(*wake, seen, until, until);
    peer_lock.lock();
  }

  // What this message taught about each network.
  {
    std::lock_guard lock(send.mu);
    for (size_t r = 0;
         peer.generation == generation && r < peer.rails.size() && r < send.rails.size(); ++r) {
      const LongSend::RailProgress& p = send.rails[r];
      const double seconds = std::chrono::duration<double>(p.last_ack - p.first_post).count();
      if (p.acked_bytes < kMeasuredAfter * send.fragment_bytes || seconds <= 0) continue;
      const double measured = double(p.acked_bytes) / seconds;
      double& learned = peer.rails[r].bandwidth;
      learned = learned == 0 ? measured : 0.5 * learned + 0.5 * measured;
    }
  }
  if (!result.ok() && peer.state != SendPeer::State::kFailed && peer.generation == generation) {
    // Tell the receiver (best effort: its networks may be the ones gone).
    PostSenderControlLocked(peer, peer.default_rail, wire::FrameKind::kAbort, send.key, 0);
  }
  return result;
}

// Asks the receiver what became of long message `key` (long_message.h),
// over the peer's live networks in turn: the one the start or the grant
// went by may be the one that died.
void Runtime::Impl::ProbeLocked(SendPeer& peer, const runtime::LongKey& key, size_t round,
                                Clock::time_point now) {
  std::vector<int> live;
  for (size_t r = 0; r < peer.rails.size(); ++r) {
    const PeerRail& rail = peer.rails[r];
    if ((!rail.failed || now >= rail.retry_at) && !rail.route->Broken()) live.push_back(int(r));
  }
  const int r = live.empty() ? peer.default_rail : live[round % live.size()];
  PostSenderControlLocked(peer, r, wire::FrameKind::kProbe, key, runtime::kProbeAsk);
}

// Best effort: a frame that cannot go now is dropped (the probe is sent
// again next round; an abort the receiver misses ends by its partial_timeout).
void Runtime::Impl::PostSenderControlLocked(SendPeer& peer, int rail, wire::FrameKind kind,
                                            const runtime::LongKey& key, Tag tag) {
  auto frame = ControlFrame(peer.rails[rail].rail, kind, Gid::FromRaw(key.source),
                            Gid::FromRaw(key.destination), key.seq);
  if (!frame.ok()) return;
  (*frame)->header().tag = tag;
  (void)PostControlLocked(peer, rail, *frame);  // not taken: dropped with `frame`
}

}  // namespace tocl
