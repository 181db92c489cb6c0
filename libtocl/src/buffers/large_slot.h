// A received long message in library memory: a BufferSlot that belongs to no
// size class, so a Buffer handle can carry it like any other message. Its
// pages are mapped for it alone and unmapped when the last reference goes
// (BufferPool::Unref sees kLargeClass and calls Free).
#pragma once

#include <cstdint>
#include <functional>

#include "buffers/buffer_slot.h"
#include "tocl/status.h"

namespace tocl::buffers {

inline constexpr uint32_t kLargeClass = 0xFFFF'FFFFu;

struct LargeSlot : detail::BufferSlot {
  uint64_t mapped = 0;                    // header + payload bytes mapped
  std::function<void(uint64_t)> on_free;  // told the payload size when freed
};

// Maps header + `payload` bytes (refs = 1, state kIdle, header zeroed except
// total = payload). `pool` is the pool it is reported under (its network).
Result<LargeSlot*> NewLargeSlot(BufferPool* pool, uint64_t payload,
                                std::function<void(uint64_t)> on_free);
void FreeLargeSlot(detail::BufferSlot* slot);

inline bool IsLarge(const detail::BufferSlot* slot) {
  return slot->class_index == kLargeClass;
}

}  // namespace tocl::buffers
