#include "runtime/long_receiver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/logger.h"

namespace tocl::runtime {

namespace {

// Fragments per message: 2^24 (1 TiB in 64 KiB fragments); a start asking
// for more (tiny fragments) is a broken or hostile sender.
constexpr uint64_t kMaxFragments = uint64_t{1} << 24;
// Messages given up whose late fragments are answered with an abort.
constexpr size_t kRememberAborted = 4096;

bool IsPiece(const InboundLong& message) {
  return (message.flags & wire::kFlagPackedPiece) != 0;
}

}  // namespace

LongReceiver::LongReceiver(Limits limits, ReceiveSide& receive, Events& events)
    : limits_(limits),
      mappings_(std::min(limits.reassembly_cap, kKeptMappingBytes)),
      receive_(receive),
      events_(events) {}

void LongReceiver::Clear() {
  std::lock_guard lock(mu_);
  for (auto& [key, message] : inbound_) {
    if (message->slot != nullptr) message->slot->pool->Unref(message->slot);
  }
  inbound_.clear();
  waiting_grant_.clear();
  waiting_receive_.clear();
}

// --- frames -------------------------------------------------------------------

Status LongReceiver::OnLongStart(Gid from_process, buffers::SlotRef slot) {
  const wire::Header header = slot->header();
  slot.reset();
  const Gid to = Gid::FromRaw(header.destination);
  Mailbox* mailbox = receive_.Find(to);
  if (mailbox == nullptr || mailbox->left()) {
    if (wire::Relayed(header)) {
      // A multicast's fill: a second one is answered "given up" too.
      std::lock_guard lock(mu_);
      RememberAbortedLocked(KeyOf(header));
    }
    SendControl(from_process, -1, wire::FrameKind::kAbort, KeyOf(header));
    return Status::Ok();
  }
  const uint64_t fragments = (header.total + header.reserved - 1) / header.reserved;
  if (fragments > kMaxFragments) {
    return InvalidArgument(fmt::format("a {} byte message in {} fragments of {} bytes (limit {})",
                                       header.total, fragments, header.reserved, kMaxFragments));
  }
  auto message = std::make_unique<InboundLong>();
  message->key = KeyOf(header);
  message->source_process = from_process;
  message->total = header.total;
  message->fragment_bytes = header.reserved;
  message->tag = header.tag;
  message->flags = header.flags;
  message->mailbox = mailbox;
  message->have.assign(fragments, false);
  message->last_activity = Clock::now();
  InboundLong& ref = *message;
  {
    std::lock_guard lock(mu_);
    if (!inbound_.emplace(message->key, std::move(message)).second) {
      return InvalidArgument(fmt::format("long message {} started twice", header.seq));
    }
    // Behind starts that wait for memory (FIFO), unless a RecvInto takes it.
    const Grant grant = TryGrantLocked(ref, waiting_grant_.empty());
    if (grant == Grant::kRefused) {
      FinishLocked(ref, RefusedPiece(ref), /*tell_sender=*/true);
    } else if (grant == Grant::kWaits && IsPiece(ref)) {
      waiting_receive_.push_back(&ref);
    } else if (grant == Grant::kWaits) {
      if (ref.total > limits_.reassembly_cap) {
        Log().warn(
            "tocl: a {} byte message from {} waits: it is larger than reassembly_cap ({} "
            "bytes); receive it with RecvInto",
            ref.total, Gid::FromRaw(header.source).ToString(), limits_.reassembly_cap);
      }
      waiting_grant_.push_back(&ref);
    }
  }
  FlushControls();
  return Status::Ok();
}

Status LongReceiver::OnFragment(int network, Gid from_process, buffers::SlotRef slot) {
  const wire::Header header = slot->header();
  const LongKey key = KeyOf(header);
  Placed placed = Placed::kPlaced;
  {
    std::lock_guard lock(mu_);
    TOCL_ASSIGN_OR_RETURN(placed, PlaceLocked(from_process, header, slot));
  }
  slot.reset();
  if (placed == Placed::kAborted) {
    FlushControls();
    SendControl(from_process, network, wire::FrameKind::kAbort, key);
    return Status::Ok();
  }
  {
    // Acknowledgements wait for the end of this poll round (Housekeeping):
    // fragments of one message that arrive together over one network, one
    // after the other, are acknowledged by one frame.
    std::lock_guard lock(mu_);
    QueueAckLocked(from_process, network, header);
  }
  if (placed != Placed::kComplete) {
    housekeeping_.store(true, std::memory_order_relaxed);
    events_.HousekeepingDue(/*wake=*/false);
    FlushControls();
    return Status::Ok();
  }
  // The last fragment: its acknowledgements leave before the receiver
  // learns (it may exit at once), then the message is handed over.
  FlushAcks();
  std::lock_guard lock(mu_);
  auto it = inbound_.find(key);
  if (it != inbound_.end()) FinishLocked(*it->second, Status::Ok(), false);
  return Status::Ok();
}

Result<LongReceiver::Placed> LongReceiver::PlaceLocked(Gid from_process, const wire::Header& header,
                                                       const buffers::SlotRef& slot) {
  const LongKey key = KeyOf(header);
  auto it = inbound_.find(key);
  if (it == inbound_.end()) {
    fragments_dropped_.fetch_add(1, std::memory_order_relaxed);
    // Unknown: a duplicate of a fragment of a message that completed (its
    // acknowledgement was lost with a network). Acknowledged all the same.
    return aborted_keys_.count(key) != 0 ? Placed::kAborted : Placed::kUnknown;
  }
  InboundLong& message = *it->second;
  const uint64_t fragment = message.fragment_bytes;
  if (message.source_process != from_process && wire::Relayed(header)) {
    // A fill's fragment from the carrier it was taken from (OnRefill):
    // told to stop, not acknowledged (it would report bytes it did not
    // place as given).
    fragments_dropped_.fetch_add(1, std::memory_order_relaxed);
    return Placed::kAborted;
  }
  if (message.source_process != from_process || !message.granted || header.total != message.total ||
      header.offset % fragment != 0 ||
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
  } else {
    fragments_dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  return message.received == message.have.size() ? Placed::kComplete : Placed::kPlaced;
}

void LongReceiver::QueueAckLocked(Gid from_process, int network, const wire::Header& fragment) {
  const LongKey key = KeyOf(fragment);
  OutControl* last = pending_acks_.empty() ? nullptr : &pending_acks_.back();
  if (last != nullptr && last->peer_process == from_process && last->network == network &&
      last->about == key && last->offset + last->length == fragment.offset) {
    last->length += fragment.length;
  } else {
    pending_acks_.push_back(OutControl{from_process, network, wire::FrameKind::kAck, key,
                                       fragment.offset, fragment.length});
  }
}

Status LongReceiver::OnControl(int network, Gid from_process, const wire::Header& header) {
  // About a message we receive: key (their thread, our thread, seq).
  const LongKey key = KeyOf(header);
  if (header.kind == wire::FrameKind::kAbort && header.tag == kAbortBySender) {
    {
      std::lock_guard lock(mu_);
      auto it = inbound_.find(key);
      if (it != inbound_.end()) {
        // Only the process carrying it may end it (a relayed abort may
        // name any sender: wire::SourceFits).
        if (it->second->source_process != from_process) {
          Log().warn("tocl: ignoring an abort of long message {} from {}: {} carries it", key.seq,
                     from_process.ToString(), it->second->source_process.ToString());
          return Status::Ok();
        }
        if (Gid::FromRaw(key.source).process() != from_process) {
          // A relay gave up a multicast's fill: its sender sends it itself.
          OrphanLocked(*it->second);
        } else {
          FinishLocked(*it->second,
                       Unavailable(fmt::format("its sender {} gave up", from_process.ToString())),
                       false);
        }
        return Status::Ok();
      }
    }
    // Outside mu_: what the skip lets through may be a start.
    return events_.SkipInOrder(from_process, key);
  }
  if (header.kind == wire::FrameKind::kProbe && header.tag == kProbeAsk) {
    {
      std::lock_guard lock(mu_);
      auto it = inbound_.find(key);
      if (it != inbound_.end() && it->second->source_process == from_process) {
        // Answered over the network the probe came by: it works.
        QueueControlLocked(from_process, network,
                           it->second->granted ? wire::FrameKind::kGrant : wire::FrameKind::kProbe,
                           key);
      } else if (aborted_keys_.count(key) != 0) {
        QueueControlLocked(from_process, network, wire::FrameKind::kAbort, key);
      }
      // Never seen: no answer; its sender gives up after partial_timeout.
    }
    FlushControls();
  }
  return Status::Ok();
}

// --- memory and grants ----------------------------------------------------------

LongReceiver::Grant LongReceiver::TryGrantLocked(InboundLong& message, bool library) {
  const Gid source = Gid::FromRaw(message.key.source);
  if (message.mailbox->HasPosted()) {
    bool too_small = false;
    if (PostedReceive* post = message.mailbox->BindPosted(source, message.tag, message.flags,
                                                          message.total, &message, &too_small)) {
      std::lock_guard lock(message.mu);
      message.posted = post;
      // A refused piece's receive is only completed with the error.
      if (too_small) return Grant::kRefused;
      message.dest = post->out.data();
    }
  }
  if (message.posted == nullptr) {
    if (!library || IsPiece(message)) return Grant::kWaits;
    const uint64_t used = reassembly_used_.load(std::memory_order_relaxed);
    if (used + message.total > limits_.reassembly_cap) return Grant::kWaits;
    auto large = NewMessageSlot(message);
    if (!large.ok()) {
      Log().warn("tocl: {}", large.status().ToString());
      return Grant::kWaits;
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
  return Grant::kGranted;
}

Status LongReceiver::RefusedPiece(const InboundLong& message) {
  const size_t room = message.posted != nullptr ? message.posted->out.size() : 0;
  return InvalidArgument(fmt::format(
      "a {} byte packed piece from {} for a {} byte range (its sender broke the packed format)",
      message.total, Gid::FromRaw(message.key.source).ToString(), room));
}

void LongReceiver::FinishLocked(InboundLong& message, Status status, bool tell_sender) {
  {
    std::lock_guard lock(message.mu);
    if (message.posted != nullptr) {
      PostedReceive* post = message.posted;
      post->info = MessageInfo{Gid::FromRaw(message.key.source), message.tag, message.total};
      post->Complete(status);
      message.posted = nullptr;
    } else if (message.slot != nullptr) {
      if (status.ok()) {
        message.mailbox->MessageComplete(message.slot);
      } else if (message.mailbox->Remove(message.slot)) {
        // Ours alone now: a discarded message's memory goes back to the
        // system at once rather than to the mapping cache (a message that
        // failed says little about the next one's size).
        message.slot->cache = nullptr;
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
    RememberAbortedLocked(message.key);
  } else if (!status.ok() && (message.flags & wire::kFlagRelayed) != 0) {
    // A multicast's fill: a second one is answered "given up" (OnRefill).
    RememberAbortedLocked(message.key);
  }
  std::erase(waiting_grant_, &message);
  std::erase(waiting_receive_, &message);
  inbound_.erase(message.key);
}

void LongReceiver::RememberAbortedLocked(const LongKey& key) {
  if (aborted_keys_.insert(key).second) aborted_order_.push_back(key);
  if (aborted_order_.size() > kRememberAborted) {
    aborted_keys_.erase(aborted_order_.front());
    aborted_order_.pop_front();
  }
}

Result<buffers::LargeSlot*> LongReceiver::NewReassemblySlot(uint64_t bytes) {
  if (pool_ == nullptr) return FailedPrecondition("no network is open for library memory");
  reassembly_used_.fetch_add(bytes, std::memory_order_relaxed);
  auto large = buffers::NewLargeSlot(pool_, bytes, &mappings_, [this](uint64_t freed) {
    // Memory for starts that wait: the poller grants.
    reassembly_used_.fetch_sub(freed);
    housekeeping_.store(true);
    events_.HousekeepingDue(/*wake=*/true);
  });
  if (!large.ok()) reassembly_used_.fetch_sub(bytes, std::memory_order_relaxed);
  return large;
}

Result<buffers::LargeSlot*> LongReceiver::NewMessageSlot(const InboundLong& message) {
  TOCL_ASSIGN_OR_RETURN(buffers::LargeSlot * slot, NewReassemblySlot(message.total));
  slot->header() =
      wire::WholeMessageHeader(Gid::FromRaw(message.key.source),
                               Gid::FromRaw(message.key.destination), message.tag, message.total);
  slot->header().flags = message.flags;
  slot->set_state(BufferState::kInFlight);             // arriving: Take skips it
  slot->refs.fetch_add(1, std::memory_order_relaxed);  // ours, until complete
  return slot;
}

Status LongReceiver::DeliverInProcess(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                                      uint16_t flags) {
  TOCL_ASSIGN_OR_RETURN(buffers::SlotRef slot, WholeMessage(from, to, tag, payload));
  slot->header().flags = flags;
  return receive_.Deliver(slot);  // an error drops `slot`
}

Result<buffers::SlotRef> LongReceiver::WholeMessage(Gid from, Gid to, Tag tag,
                                                    std::span<const std::byte> payload) {
  TOCL_ASSIGN_OR_RETURN(buffers::LargeSlot * large, NewReassemblySlot(payload.size()));
  large->header() = wire::WholeMessageHeader(from, to, tag, payload.size());
  if (!payload.empty()) std::memcpy(large->payload(), payload.data(), payload.size());
  return buffers::SlotRef(large);
}

// --- the poller's round ---------------------------------------------------------

bool LongReceiver::Housekeeping(Clock::time_point now) {
  const bool asked = housekeeping_.exchange(false);
  if (!asked && now < next_partial_check_) {
    std::lock_guard lock(mu_);
    return !waiting_grant_.empty();
  }
  bool more = false;
  bool periodic = false;
  {
    std::lock_guard lock(mu_);
    MoveAcksToOutboxLocked();
    GrantWaitingLocked();
    if (now >= next_partial_check_) {
      next_partial_check_ = now + limits_.partial_check_period;
      DiscardSilentLocked(now);
      periodic = true;
    }
    // Pieces waiting for their receive need no round: posting it asks.
    more = !waiting_grant_.empty() || inbound_.size() > waiting_receive_.size();
  }
  if (periodic) mappings_.ReleaseUnusedBefore(now - kKeepMappingsFor);
  FlushControls();
  return more;
}

void LongReceiver::GrantWaitingLocked() {
  // In arrival order: the first that can ever fit has the turn for library
  // memory; any may go into a RecvInto buffer.
  std::vector<InboundLong*> gone;
  std::vector<InboundLong*> refused;
  bool library_taken = false;
  // Pieces (waiting_receive_) never get library memory: only a receive
  // their reader posted takes them.
  auto sweep = [&](std::deque<InboundLong*>& waiting, bool pieces) {
    for (size_t i = 0; i < waiting.size();) {
      InboundLong* message = waiting[i];
      if (message->mailbox->left()) {
        gone.push_back(message);
        ++i;
        continue;
      }
      const bool fits = !pieces && message->total <= limits_.reassembly_cap;
      const Grant grant = TryGrantLocked(*message, fits && !library_taken);
      if (grant == Grant::kWaits) {
        library_taken = library_taken || fits;
        ++i;
        continue;
      }
      if (grant == Grant::kRefused) refused.push_back(message);
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
    }
  };
  sweep(waiting_grant_, /*pieces=*/false);
  sweep(waiting_receive_, /*pieces=*/true);
  for (InboundLong* message : gone) {
    FinishLocked(*message, FailedPrecondition("the receiving thread left"), true);
  }
  for (InboundLong* message : refused) FinishLocked(*message, RefusedPiece(*message), true);
}

void LongReceiver::DiscardSilentLocked(Clock::time_point now) {
  std::vector<InboundLong*> stale;
  for (auto& [key, message] : inbound_) {
    if (!message->granted) continue;
    if (now - message->last_activity > limits_.partial_timeout) {
      stale.push_back(message.get());
    } else if (message->received == 0 && now - message->granted_at > limits_.fragment_timeout) {
      // Nothing came since the grant: it may have been lost with a network.
      message->granted_at = now;
      QueueControlLocked(message->source_process, -1, wire::FrameKind::kGrant, message->key);
    }
  }
  for (InboundLong* message : stale) {
    FinishLocked(*message,
                 Unavailable(fmt::format("{} of {} fragments arrived and then nothing for {} ms",
                                         message->received, message->have.size(),
                                         limits_.partial_timeout.count())),
                 true);
  }
}

void LongReceiver::FlushAcks() {
  {
    std::lock_guard lock(mu_);
    MoveAcksToOutboxLocked();
  }
  FlushControls();
}

void LongReceiver::MoveAcksToOutboxLocked() {
  control_outbox_.insert(control_outbox_.end(), pending_acks_.begin(), pending_acks_.end());
  pending_acks_.clear();
}

// --- other threads --------------------------------------------------------------

void LongReceiver::NoteReceivePosted() {
  housekeeping_.store(true);
  events_.HousekeepingDue(/*wake=*/true);
}

bool LongReceiver::UnbindPosted(PostedReceive& post) {
  {
    std::lock_guard lock(mu_);
    if (post.done.load(std::memory_order_acquire)) return false;
    auto* message = static_cast<InboundLong*>(post.bound);
    // Still arriving: move what came so far to library memory and let the
    // rest land there; the message waits in the mailbox for a later receive.
    auto large = NewMessageSlot(*message);
    if (large.ok()) {
      buffers::LargeSlot* slot = *large;
      {
        std::lock_guard placing(message->mu);
        std::memcpy(slot->payload(), post.out.data(), message->total);
        message->posted = nullptr;
        message->slot = slot;
        message->dest = slot->payload();
      }
      if (!message->mailbox->Deliver(slot)) slot->pool->Unref(slot);
    } else {
      // Its abort is queued: sent below, not at the next housekeeping. The
      // receive completes with the error; its owner gave it up anyway.
      FinishLocked(*message, large.status(), true);
    }
  }
  FlushControls();
  return true;
}

void LongReceiver::CancelBound(const Status& status) {
  {
    std::lock_guard lock(mu_);
    std::vector<InboundLong*> bound;
    for (auto& [key, message] : inbound_) {
      if (message->posted != nullptr) bound.push_back(message.get());
    }
    for (InboundLong* message : bound) FinishLocked(*message, status, true);
  }
  FlushControls();
}

void LongReceiver::SenderExited(Gid process, const std::string& reason) {
  std::lock_guard lock(mu_);
  std::vector<InboundLong*> orphans;
  std::vector<InboundLong*> fills;
  for (auto& [key, message] : inbound_) {
    if (message->source_process != process) continue;
    // A multicast's fill that a relay carried: left for its sender's own
    // try (OnRefill).
    (Gid::FromRaw(key.source).process() == process ? orphans : fills).push_back(message.get());
  }
  for (InboundLong* message : fills) OrphanLocked(*message);
  for (InboundLong* message : orphans) {
    FinishLocked(*message,
                 Unavailable(fmt::format("its sending process {} has exited ({})",
                                         process.ToString(), reason)),
                 false);
  }
}

void LongReceiver::OrphanLocked(InboundLong& message) {
  if (message.granted) {
    // Its memory is in the mailbox: kept, and what came stays, for
    // partial_timeout.
    message.source_process = Gid();
    message.last_activity = Clock::now();
    return;
  }
  // Nothing of it is in the mailbox yet: as if it never started.
  const LongKey key = message.key;
  std::erase(waiting_grant_, &message);
  std::erase(waiting_receive_, &message);
  inbound_.erase(key);
  if (reopened_.size() >= kRememberAborted) reopened_.clear();
  reopened_.insert(key);
}

Status LongReceiver::OnRefill(Gid from_process, buffers::SlotRef slot, bool given_up) {
  const wire::Header header = slot->header();
  const LongKey key = KeyOf(header);
  const bool from_its_sender = Gid::FromRaw(key.source).process() == from_process;
  {
    std::lock_guard lock(mu_);
    auto it = inbound_.find(key);
    if (given_up && it == inbound_.end()) {
      // Its number passed without it (no fill of it was taken): not
      // delivered, whoever carries it now.
      reopened_.erase(key);
      RememberAbortedLocked(key);
      QueueControlLocked(from_process, -1, wire::FrameKind::kAbort, key);
      slot.reset();
    } else if (reopened_.count(key) != 0) {
      // Its relay exited before the grant: the sender's own try starts
      // anew (below); anyone else's is a second copy.
      if (!from_its_sender) return Status::Ok();
      reopened_.erase(key);
    } else if (it == inbound_.end()) {
      // Given up here (its carrier hears so now, not after its
      // partial_timeout), or here whole (all of it acknowledged: its
      // carrier sends nothing more).
      if (aborted_keys_.count(key) != 0) {
        QueueControlLocked(from_process, -1, wire::FrameKind::kAbort, key);
      } else {
        QueueControlLocked(from_process, -1, wire::FrameKind::kAck, key, 0, header.total);
      }
      slot.reset();
    } else if (it->second->source_process == from_process || it->second->total != header.total ||
               it->second->fragment_bytes != header.reserved) {
      return Status::Ok();  // a second copy of its own
    } else if (!from_its_sender) {
      // The relay's, late: its sender carries it now.
      QueueControlLocked(from_process, -1, wire::FrameKind::kAbort, key);
      slot.reset();
    } else {
      // Taken over by the sender's own process (its relay died midway, or
      // is too slow for it): granted again, to the new carrier; what came
      // already stays (its fragments are acknowledged again), and the
      // relay's later fragments are dropped.
      InboundLong& message = *it->second;
      message.source_process = from_process;
      message.last_activity = message.granted_at = Clock::now();
      if (message.granted) QueueControlLocked(from_process, -1, wire::FrameKind::kGrant, key);
      slot.reset();
    }
  }
  if (slot) return OnLongStart(from_process, std::move(slot));
  FlushControls();
  return Status::Ok();
}

// --- control frames ---------------------------------------------------------------

void LongReceiver::QueueControlLocked(Gid peer_process, int network, wire::FrameKind kind,
                                      const LongKey& about, uint64_t offset, uint64_t length) {
  if (peer_process.is_null()) return;  // a fill whose carrier died (SenderExited)
  control_outbox_.push_back(OutControl{peer_process, network, kind, about, offset, length});
}

void LongReceiver::FlushControls() {
  std::vector<OutControl> out;
  {
    std::lock_guard lock(mu_);
    if (control_outbox_.empty()) return;
    out.swap(control_outbox_);
  }
  // Outside mu_: resolving a peer takes the runtime's dest_mu and may ask
  // the directory.
  for (const OutControl& frame : out) {
    SendControl(frame.peer_process, frame.network, frame.kind, frame.about, frame.offset,
                frame.length);
  }
}

void LongReceiver::SendControl(Gid peer_process, int network, wire::FrameKind kind,
                               const LongKey& about, uint64_t offset, uint64_t length) {
  // Toward the sender (grant, ack, receiver's abort) or the receiver. The
  // sender's side may be a relay carrying the message for a thread of
  // another process (multicast): the frame names that thread and says so.
  const bool to_sender = Gid::FromRaw(about.destination).process() != peer_process;
  const bool relayed = to_sender && Gid::FromRaw(about.source).process() != peer_process;
  const Gid from = Gid::FromRaw(to_sender ? about.destination : about.source);
  const Gid to = Gid::FromRaw(to_sender ? about.source : about.destination);
  Tag tag = 0;
  if (kind == wire::FrameKind::kAbort) {
    tag = to_sender ? kAbortByReceiver : kAbortBySender;
  } else if (kind == wire::FrameKind::kProbe) {
    tag = to_sender ? kProbeWaiting : kProbeAsk;
  }
  wire::Header header = wire::ControlHeader(kind, from, to, about.seq, tag, offset, length);
  if (relayed) header.flags = wire::kFlagRelayed;
  events_.SendControl(peer_process, network, header);
}

}  // namespace tocl::runtime
