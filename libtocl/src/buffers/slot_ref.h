// SlotRef: one reference of a pool slot, owned. The library's counterpart of
// the public Buffer handle, for code that passes slots between the
// subsystems, the send queues, pair order and the mailboxes: it drops its
// reference (BufferSlot::pool->Unref) when it goes out of scope, so an error
// path cannot forget the reference or drop it twice.
//
// Cost: a move copies a pointer and never touches the count; only Share()
// (fetch_add) and the destructor or reset() of a non-empty handle (the
// pool's Unref) do. Interfaces that take a raw slot with "on error the
// reference is still the caller's" (Route::Post, Mailbox::Deliver) are
// called with get() and followed by release() when they took it.
//
// Threading: a SlotRef is one owner's, like a unique_ptr; the count it
// holds is shared and atomic (BufferSlot::refs).
#pragma once

#include <atomic>
#include <utility>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"

namespace tocl::buffers {

class SlotRef {
 public:
  SlotRef() = default;
  // Adopts one reference the caller holds on `slot` (nullptr: empty).
  explicit SlotRef(detail::BufferSlot* slot) noexcept : slot_(slot) {}
  ~SlotRef() { reset(); }

  SlotRef(SlotRef&& other) noexcept : slot_(std::exchange(other.slot_, nullptr)) {}
  SlotRef& operator=(SlotRef&& other) noexcept {
    if (this != &other) {
      reset();
      slot_ = std::exchange(other.slot_, nullptr);
    }
    return *this;
  }
  SlotRef(const SlotRef&) = delete;
  SlotRef& operator=(const SlotRef&) = delete;

  // A new reference on `slot`, which the caller keeps its own on (a
  // Buffer handle being sent while its owner keeps it).
  [[nodiscard]] static SlotRef Share(detail::BufferSlot* slot) {
    // Relaxed, as every increment of a count: whoever shares already holds
    // a reference, so the slot cannot be freed meanwhile; the release that
    // frees it is acq_rel in Unref.
    slot->refs.fetch_add(1, std::memory_order_relaxed);
    return SlotRef(slot);
  }
  // Another reference on the same slot.
  [[nodiscard]] SlotRef Share() const { return Share(slot_); }

  // Hands the reference on (to an interface that takes a raw slot with its
  // reference); the handle is empty afterwards.
  [[nodiscard]] detail::BufferSlot* release() noexcept { return std::exchange(slot_, nullptr); }

  // Drops the reference now (the last one returns the slot to its pool).
  void reset() {
    if (detail::BufferSlot* slot = std::exchange(slot_, nullptr)) slot->pool->Unref(slot);
  }

  detail::BufferSlot* get() const noexcept { return slot_; }
  detail::BufferSlot* operator->() const noexcept { return slot_; }
  detail::BufferSlot& operator*() const noexcept { return *slot_; }
  explicit operator bool() const noexcept { return slot_ != nullptr; }

 private:
  detail::BufferSlot* slot_ = nullptr;
};

}  // namespace tocl::buffers
