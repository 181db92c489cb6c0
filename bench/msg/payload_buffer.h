// A private, cache-line aligned message buffer: where a ping-pong's payload
// is copied from and to, in every contender alike.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tocl::bench::msg {

class PayloadBuffer {
 public:
  explicit PayloadBuffer(size_t size)
      : data_(static_cast<std::byte*>(std::aligned_alloc(64, Rounded(size)))) {
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_.get(), 0x5a, Rounded(size));  // touched: no page faults while timed
  }
  std::byte* data() const { return data_.get(); }

 private:
  static size_t Rounded(size_t size) { return (size + 64 + 63) / 64 * 64; }
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
};

}  // namespace tocl::bench::msg
