// Receiving a long message: memory for it, its fragments put in place, the
// acknowledgements, and RecvInto (long_message.h explains the protocol).
#include <fmt/format.h>

#include <cstring>

#include "buffers/large_slot.h"
#include "core/logger.h"
#include "runtime/runtime_impl.h"

namespace tocl {

using runtime::InboundLong;
using runtime::LongKey;
using runtime::LongSend;
using runtime::Mailbox;
using runtime::PostedReceive;
using runtime::SendQueue;
using Clock = std::chrono::steady_clock;

namespace {

// kAbort's tag says who gives up.
constexpr Tag kAbortBySender = 0;
constexpr Tag kAbortByReceiver = 1;

constexpr auto kPartialCheckPeriod = std::chrono::milliseconds(200);
// Fragments per message: 2^24 (1 TiB in 64 KiB fragments); a start asking
// for more (tiny fragments) is a broken or hostile sender.
constexpr uint64_t kMaxFragments = uint64_t{1} << 24;
// Messages given up whose late fragments are answered with an abort.
constexpr size_t kRememberAborted = 4096;

}  // namespace

// Sends a control frame about message `about` (sender `about.source`,
// receiver `about.destination`) to the process `peer_process`, preferably
// over our network `network`.
void Runtime::Impl::SendToPeer(Gid peer_process, int network, wire::FrameKind kind,
                               const LongKey& about, uint64_t offset, uint64_t length) {
  auto found = PeerOfProcess(peer_process);
  if (!found.ok()) return;
  SendQueue& peer = **found;
  std::lock_guard lock(peer.mu());
  if (Status status = ResolvePeerLocked(peer); !status.ok()) {
    Log().debug("tocl: cannot answer {}: {}", peer_process.ToString(), status.ToString());
    return;
  }
  // Toward the sender (grant, ack, receiver's abort) or the receiver.
  const bool to_sender = Gid::FromRaw(about.source).process() == peer_process;
  const Gid from = Gid::FromRaw(to_sender ? about.destination : about.source);
  const Gid to = Gid::FromRaw(to_sender ? about.source : about.destination);
  Tag tag = 0;
  if (kind == wire::FrameKind::kAbort) {
    tag = to_sender ? kAbortByReceiver : kAbortBySender;
  } else if (kind == wire::FrameKind::kProbe) {
    tag = to_sender ? runtime::kProbeWaiting : runtime::kProbeAsk;
  }
  // Over the default route when none goes over `network` (-1).
  Status status = peer.PostControl(
      peer.RouteOver(network), wire::ControlHeader(kind, from, to, about.seq, tag, offset, length));
  // Out of pool buffers is worth a word; a broken route or a failed process
  // was told already, and the long message recovers by probes and timeouts.
  if (status.code() == StatusCode::kResourceExhausted) {
    Log().warn("tocl: cannot answer {}: {}", peer_process.ToString(), status.ToString());
  }
}

Status Runtime::Impl::OnLongStart(Gid from_process, buffers::SlotRef slot) {
  const wire::Header header = slot->header();
  slot.reset();
  const Gid to = Gid::FromRaw(header.destination);
  Mailbox* mailbox = receive.Find(to);
  if (mailbox == nullptr || mailbox->left()) {
    SendToPeer(from_process, -1, wire::FrameKind::kAbort, runtime::KeyOf(header));
    return Status::Ok();
  }
  const uint64_t fragments = (header.total + header.reserved - 1) / header.reserved;
  if (fragments > kMaxFragments) {
    return InvalidArgument(fmt::format("a {} byte message in {} fragments of {} bytes (limit {})",
                                       header.total, fragments, header.reserved, kMaxFragments));
  }
  auto message = std::make_unique<InboundLong>();
  message->key = runtime::KeyOf(header);
  message->source_process = from_process;
  message->total = header.total;
  message->fragment_bytes = header.reserved;
  message->tag = header.tag;
  message->mailbox = mailbox;
  message->have.assign(fragments, false);
  message->last_activity = Clock::now();
  InboundLong& ref = *message;
  {
    std::lock_guard lock(inbound_mu);
    if (!inbound.emplace(message->key, std::move(message)).second) {
      return InvalidArgument(fmt::format("long message {} started twice", header.seq));
    }
    // Behind starts that wait for memory (FIFO), unless a RecvInto takes it.
    if (!TryGrant(ref, waiting_grant.empty())) {
      if (ref.total > options.reassembly_cap) {
        Log().warn(
            "tocl: a {} byte message from {} waits: it is larger than reassembly_cap ({} "
            "bytes); receive it with RecvInto",
            ref.total, Gid::FromRaw(header.source).ToString(), options.reassembly_cap);
      }
      waiting_grant.push_back(&ref);
    }
  }
  FlushControls();
  return Status::Ok();
}

void Runtime::Impl::QueueControlLocked(Gid peer_process, int network, wire::FrameKind kind,
                                       const LongKey& about, uint64_t offset, uint64_t length) {
  control_outbox.push_back(OutControl{peer_process, network, kind, about, offset, length});
}

void Runtime::Impl::FlushControls() {
  std::vector<OutControl> out;
  {
    std::lock_guard lock(inbound_mu);
    if (control_outbox.empty()) return;
    out.swap(control_outbox);
  }
  // Outside inbound_mu: resolving a peer takes dest_mu and may ask the
  // directory.
  for (const OutControl& frame : out) {
    SendToPeer(frame.peer_process, frame.rail, frame.kind, frame.about, frame.offset, frame.length);
  }
}

Result<buffers::LargeSlot*> Runtime::Impl::NewReassemblySlot(uint64_t bytes) {
  reassembly_used.fetch_add(bytes, std::memory_order_relaxed);
  auto large =
      buffers::NewLargeSlot(&rails.front()->subsystem->pool(), bytes, [this](uint64_t freed) {
        // Memory for starts that wait: the poller grants.
        reassembly_used.fetch_sub(freed);
        long_housekeeping.store(true);
        progress->NoteQueued();
        reactor->Wake();
      });
  if (!large.ok()) reassembly_used.fetch_sub(bytes, std::memory_order_relaxed);
  return large;
}

Result<buffers::LargeSlot*> Runtime::Impl::NewMessageSlot(const InboundLong& message) {
  TOCL_ASSIGN_OR_RETURN(buffers::LargeSlot * slot, NewReassemblySlot(message.total));
  slot->header() =
      wire::WholeMessageHeader(Gid::FromRaw(message.key.source),
                               Gid::FromRaw(message.key.destination), message.tag, message.total);
  slot->set_state(BufferState::kInFlight);             // arriving: Take skips it
  slot->refs.fetch_add(1, std::memory_order_relaxed);  // ours, until complete
  return slot;
}

// With inbound_mu held. Library memory only when `library` (its turn).
bool Runtime::Impl::TryGrant(InboundLong& message, bool library) {
  const Gid source = Gid::FromRaw(message.key.source);
  if (message.mailbox->HasPosted()) {
    if (PostedReceive* post =
            message.mailbox->BindPosted(source, message.tag, message.total, &message)) {
      std::lock_guard lock(message.mu);
      message.posted = post;
      message.dest = post->out.data();
    }
  }
  if (message.posted == nullptr) {
    if (!library) return false;
    const uint64_t used = reassembly_used.load(std::memory_order_relaxed);
    if (used + message.total > options.reassembly_cap) return false;
    auto large = NewMessageSlot(message);
    if (!large.ok()) {
      Log().warn("tocl: {}", large.status().ToString());
      return false;
    }
    buffers::LargeSlot* slot = *large;
    {
      std::lock_guard lock(message.mu);
      message.slot = slot;
      message.dest = slot->payload();
    }
    if (!message.mailbox->Deliver(slot)) {
      slot->pool->Unref(slot);  // the mailbox's
    }
  }
  message.granted = true;
  message.last_activity = message.granted_at = Clock::now();
  QueueControlLocked(message.source_process, -1, wire::FrameKind::kGrant, message.key);
  return true;
}

// With inbound_mu held; erases `message`. A message given up here (not by
// its sender) is reported to the sender when `tell_sender`.
void Runtime::Impl::FinishInbound(InboundLong& message, Status status, bool tell_sender) {
  {
    std::lock_guard lock(message.mu);
    if (message.posted != nullptr) {
      PostedReceive* post = message.posted;
      post->info = MessageInfo{Gid::FromRaw(message.key.source), message.tag, message.total};
      post->status = status;
      post->done.store(true, std::memory_order_release);
      message.posted = nullptr;
    } else if (message.slot != nullptr) {
      if (status.ok()) {
        message.slot->set_state(BufferState::kIdle);
      } else if (message.mailbox->Remove(message.slot)) {
        message.slot->pool->Unref(message.slot);  // the mailbox's
      }
      message.slot->pool->Unref(message.slot);  // ours
      message.slot = nullptr;
    }
    message.dest = nullptr;
  }
  message.mailbox->Wake();
  if (!status.ok()) {
    Log().warn("tocl: a {} byte message from {} to {} was discarded: {}", message.total,
               Gid::FromRaw(message.key.source).ToString(),
               Gid::FromRaw(message.key.destination).ToString(), status.message());
  }
  if (!status.ok() && tell_sender) {
    QueueControlLocked(message.source_process, -1, wire::FrameKind::kAbort, message.key);
    // Its late fragments are answered with an abort, not acknowledged.
    if (aborted_keys.insert(message.key).second) aborted_order.push_back(message.key);
    if (aborted_order.size() > kRememberAborted) {
      aborted_keys.erase(aborted_order.front());
      aborted_order.pop_front();
    }
  }
  std::erase(waiting_grant, &message);
  inbound.erase(message.key);
}

Status Runtime::Impl::OnFragment(int rail, Gid from_process, buffers::SlotRef slot) {
  const wire::Header header = slot->header();
  const LongKey key = runtime::KeyOf(header);
  wire::FrameKind answer = wire::FrameKind::kAck;
  bool complete = false;
  {
    std::lock_guard lock(inbound_mu);
    auto it = inbound.find(key);
    if (it != inbound.end()) {
      InboundLong& message = *it->second;
      const uint64_t fragment = message.fragment_bytes;
      if (message.source_process != from_process || !message.granted ||
          header.total != message.total || header.offset % fragment != 0 ||
          header.length != std::min(fragment, message.total - header.offset)) {
        return InvalidArgument(fmt::format(
            "a fragment ({} bytes at {} of {}) that does not fit long message {} ({} bytes, "
            "fragments of {}{})",
            header.length, header.offset, header.total, header.seq, message.total, fragment,
            message.granted ? "" : ", not granted yet"));
      }
      const uint64_t index = header.offset / fragment;
      message.last_activity = Clock::now();
      if (!message.have[index]) {
        {
          std::lock_guard placing(message.mu);
          std::memcpy(message.dest + header.offset, slot->payload(), header.length);
        }
        message.have[index] = true;
        ++message.received;
      }
      complete = message.received == message.have.size();
    } else if (aborted_keys.count(key) != 0) {
      answer = wire::FrameKind::kAbort;
    }
    // Unknown: a duplicate of a fragment of a message that completed (its
    // acknowledgement was lost with a network). Acknowledged all the same.
  }
  slot.reset();
  if (answer == wire::FrameKind::kAbort) {
    FlushControls();
    SendToPeer(from_process, rail, wire::FrameKind::kAbort, key);
    return Status::Ok();
  }
  {
    // Acknowledgements wait for the end of this poll round (LongHousekeeping):
    // fragments of one message that arrive together over one network, one
    // after the other, are acknowledged by one frame.
    std::lock_guard lock(inbound_mu);
    OutControl* last = pending_acks.empty() ? nullptr : &pending_acks.back();
    if (last != nullptr && last->peer_process == from_process && last->rail == rail &&
        last->about == key && last->offset + last->length == header.offset) {
      last->length += header.length;
    } else {
      pending_acks.push_back(
          OutControl{from_process, rail, wire::FrameKind::kAck, key, header.offset, header.length});
    }
  }
  if (!complete) {
    long_housekeeping.store(true, std::memory_order_relaxed);
    progress->NoteQueued();
    FlushControls();
    return Status::Ok();
  }
  // The last fragment: its acknowledgements leave before the receiver
  // learns (it may exit at once), then the message is handed over.
  FlushAcks();
  std::lock_guard lock(inbound_mu);
  auto it = inbound.find(key);
  if (it != inbound.end()) FinishInbound(*it->second, Status::Ok(), false);
  return Status::Ok();
}

void Runtime::Impl::FlushAcks() {
  {
    std::lock_guard lock(inbound_mu);
    control_outbox.insert(control_outbox.end(), pending_acks.begin(), pending_acks.end());
    pending_acks.clear();
  }
  FlushControls();
}

Status Runtime::Impl::OnLongControl(int rail, Gid from_process, buffers::SlotRef slot) {
  const wire::Header header = slot->header();
  slot.reset();
  // About a message we receive: key (their thread, our thread, seq).
  const LongKey inbound_key = runtime::KeyOf(header);
  if (header.kind == wire::FrameKind::kAbort && header.tag == kAbortBySender) {
    {
      std::lock_guard lock(inbound_mu);
      auto it = inbound.find(inbound_key);
      if (it != inbound.end()) {
        FinishInbound(*it->second,
                      Unavailable(fmt::format("its sender {} gave up", from_process.ToString())),
                      false);
        return Status::Ok();
      }
    }
    // Outside inbound_mu: what the skip lets through may be a start.
    return pair_order.Skip(from_process, inbound_key);
  }
  if (header.kind == wire::FrameKind::kProbe && header.tag == runtime::kProbeAsk) {
    {
      std::lock_guard lock(inbound_mu);
      auto it = inbound.find(inbound_key);
      if (it != inbound.end() && it->second->source_process == from_process) {
        // Answered over the network the probe came by: it works.
        QueueControlLocked(from_process, rail,
                           it->second->granted ? wire::FrameKind::kGrant : wire::FrameKind::kProbe,
                           inbound_key);
      } else if (aborted_keys.count(inbound_key) != 0) {
        QueueControlLocked(from_process, rail, wire::FrameKind::kAbort, inbound_key);
      }
      // Never seen: no answer; its sender gives up after partial_timeout.
    }
    FlushControls();
    return Status::Ok();
  }
  // About a message we send: key (our thread, their thread, seq).
  std::lock_guard lock(outbound_mu);
  auto it = outbound.find(LongKey{header.destination, header.source, header.seq});
  if (it == outbound.end()) return Status::Ok();  // finished already
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
  return Status::Ok();
}

bool Runtime::Impl::LongHousekeeping() {
  const auto now = Clock::now();
  const bool asked = long_housekeeping.exchange(false);
  if (!asked && now < next_partial_check) {
    std::lock_guard lock(inbound_mu);
    return !waiting_grant.empty();
  }
  bool more = false;
  {
    std::lock_guard lock(inbound_mu);
    control_outbox.insert(control_outbox.end(), pending_acks.begin(), pending_acks.end());
    pending_acks.clear();
    // In arrival order: the first that can ever fit has the turn for library
    // memory; any may go into a RecvInto buffer.
    std::vector<InboundLong*> gone;
    bool library_taken = false;
    for (size_t i = 0; i < waiting_grant.size();) {
      InboundLong* message = waiting_grant[i];
      if (message->mailbox->left()) {
        gone.push_back(message);
        ++i;
        continue;
      }
      const bool fits = message->total <= options.reassembly_cap;
      if (TryGrant(*message, fits && !library_taken)) {
        waiting_grant.erase(waiting_grant.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      library_taken = library_taken || fits;
      ++i;
    }
    for (InboundLong* message : gone) {
      FinishInbound(*message, FailedPrecondition("the receiving thread left"), true);
    }
    if (now >= next_partial_check) {
      next_partial_check = now + kPartialCheckPeriod;
      std::vector<InboundLong*> stale;
      for (auto& [key, message] : inbound) {
        if (!message->granted) continue;
        if (now - message->last_activity > options.partial_timeout) {
          stale.push_back(message.get());
        } else if (message->received == 0 && now - message->granted_at > options.fragment_timeout) {
          // Nothing came since the grant: it may have been lost with a network.
          message->granted_at = now;
          QueueControlLocked(message->source_process, -1, wire::FrameKind::kGrant, message->key);
        }
      }
      for (InboundLong* message : stale) {
        FinishInbound(
            *message,
            Unavailable(fmt::format("{} of {} fragments arrived and then nothing for {} ms",
                                    message->received, message->have.size(),
                                    options.partial_timeout.count())),
            true);
      }
    }
    more = !waiting_grant.empty() || !inbound.empty();
  }
  FlushControls();
  return more;
}

void Runtime::Impl::UnbindPosted(PostedReceive& post) {
  {
    std::lock_guard lock(inbound_mu);
    if (post.done.load(std::memory_order_acquire)) return;
    auto* message = static_cast<InboundLong*>(post.bound);
    // Still arriving: move what came so far to library memory and let the
    // rest land there; the message waits in the mailbox for a later receive.
    auto large = NewMessageSlot(*message);
    if (!large.ok()) {
      FinishInbound(*message, large.status(), true);
      return;
    }
    buffers::LargeSlot* slot = *large;
    {
      std::lock_guard placing(message->mu);
      std::memcpy(slot->payload(), post.out.data(), message->total);
      message->posted = nullptr;
      message->slot = slot;
      message->dest = slot->payload();
    }
    if (!message->mailbox->Deliver(slot)) slot->pool->Unref(slot);
  }
  FlushControls();
}

}  // namespace tocl
