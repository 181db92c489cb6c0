#include "runtime/mailbox.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "buffers/buffer_pool.h"
#include "buffers/large_slot.h"
#include "core/posix.h"

namespace tocl::runtime {
namespace {

// Set between SetPollerAsleep(reactor) and SetPollerAsleep(nullptr) on the
// receiving thread.
thread_local bool this_thread_sleeps_as_poller = false;

}  // namespace

Mailbox::~Mailbox() {
  Leave();
}

size_t Mailbox::SlotBytes(const detail::BufferSlot* slot) {
  // Long messages count against reassembly_cap, not unexpected_cap.
  return buffers::IsLarge(slot) ? 0 : buffers::ClassBytes(slot->class_index);
}

namespace {

// A long message whose fragments are still arriving.
bool Incomplete(detail::BufferSlot* slot) {
  return buffers::IsLarge(slot) &&
         slot->state.load(std::memory_order_acquire) != static_cast<uint8_t>(BufferState::kIdle);
}

uint64_t PayloadBytes(detail::BufferSlot* slot) {
  return buffers::IsLarge(slot) ? slot->header().total : slot->header().length;
}

// Walks `queue` in order for the first complete match; a match still
// arriving hides every later message from the same sender. `any_claimed`:
// some queued messages are a handler's (skipped).
template <typename Queue>
auto FindMatch(Queue& queue, const Selector& selector, bool any_claimed) {
  uint64_t blocked[8];
  size_t num_blocked = 0;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const wire::Header& header = (*it)->header();
    if (!selector.Matches(Gid::FromRaw(header.source), header.tag, header.flags)) continue;
    if (any_claimed && (*it)->claimed_by != nullptr) continue;
    if (std::find(blocked, blocked + num_blocked, header.source) != blocked + num_blocked) continue;
    if (Incomplete(*it)) {
      if (num_blocked == std::size(blocked)) return queue.end();  // be safe: wait
      blocked[num_blocked++] = header.source;
      continue;
    }
    return it;
  }
  return queue.end();
}

MessageInfo InfoOf(detail::BufferSlot* slot) {
  const wire::Header& header = slot->header();
  return MessageInfo{Gid::FromRaw(header.source), header.tag, PayloadBytes(slot)};
}

}  // namespace

// Long messages still arriving, queued ahead of a message being offered:
// a posted receive that matches one of its sender's takes that one first.
// Eight are tracked; past that, every message counts as held (be safe:
// wait; each one completing offers the queue again).
struct Mailbox::Arriving {
  detail::BufferSlot* slots[8];
  size_t count = 0;
  bool overflow = false;

  void Add(detail::BufferSlot* slot) {
    if (count == std::size(slots)) {
      overflow = true;
    } else {
      slots[count++] = slot;
    }
  }
  bool Holds(const Selector& selector, uint64_t source) const {
    if (overflow) return true;
    for (size_t i = 0; i < count; ++i) {
      const wire::Header& header = slots[i]->header();
      if (header.source == source &&
          selector.Matches(Gid::FromRaw(source), header.tag, header.flags)) {
        return true;
      }
    }
    return false;
  }
};

bool Mailbox::Deliver(detail::BufferSlot* slot, std::atomic<size_t>* unexpected_bytes) {
  {
    std::lock_guard lock(mu_);
    if (left_.load(std::memory_order_relaxed)) return false;
    // A message still arriving waits in the queue (MessageComplete offers
    // it), and so does one whose receive must take an older one first.
    Offer offer = Offer::kKept;
    if (!posted_.empty() && !Incomplete(slot)) {
      Arriving older;
      if (incomplete_ != 0) {
        const uint64_t source = slot->header().source;
        for (detail::BufferSlot* queued : queue_) {
          if (queued->header().source == source && Incomplete(queued)) older.Add(queued);
        }
      }
      offer = OfferLocked(slot, /*queued=*/false, older);
    }
    // A claimed message waits in the queue for its handler, counted like
    // any other unreceived one (flow control holds a slow handler's).
    if (offer != Offer::kTaken) {
      queue_.push_back(slot);
      if (Incomplete(slot)) ++incomplete_;
      CountQueuedLocked();
      if (unexpected_bytes != nullptr) {
        unexpected_bytes->fetch_add(SlotBytes(slot), std::memory_order_relaxed);
      }
    }
  }
  Wake();
  return true;
}

