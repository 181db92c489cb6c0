// Size classes: a request for x payload bytes gets class 2^y with
// 2^(y-1) < x + header <= 2^y, from 256 B up to the short maximum.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "wire/frame.h"

namespace tocl::buffers {

inline constexpr uint32_t kMinClassShift = 8;   // 256 B
inline constexpr uint32_t kMaxClassShift = 20;  // 1 MiB: the largest short maximum we accept
inline constexpr uint32_t kMaxClasses = kMaxClassShift - kMinClassShift + 1;

inline constexpr size_t ClassBytes(uint32_t class_index) {
  return size_t{1} << (class_index + kMinClassShift);
}

// The class index for a payload of `payload` bytes (may be past the last class).
inline constexpr uint32_t ClassFor(size_t payload) {
  size_t total = payload + wire::kHeaderBytes;
  uint32_t shift = static_cast<uint32_t>(std::bit_width(total - 1));
  return shift <= kMinClassShift ? 0 : shift - kMinClassShift;
}

static_assert(ClassFor(0) == 0 && ClassFor(192) == 0 && ClassFor(193) == 1);
static_assert(ClassFor(65536 - 64) == 8 && ClassFor(65536 - 63) == 9);

}  // namespace tocl::buffers
