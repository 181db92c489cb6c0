// Receives posted on a mailbox before their message came: a RecvInto that
// waits, or a request (Irecv, IrecvInto; tocl/request.h). The delivery path
// (the poller, a local sender, a long message completing) hands a matching
// message to the first posted receive in post order instead of queueing it,
// and a long message may be bound to a receive with memory of its own
// (its fragments then land there).
//
// The rule the mailbox keeps (mailbox.h): no queued message that a receive
// could take now matches a posted receive. So a later Recv, which looks
// only at the queue, never takes a message an earlier posted receive
// matches, and two posted receives that match the same messages complete
// in post order (MPI's rule for Irecv).
//
// A standing receive (a message handler, handler_dispatch.h) is posted
// once and never completes: each message it is the first match for stays
// in the mailbox's queue, in its place, marked as claimed by it
// (BufferSlot::claimed_by), and its sink is told; the handler's dispatcher
// takes the claimed messages one by one (Mailbox::TakeClaimed). Receives
// and probes skip claimed messages. Withdrawing it (Mailbox::
// WithdrawStanding) unclaims the messages not yet taken: they are then
// where they would have been had no handler existed, so nothing is lost
// and no order changes.
//
// Threading: the list and a receive's links are guarded by its mailbox's
// lock; `done` publishes the outcome (stored by whoever completes it,
// read by the waiter), after which only the receive's owner touches it.
#pragma once

#include <atomic>
#include <cstddef>
#include <span>
#include <utility>

#include "buffers/buffer_slot.h"
#include "tocl/gid.h"
#include "tocl/message_info.h"
#include "tocl/status.h"
#include "tocl/tag_match.h"
#include "wire/frame.h"

namespace tocl::runtime {

class RequestCompletions;

// What a receiver asks for: a source (thread, process, host or any) and a
// tag selector (exact, masked or any); and whether it takes packed-message
// body pieces (frames flagged wire::kFlagPackedPiece) or everything else.
// Only the packed reader (packed_reader.cc) asks for pieces: a receive the
// application posts never sees them.
struct Selector {
  Gid source;  // null: any
  TagMatch tag;
  bool pieces = false;

  // `flags`: the message's wire header flags.
  bool Matches(Gid from, Tag message_tag, uint16_t flags) const {
    if (((flags & wire::kFlagPackedPiece) != 0) != pieces) return false;
    if (!tag.Matches(message_tag)) return false;
    if (source.is_null()) return true;
    if (source.is_thread()) return from == source;
    if (source.is_process()) return from.process() == source;
    return from.host() == source;
  }
};

// Told of each message a standing receive claims, under its mailbox's
// lock: it must not block, nor call back into that mailbox.
class ClaimSink {
 public:
  virtual void Claimed() = 0;

 protected:
  ~ClaimSink() = default;
};

struct PostedReceive {
  Selector selector;
  // Set for a standing receive (see above): it claims messages instead of
  // completing; `into`, `out` and the outcome fields are unused.
  ClaimSink* standing = nullptr;
  // Into the caller's memory (RecvInto, IrecvInto): `out`, and a long
  // message may be bound to it; else (Irecv) the message's own buffer.
  bool into = false;
  std::span<std::byte> out;

  // Guarded by the mailbox lock: its place in the mailbox's list.
  PostedReceive* prev = nullptr;
  PostedReceive* next = nullptr;
  bool listed = false;
  // Guarded by the mailbox lock until bound, then by the long receiver's:
  // the InboundLong whose fragments land in `out`.
  void* bound = nullptr;

  // Set once the receive is complete (Complete); the fields below are then
  // the owner's.
  std::atomic<bool> done{false};
  Status status;
  MessageInfo info;
  // The message (one reference), unless it was bound: library memory or a
  // pool buffer (ReceiveSide::TakeSlot hands it on).
  detail::BufferSlot* slot = nullptr;
  // It waited in the queue first, so it is counted in the receive side's
  // unexpected bytes until taken; one handed over as it arrived never was
  // (it was expected).
  bool counted = false;
  // Told of the completion (a waiter across threads may sleep there); set
  // by Mailbox::Post, none for a mailbox without one.
  RequestCompletions* completions = nullptr;

  // Publishes the outcome: `status`, with whatever the completer set
  // before, and tells `completions`. seq_cst, not just release: a waiter
  // across threads reads it after counting itself (RequestCompletions,
  // mailbox.h), and the completer reads that count after this store.
  void Complete(Status outcome);
};

// The posted receives of one mailbox in post order (intrusive: posting and
// withdrawing cost no allocation, whatever the number outstanding). The
// mailbox's lock is held around every call.
class PostedReceives {
 public:
  bool empty() const { return head_ == nullptr; }
  void Append(PostedReceive* post);
  void Remove(PostedReceive* post);
  // The first posted receive that matches a message from `from` with `tag`
  // and wire header `flags`.
  PostedReceive* FirstMatch(Gid from, Tag tag, uint16_t flags) const;
  PostedReceive* head() const { return head_; }

 private:
  PostedReceive* head_ = nullptr;
  PostedReceive* tail_ = nullptr;
};

}  // namespace tocl::runtime
