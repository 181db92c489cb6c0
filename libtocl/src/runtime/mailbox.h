// The receive side of one enrolled thread: messages that arrived for it and
// have not been received yet, in arrival order, and the futex its receiver
// sleeps on.
//
// Arrival order already respects each sending process's sequence (the
// runtime reorders by seq before delivering), so taking the first match is
// MPI's non-overtaking rule. Receives posted before their message came
// (posted_receive.h) are matched first, in post order: a message that one
// of them matches goes to it, not to the queue.
//
// Threading: Deliver (the polling thread) and Take/Peek (the receiving
// thread) run concurrently; `mu` guards the queue.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>

#include "buffers/buffer_slot.h"
#include "runtime/posted_receive.h"
#include "subsystem/reactor.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/message_info.h"

namespace tocl::runtime {

class RequestCompletions;

class Mailbox {
 public:
  // `completions`: given to each receive posted here, which tells it when
  // it completes (a waiter across threads may sleep there); none for
  // internal mailboxes.
  explicit Mailbox(Gid gid, RequestCompletions* completions = nullptr)
      : gid_(gid), completions_(completions) {}
  ~Mailbox();

  Gid gid() const { return gid_; }

  // Hands a message (one slot reference) to the first posted receive it
  // matches, else queues it and adds its SlotBytes to `*unexpected_bytes`
  // (when given; under the lock, so before its receiver can take it and
  // subtract them); wakes the receiver if it sleeps. Returns false (the
  // slot untouched) when the thread has left.
  bool Deliver(detail::BufferSlot* slot, std::atomic<size_t>* unexpected_bytes = nullptr);

  // Nothing is queued: a hint read without the lock. Deliveries from other
  // threads (local senders, long messages completing) race with it, as
  // they race with the owner's poll round anyway.
  bool empty() const { return queued_.load(std::memory_order_relaxed) == 0; }

  // The first message matching `selector`, removed (one reference for the
  // caller), or nullptr. A long message still arriving is skipped, and so
  // is every later message from its sender (they stay behind it); so is a
  // message a handler claimed (posted_receive.h).
  detail::BufferSlot* Take(const Selector& selector);
  // The first match, left in place.
  bool Peek(const Selector& selector, MessageInfo& info);

  // Posts a receive (its selector, `into` and `out` set): the first queued
  // match completes it at once (one too large for `out` completes it with
  // InvalidArgument and stays queued), else it waits in the list for the
  // delivery path. A standing receive (`standing` set) stays listed and
  // claims every queued message it is the first match for, then each later
  // one. False when the thread has left: a receive is then completed with
  // FailedPrecondition, a standing one is left untouched (not listed; its
  // owner reports the error).
  bool Post(PostedReceive* post);
  // The first message `post` (a standing receive) claimed, removed (one
  // reference, still counted as unexpected: the caller uncounts it), or
  // nullptr when none is left (withdrawn, or the thread left).
  detail::BufferSlot* TakeClaimed(const PostedReceive* post);
  // Withdraws a standing receive: the messages it claimed and nobody took
  // are unclaimed, in place, and offered to the receives posted after it;
  // a receiver waiting here is woken. Idempotent.
  void WithdrawStanding(PostedReceive* post);
  // Withdraws a posted receive: kWithdrawn (it took nothing; the caller is
  // free), kDone (it completed first: its outcome is the caller's), or
  // kBound (a long message is landing in its memory: ask the long receiver
  // to move it elsewhere).
  enum class Withdrawal { kWithdrawn, kDone, kBound };
  Withdrawal Withdraw(PostedReceive* post);
  // The poller: binds `binder` to the first posted receive that matches a
  // message of `total` bytes from `from` with `tag` and wire header
  // `flags`, when that receive has room for it in its own memory and
  // nothing queued matches it first. The receive is then no longer listed.
  // A packed piece (wire::kFlagPackedPiece) never gets library memory, so a
  // matching receive too small for it would wait for ever: with
  // `too_small`, such a receive is bound and unlisted all the same and
  // *too_small set, for the caller to fail it.
  PostedReceive* BindPosted(Gid from, Tag tag, uint16_t flags, uint64_t total, void* binder,
                            bool* too_small = nullptr);
  // Whether a receive is posted (the poller looks before binding; a
  // receiver's hand-off is off while one is).
  bool HasPosted() const { return has_posted_.load(std::memory_order_acquire); }
  // A queued long message has all its bytes: it becomes receivable, and it
  // and the messages its sender sent after it may go to posted receives.
  void MessageComplete(detail::BufferSlot* slot);
  // Every listed receive completes with `status` (the runtime shuts down).
  void CompletePosted(const Status& status);
  // Removes a message that will not complete (its sender gave up); false
  // when it is no longer queued. Its sender's later messages are offered to
  // posted receives.
  bool Remove(detail::BufferSlot* slot);

  // Sleeps until a delivery or Wake() after `seen` was read, or `deadline`.
  // seq_cst: the poller's handshake in ProgressEngine::Sleep stores its
  // flags then reads this, Wake bumps this then reads them; with acquire
  // the read could move before the store (free on x86: a plain load).
  uint32_t signal() const { return signal_.load(std::memory_order_seq_cst); }
  void Wait(uint32_t seen, std::chrono::steady_clock::time_point deadline);
  // Bumps the signal; wakes the receiver wherever it sleeps: on this
  // mailbox (Wait), or in `reactor` while it polls for the process (below).
  void Wake();
  // The receiver holds the poll token and is about to sleep in `reactor`
  // (ProgressEngine::Sleep), where a delivery from another thread of the
  // process (a local Send, an exit notice, a failed SpawnThread call) does
  // not reach it: Wake() must wake the reactor too. Set before the last
  // look at signal(), cleared (nullptr) after the sleep.
  // Called by the receiving thread itself.
  void SetPollerAsleep(subsystem::Reactor* reactor);

