// Little-endian fields in and out of a byte span, with bounds checks on the
// way in: how the runtime's own messages (spawn requests and replies, exit
// notices) are laid out. Nothing read from a network is trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tocl/status.h"

namespace tocl::runtime {

class ByteWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_integral_v<T>);
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
  }
  void PutBytes(std::span<const std::byte> data) {
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void PutText(std::string_view text) {
    PutBytes(std::as_bytes(std::span(text.data(), text.size())));
  }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

// Reads fields in order; a read past the end fails and so does every later
// one (check ok() once at the end).
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <typename T>
  T Get() {
    static_assert(std::is_integral_v<T>);
    T value{};
    if (!Have(sizeof(T))) return value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::span<const std::byte> GetBytes(size_t n) {
    if (!Have(n)) return {};
    auto out = bytes_.subspan(at_, n);
    at_ += n;
    return out;
  }
  std::string_view GetText(size_t n) {
    auto data = GetBytes(n);
    return {reinterpret_cast<const char*>(data.data()), data.size()};
  }

  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? bytes_.size() - at_ : 0; }

 private:
  bool Have(size_t n) {
    if (!ok_ || bytes_.size() - at_ < n) ok_ = false;
    return ok_;
  }
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

// A status carried as (code, message) in a reply: a code this build does
// not know (or one that is not an error) is still an error (kInternal);
// an empty message becomes `fallback`.
inline Status StatusFromWire(uint32_t code, std::string_view message, std::string_view fallback) {
  if (code == 0) return Status::Ok();
  const bool known = code <= static_cast<uint32_t>(StatusCode::kInternal) &&
                     code != static_cast<uint32_t>(StatusCode::kTryAgain) &&
                     code != static_cast<uint32_t>(StatusCode::kInProgress);
  return Status(known ? static_cast<StatusCode>(code) : StatusCode::kInternal,
                std::string(message.empty() ? fallback : message));
}

}  // namespace tocl::runtime
