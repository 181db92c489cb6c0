#include "runtime/mailbox.h"

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
// arriving hides every later message from the same sender.
template <typename Queue>
auto FindMatch(Queue& queue, const Selector& selector) {
  uint64_t blocked[8];
  size_t num_blocked = 0;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const wire::Header& header = (*it)->header();
    if (!selector.Matches(Gid::FromRaw(header.source), header.tag)) continue;
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

}  // namespace

bool Mailbox::Deliver(detail::BufferSlot* slot) {
  {
    std::lock_guard lock(mu_);
    if (left_.load(std::memory_order_relaxed)) return false;
    queue_.push_back(slot);
    CountQueuedLocked();
  }
  Wake();
  return true;
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
  auto it = FindMatch(queue_, selector);
  if (it == queue_.end()) return nullptr;
  detail::BufferSlot* slot = *it;
  queue_.erase(it);
  CountQueuedLocked();
  return slot;
}

bool Mailbox::Peek(const Selector& selector, MessageInfo& info) {
  std::lock_guard lock(mu_);
  auto it = FindMatch(queue_, selector);
  if (it == queue_.end()) return false;
  const wire::Header& header = (*it)->header();
  info = MessageInfo{Gid::FromRaw(header.source), header.tag, PayloadBytes(*it)};
  return true;
}

detail::BufferSlot* Mailbox::TakeOrPost(const Selector& selector, size_t max_bytes,
                                        PostedReceive* post, std::optional<MessageInfo>& too_big) {
  std::lock_guard lock(mu_);
  if (post != nullptr && post->bound != nullptr) return nullptr;  // a message lands in it
  auto it = FindMatch(queue_, selector);
  if (it != queue_.end()) {
    const uint64_t bytes = PayloadBytes(*it);
    if (bytes > max_bytes) {
      const wire::Header& header = (*it)->header();
      too_big = MessageInfo{Gid::FromRaw(header.source), header.tag, bytes};
      return nullptr;
    }
    detail::BufferSlot* slot = *it;
    queue_.erase(it);
    CountQueuedLocked();
    if (post != nullptr && posted_ == post) {
      posted_ = nullptr;
      has_posted_.store(false, std::memory_order_release);
    }
    return slot;
  }
  if (post != nullptr && posted_ != post) {
    posted_ = post;
    has_posted_.store(true, std::memory_order_release);
  }
  return nullptr;
}

bool Mailbox::Unpost(PostedReceive* post) {
  std::lock_guard lock(mu_);
  if (posted_ == post) {
    posted_ = nullptr;
    has_posted_.store(false, std::memory_order_release);
  }
  return post->bound == nullptr;
}

PostedReceive* Mailbox::BindPosted(Gid from, Tag tag, uint64_t total, void* binder) {
  std::lock_guard lock(mu_);
  PostedReceive* post = posted_;
  if (post == nullptr || !post->selector.Matches(from, tag) || total > post->out.size()) {
    return nullptr;
  }
  // A queued match goes first; the receiver takes it when it wakes.
  for (detail::BufferSlot* slot : queue_) {
    const wire::Header& header = slot->header();
    if (post->selector.Matches(Gid::FromRaw(header.source), header.tag)) return nullptr;
  }
  post->bound = binder;
  posted_ = nullptr;
  has_posted_.store(false, std::memory_order_release);
  return post;
}

bool Mailbox::Remove(detail::BufferSlot* slot) {
  std::lock_guard lock(mu_);
  auto it = std::find(queue_.begin(), queue_.end(), slot);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  CountQueuedLocked();
  return true;
}

size_t Mailbox::Leave(size_t* dropped_bytes) {
  std::deque<detail::BufferSlot*> dropped;
  {
    std::lock_guard lock(mu_);
    left_.store(true, std::memory_order_release);
    dropped.swap(queue_);
    CountQueuedLocked();
    posted_ = nullptr;  // its RecvInto returns (and unbinds what is bound)
    has_posted_.store(false, std::memory_order_release);
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
