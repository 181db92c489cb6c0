#include "buffers/mapping_cache.h"

#include <sys/mman.h>

#include <vector>

namespace tocl::buffers {

MappingCache::~MappingCache() {
  for (const Mapping& mapping : kept_) munmap(mapping.memory, mapping.bytes);
}

MappingCache::Mapping MappingCache::Take(size_t bytes) {
  std::lock_guard lock(mu_);
  auto best = kept_.end();
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->bytes < bytes || it->bytes / 2 > bytes) continue;
    if (best == kept_.end() || it->bytes < best->bytes) best = it;
  }
  if (best == kept_.end()) return {};
  Mapping taken = *best;
  kept_.erase(best);
  kept_bytes_ -= taken.bytes;
  return taken;
}

void MappingCache::Keep(Mapping mapping) {
  std::vector<Mapping> unmap;
  if (mapping.bytes > cap_) {
    unmap.push_back(mapping);
  } else {
    mapping.kept_at = Clock::now();
    std::lock_guard lock(mu_);
    while (!kept_.empty() && (kept_.size() >= kMaxKept || kept_bytes_ + mapping.bytes > cap_)) {
      unmap.push_back(kept_.front());
      kept_bytes_ -= kept_.front().bytes;
      kept_.pop_front();
    }
    kept_.push_back(mapping);
    kept_bytes_ += mapping.bytes;
  }
  for (const Mapping& gone : unmap) munmap(gone.memory, gone.bytes);
}

void MappingCache::ReleaseUnusedBefore(Clock::time_point before) {
  std::vector<Mapping> unmap;
  {
    std::lock_guard lock(mu_);
    // Oldest first: the ones kept before `before` are at the front.
    while (!kept_.empty() && kept_.front().kept_at < before) {
      unmap.push_back(kept_.front());
      kept_bytes_ -= kept_.front().bytes;
      kept_.pop_front();
    }
  }
  for (const Mapping& gone : unmap) munmap(gone.memory, gone.bytes);
}

size_t MappingCache::kept_bytes() const {
  std::lock_guard lock(mu_);
  return kept_bytes_;
}

}  // namespace tocl::buffers