Mailbox::Offer Mailbox::OfferLocked(detail::BufferSlot* slot, bool queued, const Arriving& older) {
  const wire::Header& header = slot->header();
  const Gid from = Gid::FromRaw(header.source);
  while (PostedReceive* post = posted_.FirstMatch(from, header.tag, header.flags)) {
    if (older.Holds(post->selector, header.source)) return Offer::kKept;
    if (post->standing != nullptr) {
      slot->claimed_by = post;
      ++claimed_;
      post->standing->Claimed();
      return Offer::kClaimed;
    }
    const bool taken = CompleteWithLocked(post, slot, queued);
    CountPostedLocked();
    if (taken) return Offer::kTaken;
  }
  return Offer::kKept;
}

bool Mailbox::CompleteWithLocked(PostedReceive* post, detail::BufferSlot* slot, bool queued) {
  posted_.Remove(post);
  post->info = InfoOf(slot);
  if (post->into && post->info.size > post->out.size()) {
    post->Complete(InvalidArgument(fmt::format(
        "the next matching message ({} bytes from {}, tag {}) is larger than the {} byte buffer; "
        "it stays queued",
        post->info.size, post->info.source.ToString(), post->info.tag, post->out.size())));
    return false;
  }
  post->slot = slot;
  post->counted = queued;
  post->Complete(Status::Ok());
  return true;
}

void Mailbox::CompleteAllLocked(const Status& status) {
  // Bound ones are no longer listed: they finish with their message (or
  // their owner moves it). A standing one is only unlisted: its handler
  // finds nothing more to take (TakeClaimed) until it is cancelled.
  while (PostedReceive* post = posted_.head()) {
    posted_.Remove(post);
    if (post->standing != nullptr) continue;
    post->Complete(status);
  }
  CountPostedLocked();
}

void Mailbox::CountPostedLocked() {
  has_posted_.store(!posted_.empty(), std::memory_order_release);
}

bool Mailbox::Post(PostedReceive* post) {
  post->completions = completions_;
  std::lock_guard lock(mu_);
  if (left_.load(std::memory_order_relaxed)) {
    if (post->standing == nullptr) {
      post->Complete(FailedPrecondition(fmt::format("thread {} has left", gid_.ToString())));
    }
    return false;
  }
  if (post->standing != nullptr) {
    // Queued messages no earlier receive matches (mailbox.h's rule): it
    // claims those it matches, in order.
    posted_.Append(post);
    CountPostedLocked();
    (void)OfferQueuedLocked();
    return true;
  }
  auto it = FindMatch(queue_, post->selector, claimed_ != 0);
  if (it == queue_.end()) {
    posted_.Append(post);
    CountPostedLocked();
    return true;
  }
  if (CompleteWithLocked(post, *it, /*queued=*/true)) {
    queue_.erase(it);
    CountQueuedLocked();
  }
  return true;
}

detail::BufferSlot* Mailbox::TakeClaimed(const PostedReceive* post) {
  std::lock_guard lock(mu_);
  if (claimed_ == 0) return nullptr;
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    detail::BufferSlot* slot = *it;
    if (slot->claimed_by != post) continue;
    slot->claimed_by = nullptr;
    --claimed_;
    queue_.erase(it);
    CountQueuedLocked();
    return slot;
  }
  return nullptr;
}

void Mailbox::WithdrawStanding(PostedReceive* post) {
  {
    std::lock_guard lock(mu_);
    posted_.Remove(post);
    CountPostedLocked();
    for (detail::BufferSlot* slot : queue_) {
      if (slot->claimed_by != post) continue;
      slot->claimed_by = nullptr;
      --claimed_;
    }
    // Each goes to the first receive posted after the handler that
    // matches it (another handler's claim included), else stays for Recv.
    (void)OfferQueuedLocked();
  }
  Wake();
}

