#include "runtime/mailbox.h"

#include <algorithm>
#include <climits>

#include "buffers/buffer_pool.h"
#include "core/posix.h"

namespace tocl::runtime {

Mailbox::~Mailbox() {
  Leave();
}

size_t Mailbox::SlotBytes(const detail::BufferSlot* slot) {
  return buffers::ClassBytes(slot->class_index);
}

bool Mailbox::Deliver(detail::BufferSlot* slot) {
  {
    std::lock_guard lock(mu_);
    if (left_.load(std::memory_order_relaxed)) return false;
    queue_.push_back(slot);
  }
  Wake();
  return true;
}

void Mailbox::Wake() {
  signal_.fetch_add(1, std::memory_order_seq_cst);
  // One futex wake per sleep: deliveries that follow while the receiver is
  // still waking up need no system call.
  if (sleepers_.load(std::memory_order_seq_cst) != 0 &&
      armed_.exchange(false, std::memory_order_seq_cst)) {
    FutexWakeAll(signal_, FutexScope::kPrivate);
  }
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
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const wire::Header& header = (*it)->header();
    if (selector.Matches(Gid::FromRaw(header.source), header.tag)) {
      detail::BufferSlot* slot = *it;
      queue_.erase(it);
      return slot;
    }
  }
  return nullptr;
}

bool Mailbox::Peek(const Selector& selector, MessageInfo& info) {
  std::lock_guard lock(mu_);
  for (detail::BufferSlot* slot : queue_) {
    const wire::Header& header = slot->header();
    if (selector.Matches(Gid::FromRaw(header.source), header.tag)) {
      info = MessageInfo{Gid::FromRaw(header.source), header.tag, header.length};
      return true;
    }
  }
  return false;
}

size_t Mailbox::Leave() {
  std::deque<detail::BufferSlot*> dropped;
  {
    std::lock_guard lock(mu_);
    left_.store(true, std::memory_order_release);
    dropped.swap(queue_);
  }
  for (auto* slot : dropped) slot->pool->Unref(slot);
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
