// The receive side of one enrolled thread: messages that arrived for it and
// have not been received yet, in arrival order, and the futex its receiver
// sleeps on.
//
// Arrival order already respects each sending process's sequence (the
// runtime reorders by seq before delivering), so taking the first match is
// MPI's non-overtaking rule.
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
#include <optional>
#include <span>

#include "buffers/buffer_slot.h"
#include "subsystem/reactor.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/message_info.h"

namespace tocl::runtime {

// What a receiver asks for: a source (thread, process, host or any) and a
// tag (or any).
struct Selector {
  Gid source;  // null: any
  Tag tag = kAnyTag;

  bool Matches(Gid from, Tag message_tag) const {
    if (tag != kAnyTag && tag != message_tag) return false;
    if (source.is_null()) return true;
    if (source.is_thread()) return from == source;
    if (source.is_process()) return from.process() == source;
    return from.host() == source;
  }
};

// A RecvInto waiting for a message: the poller may bind a long message to
// it (its fragments then land in `out`).
struct PostedReceive {
  Selector selector;
  std::span<std::byte> out;
  void* bound = nullptr;          // guarded by the mailbox lock: the InboundLong using `out`
  std::atomic<bool> done{false};  // set (release) by the poller when bound and finished
  Status status;                  // valid once done
  MessageInfo info;               // valid once done
};

class Mailbox {
 public:
  explicit Mailbox(Gid gid) : gid_(gid) {}
  ~Mailbox();

  Gid gid() const { return gid_; }

  // Queues a message (one slot reference) and wakes the receiver if it
  // sleeps. Returns false (the slot untouched) when the thread has left.
  bool Deliver(detail::BufferSlot* slot);

  // Nothing is queued: a hint read without the lock. Deliveries from other
  // threads (local senders, long messages completing) race with it, as
  // they race with the owner's poll round anyway.
  bool empty() const { return queued_.load(std::memory_order_relaxed) == 0; }

  // The first message matching `selector`, removed (one reference for the
  // caller), or nullptr. A long message still arriving is skipped, and so
  // is every later message from its sender (they stay behind it).
  detail::BufferSlot* Take(const Selector& selector);
  // The first match, left in place.
  bool Peek(const Selector& selector, MessageInfo& info);
  // For RecvInto: the first match when it fits in `max_bytes` (removed);
  // else nullptr with `too_big` set when one matched but is larger, or,
  // when none matched, `post` registered for the poller to bind.
  detail::BufferSlot* TakeOrPost(const Selector& selector, size_t max_bytes, PostedReceive* post,
                                 std::optional<MessageInfo>& too_big);
  // Withdraws `post`: true when it was not bound (the caller is free), false
  // when the poller has bound a message to it.
  bool Unpost(PostedReceive* post);
  // The poller: binds `binder` to the posted receive when it matches a
  // message of `total` bytes from `from` with `tag` and nothing queued
  // matches it first. The receive is then no longer posted.
  PostedReceive* BindPosted(Gid from, Tag tag, uint64_t total, void* binder);
  // Whether a receive is posted (the poller looks before binding).
  bool HasPosted() const { return has_posted_.load(std::memory_order_acquire); }
  // Removes a message that will not complete (its sender gave up); false
  // when it is no longer queued.
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

  const Gid gid_;
  std::mutex mu_;
  std::deque<detail::BufferSlot*> queue_;  // guarded by mu_
  std::atomic<size_t> queued_{0};          // queue_.size(), for empty()
  PostedReceive* posted_ = nullptr;        // guarded by mu_
  std::atomic<bool> has_posted_{false};
  std::atomic<uint32_t> signal_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> armed_{false};  // a sleeper has not been woken yet
  // seq_cst with signal_: Wake bumps signal_ then reads this; the sleeper
  // sets this then reads signal_. One of them sees the other.
  std::atomic<subsystem::Reactor*> poller_asleep_{nullptr};
  std::atomic<bool> left_{false};
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