Mailbox::Withdrawal Mailbox::Withdraw(PostedReceive* post) {
  std::lock_guard lock(mu_);
  if (post->listed) {
    posted_.Remove(post);
    CountPostedLocked();
    return Withdrawal::kWithdrawn;
  }
  if (post->done.load(std::memory_order_acquire)) return Withdrawal::kDone;
  return post->bound != nullptr ? Withdrawal::kBound : Withdrawal::kWithdrawn;
}

void Mailbox::MessageComplete(detail::BufferSlot* slot) {
  {
    // Under the lock: a later message of its sender that arrives now must
    // find it whole and already offered, not overtake it.
    std::lock_guard lock(mu_);
    // Queued unless the thread left (Deliver refused it, or Leave dropped
    // it and the count).
    if (!left_.load(std::memory_order_relaxed) && Incomplete(slot)) --incomplete_;
    slot->set_state(BufferState::kIdle);
    (void)OfferQueuedLocked();
  }
  Wake();
}

bool Mailbox::OfferQueuedLocked() {
  if (posted_.empty()) return false;
  // In arrival order, as FindMatch walks: a message still arriving keeps
  // its sender's later ones that a receive matches with it behind it.
  bool handed = false;
  Arriving older;
  for (auto it = queue_.begin(); it != queue_.end() && !posted_.empty();) {
    if (Incomplete(*it)) {
      older.Add(*it);
      ++it;
      continue;
    }
    if ((*it)->claimed_by == nullptr && OfferLocked(*it, /*queued=*/true, older) == Offer::kTaken) {
      it = queue_.erase(it);
      handed = true;
    } else {
      ++it;
    }
  }
  CountQueuedLocked();
  return handed;
}

void Mailbox::CompletePosted(const Status& status) {
  {
    std::lock_guard lock(mu_);
    CompleteAllLocked(status);
  }
  Wake();
}

void Mailbox::CountQueuedLocked() {
  queued_.store(queue_.size(), std::memory_order_relaxed);
}

void Mailbox::Wake() {
  signal_.fetch_add(1, std::memory_order_seq_cst);
  // A receiver asleep as the poller waits for a network or a timeout, not
  // for this futex: wake it there, once per sleep. The poller itself,
  // delivering from a network handler while it sleeps (tcp), is awake.
  if (poller_asleep_.load(std::memory_order_seq_cst) != nullptr && !this_thread_sleeps_as_poller) {
    if (subsystem::Reactor* reactor = poller_asleep_.exchange(nullptr, std::memory_order_seq_cst)) {
      reactor->Wake();
    }
  }
  // One futex wake per sleep: deliveries that follow while the receiver is
  // still waking up need no system call.
  if (sleepers_.load(std::memory_order_seq_cst) != 0 &&
      armed_.exchange(false, std::memory_order_seq_cst)) {
    FutexWakeAll(signal_, FutexScope::kPrivate);
  }
}

void Mailbox::SetPollerAsleep(subsystem::Reactor* reactor) {
  this_thread_sleeps_as_poller = reactor != nullptr;
  poller_asleep_.store(reactor, std::memory_order_seq_cst);
}

