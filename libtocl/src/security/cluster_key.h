// The cluster's shared secret for the data plane (issue #7 §1): every
// process of an authenticated cluster holds it, and proves so to each peer
// it connects to (handshake_mac.h) before a message is accepted.
//
// A process of a cluster without credentials holds no secret (`none()`);
// its networks are then bound to loopback only (TransportRegistry::
// ParseNetworks, subsystem/transport_registry.cc), and the
// handshake still runs, with an empty key, so that a process that has the
// secret and one that does not fail to talk instead of talking unprotected.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::security {

class ClusterKey {
 public:
  static constexpr size_t kBytes = 32;

  ClusterKey() = default;  // none
  explicit ClusterKey(const std::array<std::byte, kBytes>& bytes) : bytes_(bytes) {}

  // 32 random bytes (keygen).
  static Result<ClusterKey> Random();
  // 64 hex digits, optionally surrounded by whitespace (a cluster.secret
  // file); an empty span is none.
  static Result<ClusterKey> FromHex(std::string_view text);
  // Raw bytes as the daemon sends them at enrollment: 32 bytes, or none.
  static Result<ClusterKey> FromBytes(std::span<const std::byte> bytes);

  bool none() const { return !bytes_.has_value(); }
  // Empty when none.
  std::span<const std::byte> bytes() const;
  std::string Hex() const;  // "" when none

 private:
  std::optional<std::array<std::byte, kBytes>> bytes_;
};

}  // namespace tocl::security
