// The receiving side of long messages (long_message.h tells the protocol):
// memory for each message (a RecvInto buffer, else library memory within
// reassembly_cap, granted in the order the starts came), its fragments put
// in place and acknowledged, and messages given up: by their sender, their
// receiving thread, or silence (partial_timeout).
//
// What it needs of the runtime goes through Events: sending a control frame
// to a process, a pair's order skipping a start that will not come, and the
// poller calling Housekeeping. Messages are delivered through the
// ReceiveSide (the receiving thread's mailbox, its posted RecvInto).
//
// Threading and lock order: mu_ guards every message being received and
// the control frames decided about them. The poller (OnLongStart,
// OnFragment, OnControl, Housekeeping), a RecvInto giving up
// (UnbindPosted), the directory's watcher (SenderExited) and Shutdown
// (FlushAcks) take it. Under mu_ it takes a message's InboundLong::mu and
// its mailbox's lock, never a peer's: a control frame decided under mu_ is
// queued, and sent after mu_ is released (Events::SendControl resolves the
// peer: the runtime's dest_mu, the peer's mu(), maybe the directory). So
// mu_ -> InboundLong::mu -> mailbox, and mu_ is never held in Events.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/large_slot.h"
#include "buffers/slot_ref.h"
#include "runtime/long_message.h"
#include "runtime/mailbox.h"
#include "runtime/receive_side.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::runtime {

