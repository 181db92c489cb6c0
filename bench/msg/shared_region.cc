#include "shared_region.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace tocl::bench::msg {

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the shared words must be lock-free to work across processes");

Result<SharedRegion> SharedRegion::Create() {
  void* memory = ::mmap(nullptr, sizeof(SharedLayout), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    return Internal(
        fmt::format("mmap {} bytes shared: {}", sizeof(SharedLayout), std::strerror(errno)));
  }
  // Default-initialises: the words are set, the payload pages stay untouched.
  return SharedRegion(new (memory) SharedLayout);
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : layout_(std::exchange(other.layout_, nullptr)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    this->~SharedRegion();
    layout_ = std::exchange(other.layout_, nullptr);
  }
  return *this;
}

SharedRegion::~SharedRegion() {
  if (layout_ != nullptr) {
    layout_->~SharedLayout();
    ::munmap(layout_, sizeof(SharedLayout));
    layout_ = nullptr;
  }
}

}  // namespace tocl::bench::msg
