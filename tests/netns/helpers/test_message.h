// The messages tocl-long-worker sends: a 64-byte header (magic, sending
// worker thread, sequence number, total size, SHA-256 of the body), then a
// body of pseudo-random bytes that differ at every offset (a misplaced
// fragment shows). The receiver checks all of it; the SHA-256 is printed on
// both ends so the test can compare them too.
//
//   std::vector<std::byte> message(8 << 20);
//   Sha256::Digest digest = FillTestMessage(message, /*thread=*/0, /*seq=*/3);
//   ...
//   auto checked = CheckTestMessage(received);   // the header, or what is wrong
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sha256.h"
#include "tocl/status.h"

namespace tocl::testing {

inline constexpr size_t kTestMessageHeaderBytes = 64;

struct TestMessageHeader {
  uint32_t thread = 0;  // the sending worker's thread index
  uint64_t seq = 0;     // per sending thread, from 0
  uint64_t size = 0;    // the whole message, header included
  Sha256::Digest body_sha256 = {};
};

// Fills `body` with pseudo-random bytes (xorshift) determined by `key` and
// `seq`, different at every offset, so a misplaced fragment shows. The soak
// (tests/soak) fills its bodies the same way.
void FillPattern(std::span<std::byte> body, uint64_t key, uint64_t seq);

// Writes the header and body into `message` (at least
// kTestMessageHeaderBytes); the body's digest.
Sha256::Digest FillTestMessage(std::span<std::byte> message, uint32_t thread, uint64_t seq);

// The header of a received message once its size and body digest are
// checked; InvalidArgument naming what is wrong otherwise.
Result<TestMessageHeader> CheckTestMessage(std::span<const std::byte> message);

// The end marker a sending thread sends last: how many messages it sent.
std::vector<std::byte> EndMarker(uint64_t count);
Result<uint64_t> ParseEndMarker(std::span<const std::byte> payload);

// A plan of message sizes, comma-separated: "64M", "8x8M" (8 of 8 MiB),
// "100", "4K", "mix40" (40 messages, a quarter of them 1..8 MiB, the rest
// 100 B..64 KiB, drawn from a generator seeded with `thread`).
Result<std::vector<uint64_t>> ParsePlan(const std::string& plan, uint32_t thread);
// "64M" -> 67108864 (suffixes K, M, G: binary).
Result<uint64_t> ParseSize(const std::string& text);

}  // namespace tocl::testing