  // The thread leaves: waiting messages are dropped (how many is returned;
  // their SlotBytes are added to `dropped_bytes` when given); later
  // deliveries fail.
  size_t Leave(size_t* dropped_bytes = nullptr);
  bool left() const { return left_.load(std::memory_order_acquire); }

  // Bytes of class memory held by queued messages, for flow control.
  static size_t SlotBytes(const detail::BufferSlot* slot);

 private:
  // Publishes queue_.size() for empty(); after every change, under mu_.
  void CountQueuedLocked();
  // Publishes whether posted_ is empty; after every change, under mu_.
  void CountPostedLocked();
  struct Arriving;
  // What became of a message offered to the posted receives.
  enum class Offer { kKept, kTaken, kClaimed };
  // Hands `slot` to the first posted receive it matches (receives whose
  // memory is too small for it complete with InvalidArgument on the way):
  // kTaken when one took it, kClaimed when a standing receive claimed it
  // (it stays, or goes, in the queue), kKept otherwise. It stays queued
  // when that receive matches a long message of its sender still arriving
  // ahead of it (in `older`): that one is the receive's first. `queued`:
  // it comes from the queue (PostedReceive::counted).
  Offer OfferLocked(detail::BufferSlot* slot, bool queued, const Arriving& older);
  // OfferLocked for each queued message that can be received now, in
  // order: whether any was taken.
  bool OfferQueuedLocked();
  // Completes `post` with `slot` (its reference), or refuses the message
  // when it is larger than the receive's memory: whether it took it.
  bool CompleteWithLocked(PostedReceive* post, detail::BufferSlot* slot, bool queued);
  // Every listed receive completes with `status`.
  void CompleteAllLocked(const Status& status);

  const Gid gid_;
  RequestCompletions* const completions_;
  std::mutex mu_;
  std::deque<detail::BufferSlot*> queue_;  // guarded by mu_
  std::atomic<size_t> queued_{0};          // queue_.size(), for empty()
  PostedReceives posted_;                  // guarded by mu_
  std::atomic<bool> has_posted_{false};
  // Queued messages a standing receive claimed; guarded by mu_. Zero
  // unless a handler is registered: queue walks look at claims only then.
  size_t claimed_ = 0;
  // Queued long messages still arriving (their sender's later messages
  // wait behind them); guarded by mu_. While zero, Deliver does not walk
  // the queue for them: with a receive always posted (a handler) and a
  // backlog, that walk per message would cost O(backlog) each.
  size_t incomplete_ = 0;
  std::atomic<uint32_t> signal_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> armed_{false};  // a sleeper has not been woken yet
  // seq_cst with signal_: Wake bumps signal_ then reads this; the sleeper
  // sets this then reads signal_. One of them sees the other.
  std::atomic<subsystem::Reactor*> poller_asleep_{nullptr};
  std::atomic<bool> left_{false};
};

// Where a wait for requests of several threads (WaitAny, WaitAll) sleeps:
// one mailbox for the process, woken when a request completes while such
// a waiter counts itself. The completer stores `done`, then reads the
// count; the waiter counts itself, then reads its requests' `done` flags
// (RequestState::Complete). All four are seq_cst, so one of the two sees
// the other: no completion goes unseen, and a lone waiter costs
// completers one load. (No fence instead: TSan does not model fences.)
class RequestCompletions {
 public:
  Mailbox& mailbox() { return mailbox_; }
  // Right after a request's `done` was stored.
  void NoteDone() {
    if (cross_waiters_.load(std::memory_order_seq_cst) > 0) mailbox_.Wake();
  }
  // Around such a wait: Begin before the first look at mailbox().signal()
  // and the requests.
  void BeginCrossWait() { cross_waiters_.fetch_add(1, std::memory_order_seq_cst); }
  void EndCrossWait() { cross_waiters_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  Mailbox mailbox_{Gid()};
  std::atomic<int> cross_waiters_{0};
};

// Mailboxes by thread index: lock-free lookup for the polling thread,
// two levels of 4096 so it can grow while being read.
class ThreadTable {
 public:
  ThreadTable();
  ~ThreadTable();
  // nullptr when `index` was never enrolled.
  Mailbox* Find(uint32_t index) const;
  void Insert(uint32_t index, std::unique_ptr<Mailbox> mailbox);

  template <typename F>
  void ForEach(F&& f) const {
    for (uint32_t chunk = 0; chunk < kChunks; ++chunk) {
      auto* entries = chunks_[chunk].load(std::memory_order_acquire);
      if (entries == nullptr) continue;
      for (uint32_t i = 0; i < kChunkSize; ++i) {
        if (auto* mailbox = entries[i].load(std::memory_order_acquire)) f(*mailbox);
      }
    }
  }

 private:
  static constexpr uint32_t kChunkSize = 4096;
  static constexpr uint32_t kChunks = (Gid::kMaxThread + 1) / kChunkSize;
  std::unique_ptr<std::atomic<std::atomic<Mailbox*>*>[]> chunks_;
  std::mutex insert_mu_;
};

}  // namespace tocl::runtime
