// A received long message in library memory: a BufferSlot that belongs to no
// size class, so a Buffer handle can carry it like any other message. Its
// pages are mapped for it alone (or taken from a MappingCache) and unmapped
// (or kept there) when the last reference goes (BufferPool::Unref sees
// kLargeClass and calls Free).
#pragma once

#include <cstdint>
#include <functional>

#include "buffers/buffer_slot.h"
#include "buffers/mapping_cache.h"
#include "tocl/status.h"

namespace tocl::buffers {

inline constexpr uint32_t kLargeClass = 0xFFFF'FFFFu;

struct LargeSlot : detail::BufferSlot {
  uint64_t mapped = 0;                    // bytes mapped (header + payload, or more)
  uint64_t payload_bytes = 0;             // as asked for (the header's total may shrink)
  MappingCache* cache = nullptr;          // where the mapping goes when freed
  std::function<void(uint64_t)> on_free;  // told the payload size when freed
};

// Header + `payload` bytes (refs = 1, state kIdle, header zeroed except
// total = payload): a mapping `cache` kept, else a new one; freeing gives it
// back to `cache` (may be null). `pool` is the pool it is reported under
// (its network).
Result<LargeSlot*> NewLargeSlot(BufferPool* pool, uint64_t payload, MappingCache* cache,
                                std::function<void(uint64_t)> on_free);
void FreeLargeSlot(detail::BufferSlot* slot);

inline bool IsLarge(const detail::BufferSlot* slot) {
  return slot->class_index == kLargeClass;
}

}  // namespace tocl::buffers
