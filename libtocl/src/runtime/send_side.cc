#include "runtime/send_side.h"

#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "buffers/large_slot.h"
#include "buffers/size_class.h"
#include "runtime/internal_threads.h"
#include "runtime/long_message.h"

namespace tocl::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Rounds of progress and yielding a copying send waits for room in a full
// ring or lane before it takes the way through a pool buffer.
constexpr int kFullRounds = 256;

// A buffer of `pool`'s class `class_index` holding a copy of `payload`
// (its length in the header), waited for at the pool's cap until `deadline`.
Result<buffers::SlotRef> CopyToBuffer(buffers::BufferPool& pool, uint32_t class_index,
                                      std::span<const std::byte> payload,
                                      Clock::time_point deadline) {
  TOCL_ASSIGN_OR_RETURN(detail::BufferSlot * got, pool.Get(class_index, AtCap::kWait, deadline));
  buffers::SlotRef slot(got);
  if (!payload.empty()) std::memcpy(slot->payload(), payload.data(), payload.size());
  slot->header().length = static_cast<uint32_t>(payload.size());
  return slot;
}

}  // namespace

Status CheckSendableTag(Tag tag) {
  if (tag == kAnyTag) return InvalidArgument("kAnyTag matches any tag in Recv; it cannot be sent");
  return Status::Ok();
}

Status SendSide::CheckSender(Gid from) const {
  if (!from.is_thread() || from.process() != process_) {
    return InvalidArgument(fmt::format("the sender {} is not a thread of this process ({})",
                                       from.ToString(), process_.ToString()));
  }
  Mailbox* mailbox = receive_.Find(from);
  if (mailbox == nullptr) {
    return InvalidArgument(fmt::format("the sender {} was never enrolled", from.ToString()));
  }
  if (mailbox->left())
    return FailedPrecondition(fmt::format("the sender {} has left", from.ToString()));
  return Status::Ok();
}

Status SendSide::CheckSend(Gid from, Gid to, Tag tag) const {
  TOCL_RETURN_IF_ERROR(CheckSender(from));
  TOCL_RETURN_IF_ERROR(CheckSendableTag(tag));
  if (!to.is_thread()) return InvalidArgument(fmt::format("{} is not a thread id", to.ToString()));
  if (shutting_down_.load(std::memory_order_relaxed)) {
    return Unavailable("the runtime is shutting down");
  }
  return Status::Ok();
}

Status SendSide::SendSlot(Gid from, Gid to, Tag tag, buffers::SlotRef& slot, Network network,
                          uint16_t flags) {
  TOCL_RETURN_IF_ERROR(CheckSend(from, to, tag));
  return PostSlot(from, to, tag, slot, network, flags);
}

Status SendSide::SendBuffer(Gid from, Gid to, Tag tag, Buffer&& buffer) {
  TOCL_RETURN_IF_ERROR(CheckUserEnds(from, to));
  if (!buffer.valid()) return InvalidArgument("an empty buffer cannot be sent");
  detail::BufferSlot* slot = buffer.slot();
  if (buffers::IsLarge(slot)) {
    // A long message received and sent on: fragments again.
    Status status = send_long_(from, to, tag, buffer.span());
    if (status.ok()) buffer.Release();
    return status;
  }
  buffers::SlotRef ref(buffer.Detach());
  Status status = SendSlot(from, to, tag, ref, slot->pool->network());
  if (!status.ok()) buffer = Buffer(ref.release());
  return status;
}

Status SendSide::SendBuffer(Gid from, Gid to, Tag tag, Buffer& buffer) {
  TOCL_RETURN_IF_ERROR(CheckUserEnds(from, to));
  if (!buffer.valid()) return InvalidArgument("an empty buffer cannot be sent");
  const BufferState state = buffer.state();
  if (state == BufferState::kQueued || state == BufferState::kInFlight) {
    return FailedPrecondition("the buffer is still being sent; wait until state() is kSent");
  }
  detail::BufferSlot* slot = buffer.slot();
  if (to.process() == process_ || buffers::IsLarge(slot)) {
    // The receiver gets its own copy: the caller keeps writing to this one.
    // The copy is in the receiver's mailbox (this process), or the receiver
    // holds all of it (a long message), when this returns: the buffer is
    // done with, as a remote send's is once the network has it.
    Status status = SendCopy(from, to, tag, buffer.span());
    if (status.ok()) {
      // What it was sent as, as a posted one says.
      wire::Header& header = slot->header();
      header = buffers::IsLarge(slot) ? wire::WholeMessageHeader(from, to, tag, header.total)
                                      : wire::MessageHeader(from, to, tag, header.length);
      slot->set_state(BufferState::kSent);
    }
    return status;
  }
  // A reference of the runtime's; the caller's Buffer keeps its own. An
  // error drops the runtime's.
  buffers::SlotRef shared = buffers::SlotRef::Share(slot);
  return SendSlot(from, to, tag, shared, slot->pool->network());
}

template <typename Post>
Status SendSide::PostLocked(Gid to, Post&& post) {
  TOCL_ASSIGN_OR_RETURN(SendQueue * destination, routes_.PeerOf(to));
  SendQueue& peer = *destination;
  std::unique_lock lock(peer.mu());
  TOCL_RETURN_IF_ERROR(routes_.ResolvePeer(peer, lock));
  TOCL_RETURN_IF_ERROR(post(peer));
  peer.AwaitRoom(lock);  // back-pressure
  return Status::Ok();
}

