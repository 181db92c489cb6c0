#include "security/cluster_key.h"

#include <fmt/format.h>

#include <cstring>

#include "security/random_bytes.h"

namespace tocl::security {

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view Trim(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace

Result<ClusterKey> ClusterKey::Random() {
  std::array<std::byte, kBytes> bytes;
  TOCL_RETURN_IF_ERROR(FillRandom(bytes));
  return ClusterKey(bytes);
}

Result<ClusterKey> ClusterKey::FromHex(std::string_view text) {
  text = Trim(text);
  if (text.size() != 2 * kBytes) {
    return InvalidArgument(fmt::format(
        "a cluster secret is {} hex digits, this one has {} characters", 2 * kBytes, text.size()));
  }
  std::array<std::byte, kBytes> bytes;
  for (size_t i = 0; i < kBytes; ++i) {
    const int high = HexDigit(text[2 * i]);
    const int low = HexDigit(text[2 * i + 1]);
    if (high < 0 || low < 0) {
      return InvalidArgument(
          fmt::format("a cluster secret is hex digits only; character {} is not one",
                      2 * i + (high < 0 ? 1 : 2)));
    }
    bytes[i] = static_cast<std::byte>(high * 16 + low);
  }
  return ClusterKey(bytes);
}

Result<ClusterKey> ClusterKey::FromBytes(std::span<const std::byte> bytes) {
  if (bytes.empty()) return ClusterKey();
  if (bytes.size() != kBytes) {
    return InvalidArgument(
        fmt::format("a cluster secret is {} bytes, this one has {}", kBytes, bytes.size()));
  }
  std::array<std::byte, kBytes> copy;
  std::memcpy(copy.data(), bytes.data(), kBytes);
  return ClusterKey(copy);
}

std::span<const std::byte> ClusterKey::bytes() const {
  if (!bytes_) return {};
  return std::span<const std::byte>(*bytes_);
}

std::string ClusterKey::Hex() const {
  std::string hex;
  if (!bytes_) return hex;
  hex.reserve(2 * kBytes);
  for (std::byte b : *bytes_) hex += fmt::format("{:02x}", static_cast<unsigned>(b));
  return hex;
}

}  // namespace tocl::security