class LongReceiver {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    // Library memory for messages being received (RuntimeOptions).
    uint64_t reassembly_cap = uint64_t{1} << 30;
    // A granted message that brings nothing for this long is discarded.
    std::chrono::milliseconds partial_timeout{10000};
    // A grant followed by no fragment for this long is sent again.
    std::chrono::milliseconds fragment_timeout{1000};
    // How often Housekeeping looks for silent messages when not asked.
    Clock::duration partial_check_period = std::chrono::milliseconds(200);
  };

  // What the receiver asks of the runtime. Never called with mu_ held.
  class Events {
   public:
    virtual ~Events() = default;
    // Posts a header-only control frame to `process`, over our network
    // `network` (an index into the runtime's rails) when it reaches the
    // process, else over its default route (also for -1). Best effort: the
    // protocol recovers a lost one by probes and timeouts.
    virtual void SendControl(Gid process, int network, const wire::Header& header) = 0;
    // The sender of long message `key` gave up before its start came: the
    // pair's order stops waiting for it (PairOrder::Skip). Its error is the
    // frame's (a broken sender).
    virtual Status SkipInOrder(Gid from_process, const LongKey& key) = 0;
    // Housekeeping has work (memory or a RecvInto appeared, fragments
    // wait to be acknowledged): the poller should run it soon. `wake`: from
    // a thread other than the poller, which may be asleep.
    virtual void HousekeepingDue(bool wake) = 0;
  };

  // `receive` and `events` must outlive this. The library memory it hands
  // out tells it when it is freed, so all of it must be freed before this
  // goes (the runtime: Clear, then its mailboxes leave).
  LongReceiver(Limits limits, ReceiveSide& receive, Events& events);
  ~LongReceiver() { Clear(); }
  LongReceiver(const LongReceiver&) = delete;
  LongReceiver& operator=(const LongReceiver&) = delete;

  // The pool library memory is reported under (the first network's); set
  // when the networks are open, before any message.
  void AttachPool(buffers::BufferPool& pool) { pool_ = &pool; }

  // --- frames (the poller) ---
  // Each takes the frame's reference and drops it on every path; an error
  // is the frame's (a broken or hostile sender: its connection closes).
  // A start whose turn came in its pair's order: memory, a mailbox entry
  // and the grant, or it waits.
  Status OnLongStart(Gid from_process, buffers::SlotRef slot);
  // A fragment that came over our network `network`: copied to its offset
  // and acknowledged at the end of the poll round (FlushAcks).
  Status OnFragment(int network, Gid from_process, buffers::SlotRef slot);
  // A control frame from a sender (FromSender(header)): its abort, its
  // probe, answered over the network it came by.
  Status OnControl(int network, Gid from_process, const wire::Header& header);

  // --- the poller's round ---
  // Grants waiting starts when memory or a RecvInto appeared, sends the
  // round's acknowledgements, discards granted messages whose sender went
  // silent (by `now`, which the caller reads). True while starts wait or
  // messages arrive.
  bool Housekeeping(Clock::time_point now);
  // Sends the acknowledgements held for the end of the round now (the
  // last fragment of a message, Shutdown), and every queued control frame.
  void FlushAcks();

  // --- other threads ---
  // A RecvInto was posted: a waiting start may take its buffer.
  void NoteReceivePosted();
  // A receive bound to a long message gives up (ReceiveSide's hook): what
  // came so far moves to library memory, the message stays queued for a
  // later receive; true. False when the message completed the receive
  // first (it is the receive's).
  bool UnbindPosted(PostedReceive& post);
  // Every message landing in a posted receive's memory is given up, and
  // the receive completes with `status` (the runtime shuts down: nothing
  // may write into an application's memory after).
  void CancelBound(const Status& status);
  // Process `process` exited: its messages to us will not complete. A
  // multicast's fill it carried for another process's thread (wire/frame.h)
  // is kept open for that sender's own second try instead (OnRefill), as
  // is one its carrier aborts.
  void SenderExited(Gid process, const std::string& reason);
  // A second long fill for a number whose marker has passed (PairOrder's
  // refill), from the source's own process or its relay: answered "all
  // here" (whole acknowledgement) or "given up" (abort) when the first is
  // done; from the source's process, takes over the fill a relay carries
  // (it exited midway, or the sender stopped waiting for it) or starts one
  // whose relay exited before its grant; a relay's late one while another
  // carries it is told to stop (abort). `given_up`: the pair's order gave
  // its number up (PairOrder: its carrier exited, or its fill was dropped
  // ahead), so the message was not delivered: its carrier is told so
  // (abort, and so are its later fragments), never "all here".
  Status OnRefill(Gid from_process, buffers::SlotRef slot, bool given_up = false);
  // A long message from a thread of this process: one copy into library
  // memory, delivered whole to thread `to`, with wire header `flags`.
  Status DeliverInProcess(Gid from, Gid to, Tag tag, std::span<const std::byte> payload,
                          uint16_t flags = 0);
  // A copy of `payload` in library memory as a whole message from `from`
  // to `to` (seq 0: the caller numbers it), not delivered: a multicast
  // relay hands it to its receiver's pair order.
  Result<buffers::SlotRef> WholeMessage(Gid from, Gid to, Tag tag,
                                        std::span<const std::byte> payload);

  // Drops our references to the memory of messages still arriving (the
  // runtime goes away; their mailboxes drop theirs).
  void Clear();

  // Library memory in use: messages arriving, and delivered ones not freed.
  uint64_t reassembly_used() const { return reassembly_used_.load(std::memory_order_relaxed); }
  // Fragments whose bytes were not used: duplicates, and fragments of no
  // message being received (completed or given up).
  uint64_t fragments_dropped() const { return fragments_dropped_.load(std::memory_order_relaxed); }

 private:
  // A fill whose carrier is gone or gave up: a granted one keeps its
  // memory and mailbox entry without a carrier (until partial_timeout), an
  // ungranted one goes and its key is reopened (OnRefill).
  void OrphanLocked(InboundLong& message);

  struct OutControl {
    Gid peer_process;
    int network;
    wire::FrameKind kind;
    LongKey about;
    uint64_t offset;
    uint64_t length;
  };
  // What a fragment was for.
  enum class Placed { kPlaced, kComplete, kUnknown, kAborted };

  // With mu_ held: library memory when `library` (its turn among the
  // waiting), else only a RecvInto's buffer. kRefused: a packed piece
  // whose reader's receive is too small for it (it holds that receive in
  // `posted`); the caller finishes it with RefusedPiece.
  enum class Grant { kGranted, kWaits, kRefused };
  Grant TryGrantLocked(InboundLong& message, bool library);
  // A kRefused piece's error (its sender broke the packed format).
  static Status RefusedPiece(const InboundLong& message);
  // With mu_ held; erases `message`. A message given up here (not by its
  // sender) is reported to the sender when `tell_sender`.
  void FinishLocked(InboundLong& message, Status status, bool tell_sender);
  // Its late fragments are answered with an abort, not acknowledged.
  void RememberAbortedLocked(const LongKey& key);
  // With mu_ held: the fragment in `slot` copied into its message.
  Result<Placed> PlaceLocked(Gid from_process, const wire::Header& header,
                             const buffers::SlotRef& slot);
  // With mu_ held: an acknowledgement for the end of the round, merged
  // with the last one when it continues it.
  void QueueAckLocked(Gid from_process, int network, const wire::Header& fragment);
  // Housekeeping's steps, with mu_ held.
  void MoveAcksToOutboxLocked();  // the round's acknowledgements, to be sent
  void GrantWaitingLocked();
  void DiscardSilentLocked(Clock::time_point now);

  void QueueControlLocked(Gid peer_process, int network, wire::FrameKind kind, const LongKey& about,
                          uint64_t offset = 0, uint64_t length = 0);
  // Sends what QueueControlLocked queued; mu_ not held.
  void FlushControls();
  // The control frame about `about` (sender about.source, receiver
  // about.destination) to `peer_process`, its direction by which side that
  // process is.
  void SendControl(Gid peer_process, int network, wire::FrameKind kind, const LongKey& about,
                   uint64_t offset = 0, uint64_t length = 0);

  // Library memory for `message` (counted in reassembly_used_), arriving
  // (Take skips it), with one reference for the mailbox and one for us.
  Result<buffers::LargeSlot*> NewMessageSlot(const InboundLong& message);
  // `bytes` of library memory counted in reassembly_used_; freeing it lets
  // waiting starts be granted.
  Result<buffers::LargeSlot*> NewReassemblySlot(uint64_t bytes);

  const Limits limits_;
  // Freed library memory kept for the next message (MappingCache says why):
  // up to kKeptMappingBytes, or reassembly_cap if less, each mapping for at
  // most kKeepMappingsFor unused (Housekeeping unmaps older ones). Declared
  // early: it outlives every slot freed while the members below go.
  static constexpr uint64_t kKeptMappingBytes = uint64_t{256} << 20;
  static constexpr auto kKeepMappingsFor = std::chrono::seconds(5);
  buffers::MappingCache mappings_;
  ReceiveSide& receive_;
  Events& events_;
  buffers::BufferPool* pool_ = nullptr;

  std::mutex mu_;
  std::unordered_map<LongKey, std::unique_ptr<InboundLong>, LongKeyHash>
      inbound_;                             // guarded by mu_
  std::deque<InboundLong*> waiting_grant_;  // guarded by mu_: FIFO
  // Packed pieces waiting for their reader's receive (never library
  // memory): only a posted receive serves them, so they hold no start in
  // waiting_grant_ back and keep the poller no busier. Guarded by mu_.
  std::deque<InboundLong*> waiting_receive_;
  std::vector<OutControl> control_outbox_;  // guarded by mu_: sent once it is released
  std::vector<OutControl> pending_acks_;    // guarded by mu_: sent at the end of the poll round
  // Guarded by mu_: messages given up here, the last kRememberAborted.
  std::unordered_set<LongKey, LongKeyHash> aborted_keys_;
  std::deque<LongKey> aborted_order_;
  // Guarded by mu_: multicast fills whose carrier exited before their
  // grant, open for their sender's second try (OnRefill).
  std::unordered_set<LongKey, LongKeyHash> reopened_;
  std::atomic<uint64_t> reassembly_used_{0};
  std::atomic<uint64_t> fragments_dropped_{0};
  std::atomic<bool> housekeeping_{false};  // something to grant or check
  Clock::time_point next_partial_check_;   // the poller's
};

}  // namespace tocl::runtime