Status SendSide::PostSlot(Gid from, Gid to, Tag tag, buffers::SlotRef& slot, Network network,
                          uint16_t flags, std::optional<FillOf> fill_of) {
  slot->header() = wire::MessageHeader(from, to, tag, slot->header().length);
  slot->header().flags = flags;
  if (fill_of) {
    StampFill(slot->header(), *fill_of);
  } else if (to.process() == process_) {
    return receive_.Deliver(slot);
  }
  return PostLocked(to, [&](SendQueue& peer) {
    int route = peer.default_route();
    if (network != Network::kFastest) {
      // The buffer's own network when it reaches the peer (no copy to
      // another pool) and is usable, else the default. (The clock is read
      // only for a network that failed.)
      const int own = peer.RouteOfPool(slot->pool);
      if (own >= 0) {
        const RailHealth& health = peer.health()[own];
        if (!health.failed || health.UsableAt(Clock::now())) route = own;
      }
    }
    return fill_of ? peer.PostNumbered(slot, route) : peer.Post(from, to, slot, route);
  });
}

Status SendSide::SendCopy(Gid from, Gid to, Tag tag, std::span<const std::byte> payload) {
  const uint32_t class_index = buffers::ClassFor(payload.size());
  if (class_index >= num_classes_) return send_long_(from, to, tag, payload);
  TOCL_RETURN_IF_ERROR(CheckSend(from, to, tag));
  // The fast path (shm): onto the receiving thread's lane, else straight
  // into the buffer the receiver provided.
  if (rails_.post_copy() && to.process() != process_) {
    TOCL_ASSIGN_OR_RETURN(SendQueue * destination, routes_.PeerOf(to));
    SendQueue& peer = *destination;
    // A full ring or lane is the receiver's back-pressure: wait a little
    // for room (making progress meanwhile) before the way through the
    // queue (which puts the message on its lane once there is room), where
    // it makes every later send to the process take the queue's lock until
    // the queue is empty again.
    for (int round = 0;; ++round) {
      // The lane alone first: senders to other lanes of the process do
      // not wait for us. The queue's lock when the lanes are closed (not
      // resolved yet, frames wait, no lanes) or the route broke: it
      // resolves, queues behind what waits, or finds out why.
      Status posted = peer.TryPostLane(from, to, tag, payload);
      if (!posted.ok() && posted.code() != StatusCode::kTryAgain) {
        std::unique_lock lock(peer.mu());
        TOCL_RETURN_IF_ERROR(routes_.ResolvePeer(peer, lock));
        posted = peer.PostCopy(from, to, tag, payload);
      }
      if (posted.ok()) return Status::Ok();
      if (posted.code() != StatusCode::kTryAgain || round == kFullRounds) break;
      peer.AwaitProgress();
      std::this_thread::yield();
    }
  }
  TOCL_ASSIGN_OR_RETURN(buffers::SlotRef slot, CopyToBuffer(rails_.fastest()->pool(), class_index,
                                                            payload, Clock::time_point::max()));
  return PostSlot(from, to, tag, slot, Network::kFastest);  // an error drops `slot`
}

Result<uint64_t> SendSide::PostMarker(Gid from, Gid to, Tag tag, uint64_t total, Gid carrier,
                                      uint64_t nonce) {
  if (shutting_down_.load(std::memory_order_relaxed)) {
    return Unavailable("the runtime is shutting down");
  }
  uint64_t seq = 0;
  TOCL_RETURN_IF_ERROR(PostLocked(to, [&](SendQueue& peer) -> Status {
    wire::Header header = wire::MarkerHeader(from, to, tag, total, carrier);
    header.reserved = nonce;  // (wire/frame.h: the call's nonce)
    TOCL_ASSIGN_OR_RETURN(buffers::SlotRef marker, peer.HeaderFrame(peer.default_route(), header));
    return peer.Post(from, to, marker, peer.default_route(),
                     [&](uint64_t number) { seq = number; });
  }));
  return seq;
}

Status SendSide::SendFill(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                          FillOf fill) {
  const uint32_t class_index = buffers::ClassFor(payload.size());
  if (class_index >= num_classes_) {
    return InvalidArgument(fmt::format("a {} byte message is not short", payload.size()));
  }
  if (shutting_down_.load(std::memory_order_relaxed)) {
    return Unavailable("the runtime is shutting down");
  }
  TOCL_ASSIGN_OR_RETURN(buffers::SlotRef slot, CopyToBuffer(rails_.fastest()->pool(), class_index,
                                                            payload, Clock::time_point::max()));
  return PostSlot(from, to, tag, slot, Network::kFastest, 0, fill);  // an error drops `slot`
}

void SendSide::PostNoFill(Gid from, Gid to, uint64_t seq) {
  routes_.PostControl(to.process(), -1,
                      wire::ControlHeader(wire::FrameKind::kAbort, from, to, seq, kAbortBySender));
}

Status SendSide::DeliverNotice(Gid self, Gid source, Tag tag, std::span<const std::byte> payload) {
  subsystem::Subsystem* subsystem = rails_.fastest();
  if (subsystem == nullptr) return Unavailable("no network is open");
  const uint32_t class_index = buffers::ClassFor(payload.size());
  if (class_index >= num_classes_) {
    return InvalidArgument(fmt::format("a {} byte notice does not fit a message", payload.size()));
  }
  // Bounded: the notification thread must not wait for ever at the pool cap.
  TOCL_ASSIGN_OR_RETURN(buffers::SlotRef slot,
                        CopyToBuffer(subsystem->pool(), class_index, payload,
                                     Clock::now() + std::chrono::seconds(1)));
  slot->header() = wire::MessageHeader(source, self, tag, static_cast<uint32_t>(payload.size()));
  return receive_.Deliver(slot);  // an error drops `slot`
}

}  // namespace tocl::runtime