void Mailbox::Wait(uint32_t seen, std::chrono::steady_clock::time_point deadline) {
  if (deadline <= std::chrono::steady_clock::now()) return;
  armed_.store(true, std::memory_order_seq_cst);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  if (signal_.load(std::memory_order_seq_cst) == seen) {
    FutexWait(signal_, seen, deadline, FutexScope::kPrivate);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

detail::BufferSlot* Mailbox::Take(const Selector& selector) {
  std::lock_guard lock(mu_);
  auto it = FindMatch(queue_, selector, claimed_ != 0);
  if (it == queue_.end()) return nullptr;
  detail::BufferSlot* slot = *it;
  queue_.erase(it);
  CountQueuedLocked();
  return slot;
}

bool Mailbox::Peek(const Selector& selector, MessageInfo& info) {
  std::lock_guard lock(mu_);
  auto it = FindMatch(queue_, selector, claimed_ != 0);
  if (it == queue_.end()) return false;
  info = InfoOf(*it);
  return true;
}

PostedReceive* Mailbox::BindPosted(Gid from, Tag tag, uint16_t flags, uint64_t total, void* binder,
                                   bool* too_small) {
  std::lock_guard lock(mu_);
  PostedReceive* post = posted_.FirstMatch(from, tag, flags);
  // A library receive (Irecv) or one too small takes the message once it
  // is whole (MessageComplete offers it); a too small one for a piece is
  // the caller's to fail.
  if (post == nullptr || !post->into) return nullptr;
  const bool refused = total > post->out.size();
  if (refused && (too_small == nullptr || (flags & wire::kFlagPackedPiece) == 0)) return nullptr;
  // A queued match goes first; it is offered to the receive once it can be.
  for (detail::BufferSlot* slot : queue_) {
    if (slot->claimed_by != nullptr) continue;  // a handler's
    const wire::Header& header = slot->header();
    if (post->selector.Matches(Gid::FromRaw(header.source), header.tag, header.flags)) {
      return nullptr;
    }
  }
  post->bound = binder;
  posted_.Remove(post);
  CountPostedLocked();
  if (too_small != nullptr) *too_small = refused;
  return post;
}

bool Mailbox::Remove(detail::BufferSlot* slot) {
  std::lock_guard lock(mu_);
  auto it = std::find(queue_.begin(), queue_.end(), slot);
  if (it == queue_.end()) return false;
  if (Incomplete(slot)) --incomplete_;
  queue_.erase(it);
  CountQueuedLocked();
  // What its sender sent after it is no longer held behind it.
  (void)OfferQueuedLocked();
  return true;
}

size_t Mailbox::Leave(size_t* dropped_bytes) {
  std::deque<detail::BufferSlot*> dropped;
  {
    std::lock_guard lock(mu_);
    left_.store(true, std::memory_order_release);
    dropped.swap(queue_);
    for (detail::BufferSlot* slot : dropped) slot->claimed_by = nullptr;
    claimed_ = 0;
    incomplete_ = 0;
    CountQueuedLocked();
    CompleteAllLocked(FailedPrecondition(fmt::format("thread {} has left", gid_.ToString())));
  }
  for (auto* slot : dropped) {
    if (dropped_bytes != nullptr) *dropped_bytes += SlotBytes(slot);
    slot->pool->Unref(slot);
  }
  Wake();
  return dropped.size();
}

ThreadTable::ThreadTable() : chunks_(new std::atomic<std::atomic<Mailbox*>*>[kChunks]()) {}

ThreadTable::~ThreadTable() {
  for (uint32_t chunk = 0; chunk < kChunks; ++chunk) {
    auto* entries = chunks_[chunk].load(std::memory_order_relaxed);
    if (entries == nullptr) continue;
    for (uint32_t i = 0; i < kChunkSize; ++i) delete entries[i].load(std::memory_order_relaxed);
    delete[] entries;
  }
}

Mailbox* ThreadTable::Find(uint32_t index) const {
  auto* entries = chunks_[index / kChunkSize].load(std::memory_order_acquire);
  if (entries == nullptr) return nullptr;
  return entries[index % kChunkSize].load(std::memory_order_acquire);
}

void ThreadTable::Insert(uint32_t index, std::unique_ptr<Mailbox> mailbox) {
  std::lock_guard lock(insert_mu_);
  auto& chunk = chunks_[index / kChunkSize];
  auto* entries = chunk.load(std::memory_order_relaxed);
  if (entries == nullptr) {
    entries = new std::atomic<Mailbox*>[kChunkSize]();
    chunk.store(entries, std::memory_order_release);
  }
  entries[index % kChunkSize].store(mailbox.release(), std::memory_order_release);
}

}  // namespace tocl::runtime
