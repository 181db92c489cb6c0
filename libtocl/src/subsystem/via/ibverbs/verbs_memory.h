// The via pool's slabs under ibverbs: anonymous pages registered once per
// slab with the provider's protection domain (ibv_reg_mr, local write: the
// device writes received messages into them). Every slot of a slab carries
// the region's lkey as its memory_key, so a send or receive descriptor
// needs no lookup.
//
// Lifetime: the regions are deregistered and the pages unmapped when this
// object dies, which must be after the pool that hands out its slots and
// before the protection domain (the provider declares it after the PD).
//
// Threading: Allocate from any thread (the pool calls it with a class
// mutex held).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "buffers/buffer_pool.h"
#include "subsystem/via/ibverbs/verbs_handles.h"

namespace tocl::subsystem::via::verbs {

class RegisteredSlabMemory final : public buffers::SlabMemory {
 public:
  explicit RegisteredSlabMemory(ibv_pd* pd) : pd_(pd) {}
  ~RegisteredSlabMemory() override;
  RegisteredSlabMemory(const RegisteredSlabMemory&) = delete;
  RegisteredSlabMemory& operator=(const RegisteredSlabMemory&) = delete;

  Result<buffers::Slab> Allocate(size_t bytes) override;

 private:
  struct Registered {
    void* base;
    size_t bytes;
    MemoryRegion region;
  };

  ibv_pd* const pd_;
  std::mutex mu_;
  // Guarded by mu_:
  std::vector<Registered> slabs_;
  uint64_t next_offset_ = 0;
};

}  // namespace tocl::subsystem::via::verbs
