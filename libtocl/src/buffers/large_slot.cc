#include "buffers/large_slot.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace tocl::buffers {

Result<LargeSlot*> NewLargeSlot(BufferPool* pool, uint64_t payload, MappingCache* cache,
                                std::function<void(uint64_t)> on_free) {
  const uint64_t bytes = wire::kHeaderBytes + payload;
  MappingCache::Mapping mapping;
  if (cache != nullptr) mapping = cache->Take(bytes);
  if (mapping.memory == nullptr) {
    void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      return ResourceExhausted(
          fmt::format("cannot map {} bytes for a long message: {}", bytes, std::strerror(errno)));
    }
    mapping = {memory, bytes};
  }
  auto* slot = new LargeSlot;
  slot->bytes = static_cast<std::byte*>(mapping.memory);
  slot->pool = pool;
  slot->class_index = kLargeClass;
  slot->refs.store(1, std::memory_order_relaxed);
  slot->mapped = mapping.bytes;
  slot->payload_bytes = payload;
  slot->cache = cache;
  slot->on_free = std::move(on_free);
  new (slot->bytes) wire::Header();
  slot->header().total = payload;
  return slot;
}

void FreeLargeSlot(detail::BufferSlot* slot) {
  auto* large = static_cast<LargeSlot*>(slot);
  const uint64_t payload = large->payload_bytes;
  if (large->cache != nullptr) {
    large->cache->Keep({large->bytes, large->mapped});
  } else {
    munmap(large->bytes, large->mapped);
  }
  auto on_free = std::move(large->on_free);
  delete large;
  if (on_free) on_free(payload);
}

}  // namespace tocl::buffers
