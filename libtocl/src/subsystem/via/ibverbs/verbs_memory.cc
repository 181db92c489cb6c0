#include "subsystem/via/ibverbs/verbs_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>

#include "core/posix.h"

namespace tocl::subsystem::via::verbs {

RegisteredSlabMemory::~RegisteredSlabMemory() {
  // Deregister before unmapping: the device may still address the pages
  // until the region is gone.
  for (Registered& slab : slabs_) {
    slab.region.reset();
    munmap(slab.base, slab.bytes);
  }
}

Result<buffers::Slab> RegisteredSlabMemory::Allocate(size_t bytes) {
  if (bytes == 0) return InvalidArgument("a slab of 0 bytes");
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return ErrnoStatus(fmt::format("mmap of a {} byte slab", bytes), errno);
  }
  // Registration pins the pages; it fails with ENOMEM past RLIMIT_MEMLOCK.
  // The device only writes received messages: local write, no remote access.
  // (An int, not the enum: verbs.h's ibv_reg_mr macro masks it with another
  // enum, which C++20 deprecates.)
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE;
  MemoryRegion region(ibv_reg_mr(pd_, base, bytes, kAccess));
  if (!region) {
    const int error = errno;
    munmap(base, bytes);
    return ErrnoStatus(fmt::format("ibv_reg_mr of a {} byte slab (check ulimit -l)", bytes), error);
  }
  const uint32_t lkey = region->lkey;
  std::lock_guard lock(mu_);
  slabs_.push_back({base, bytes, std::move(region)});
  buffers::Slab slab{static_cast<std::byte*>(base), next_offset_, lkey};
  next_offset_ += bytes;
  return slab;
}

}  // namespace tocl::subsystem::via::verbs
