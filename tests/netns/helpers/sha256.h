// SHA-256 (FIPS 180-4), for the netns tests' content checks: the worker
// hashes what it sends and what it receives, the test compares the two.
//
//   tocl::testing::Sha256 hash;
//   hash.Update(bytes);
//   std::string hex = Sha256::Hex(hash.Finish());
//
// A plain, portable implementation (no OpenSSL: tocl does not depend on
// it); about 200 MB/s when optimised, which is why the worker is built -O2.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tocl::testing {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  void Update(std::span<const std::byte> bytes);
  // The digest of everything given to Update; the object is spent.
  Digest Finish();

  static Digest Of(std::span<const std::byte> bytes);
  static std::string Hex(const Digest& digest);

 private:
  void Block(const uint8_t* block);

  std::array<uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<uint8_t, 64> pending_ = {};
  size_t pending_bytes_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace tocl::testing
