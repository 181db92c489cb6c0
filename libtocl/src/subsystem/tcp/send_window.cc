#include "subsystem/tcp/send_window.h"

#include <algorithm>
#include <cassert>
#include <random>

#include "buffers/buffer_pool.h"

namespace tocl::subsystem::tcp {

namespace {

constexpr size_t kInitialEntries = 64;

}  // namespace

uint64_t NewStreamId() {
  thread_local std::mt19937_64 random(std::random_device{}());
  uint64_t id = 0;
  while (id == 0) id = random();
  return id;
}

void SendWindow::Push(Entry entry) {
  if (count_ == capacity_) {
    const size_t capacity = capacity_ == 0 ? kInitialEntries : capacity_ * 2;
    auto entries = std::make_unique<Entry[]>(capacity);
    for (size_t i = 0; i < count_; ++i) entries[i] = (*this)[i];
    entries_ = std::move(entries);
    capacity_ = capacity;
    head_ = 0;
  }
  entries_[(head_ + count_) & (capacity_ - 1)] = entry;
  ++count_;
  bytes_ += entry.bytes;
}

size_t SendWindow::Written(size_t written) {
  size_t whole = 0;
  while (written > 0) {
    assert(unwritten_ < count_);
    const size_t rest = (*this)[unwritten_].bytes - head_written_;
    if (written < rest) {
      head_written_ += written;
      break;
    }
    written -= rest;
    head_written_ = 0;
    ++unwritten_;
    ++whole;
  }
  sent_end_ = std::max(sent_end_, base_ + unwritten_);
  return whole;
}

size_t SendWindow::Acknowledge(uint64_t count) {
  assert(count >= base_ && count <= end());
  const size_t n = static_cast<size_t>(count - base_);
  for (size_t i = 0; i < n; ++i) {
    detail::BufferSlot* slot = entries_[head_].slot;
    PopFront();
    slot->set_state(BufferState::kSent);
    slot->pool->Unref(slot);
  }
  // A frame acknowledged was received whole, so it was written whole.
  if (n > unwritten_) {
    unwritten_ = 0;
    head_written_ = 0;
  } else {
    unwritten_ -= n;
  }
  return n;
}

void SendWindow::Rewind() {
  unwritten_ = 0;
  head_written_ = 0;
}

std::vector<SendWindow::Entry> SendWindow::Take() {
  std::vector<Entry> taken;
  taken.reserve(count_);
  while (count_ > 0) {
    taken.push_back(entries_[head_]);
    PopFront();
  }
  unwritten_ = 0;
  head_written_ = 0;
  sent_end_ = std::max(sent_end_, base_);
  return taken;
}

void SendWindow::Fail() {
  while (count_ > 0) {
    detail::BufferSlot* slot = entries_[head_].slot;
    PopFront();
    slot->set_state(BufferState::kFailed);
    slot->pool->Unref(slot);
  }
  unwritten_ = 0;
  head_written_ = 0;
}

void SendWindow::PopFront() {
  bytes_ -= entries_[head_].bytes;
  head_ = (head_ + 1) & (capacity_ - 1);
  --count_;
  ++base_;
}

}  // namespace tocl::subsystem::tcp
