// The payload the messaging tests and tocl-msg-worker send each other: a
// small header that says who sent it to whom, its place in that pair's
// sequence and a checksum of the bytes after it, so that a receiver can
// tell a lost, duplicated, reordered, misdelivered or damaged message from
// a good one.
//
//   std::vector<std::byte> bytes(200);
//   FillPayload(bytes, from, to, /*seq=*/7, PayloadKind::kData);
//   std::string problem = CheckPayload(bytes, from, to);  // "" when good
//
// Header-only: both the test binaries and the worker include it. The layout
// is host-endian (the tests run on one machine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "tocl/gid.h"

namespace tocl::testing {

enum class PayloadKind : uint32_t {
  kData = 0,
  // The last message of a stream from one thread to another: its seq is the
  // number of data messages sent before it.
  kEnd = 1,
};

struct PayloadHeader {
  uint64_t from = 0;      // sending thread (raw gid)
  uint64_t to = 0;        // receiving thread (raw gid)
  uint64_t seq = 0;       // position in the (from, to) stream, from 0
  uint32_t kind = 0;      // PayloadKind
  uint32_t size = 0;      // whole payload, header included
  uint64_t checksum = 0;  // Fnv1a of the bytes after the header
};
inline constexpr size_t kPayloadHeaderBytes = sizeof(PayloadHeader);
static_assert(kPayloadHeaderBytes == 40);

inline uint64_t Fnv1a(std::span<const std::byte> bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    hash ^= static_cast<uint64_t>(b);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Fills `out` (at least kPayloadHeaderBytes) with a header and body bytes
// derived from (from, to, seq), so two messages rarely share a body.
inline void FillPayload(std::span<std::byte> out, Gid from, Gid to, uint64_t seq,
                        PayloadKind kind = PayloadKind::kData) {
  PayloadHeader header;
  header.from = from.raw();
  header.to = to.raw();
  header.seq = seq;
  header.kind = static_cast<uint32_t>(kind);
  header.size = static_cast<uint32_t>(out.size());
  uint64_t state = (from.raw() * 0x9E3779B97F4A7C15ull) ^ (to.raw() + seq * 0xBF58476D1CE4E5B9ull);
  for (size_t i = kPayloadHeaderBytes; i < out.size(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    out[i] = static_cast<std::byte>(state);
  }
  header.checksum = Fnv1a(out.subspan(kPayloadHeaderBytes));
  std::memcpy(out.data(), &header, sizeof header);
}

// The header of a payload (zeros when it is too short to hold one).
inline PayloadHeader ReadPayloadHeader(std::span<const std::byte> in) {
  PayloadHeader header;
  if (in.size() >= kPayloadHeaderBytes) std::memcpy(&header, in.data(), sizeof header);
  return header;
}

// A filled payload of at least kStampedPayloadBytes can carry a time (the
// sender's steady clock when it sent it, in ns) in its first body bytes;
// the checksum covers it.
inline constexpr size_t kStampedPayloadBytes = kPayloadHeaderBytes + sizeof(uint64_t);

inline void StampPayload(std::span<std::byte> filled, uint64_t stamp) {
  std::memcpy(filled.data() + kPayloadHeaderBytes, &stamp, sizeof stamp);
  PayloadHeader header = ReadPayloadHeader(filled);
  header.checksum = Fnv1a(filled.subspan(kPayloadHeaderBytes));
  std::memcpy(filled.data(), &header, sizeof header);
}

inline uint64_t PayloadStamp(std::span<const std::byte> in) {
  uint64_t stamp = 0;
  if (in.size() >= kStampedPayloadBytes) {
    std::memcpy(&stamp, in.data() + kPayloadHeaderBytes, sizeof stamp);
  }
  return stamp;
}

// "" when `in` is a whole, undamaged payload from `from` to `to`; otherwise
// what is wrong with it.
inline std::string CheckPayload(std::span<const std::byte> in, Gid from, Gid to) {
  if (in.size() < kPayloadHeaderBytes) {
    return "payload of " + std::to_string(in.size()) + " bytes is shorter than its header";
  }
  const PayloadHeader header = ReadPayloadHeader(in);
  if (header.size != in.size()) {
    return "payload of " + std::to_string(in.size()) + " bytes says it has " +
           std::to_string(header.size);
  }
  if (header.from != from.raw()) {
    return "payload says it is from " + Gid::FromRaw(header.from).ToString() +
           ", the buffer says " + from.ToString();
  }
  if (header.to != to.raw()) {
    return "payload for " + Gid::FromRaw(header.to).ToString() + " arrived at " + to.ToString();
  }
  if (header.checksum != Fnv1a(in.subspan(kPayloadHeaderBytes))) {
    return "checksum mismatch in message " + std::to_string(header.seq) + " from " +
           from.ToString();
  }
  return {};
}

// Packed messages (the msg worker's "packed" role, packed_test.cc): message
// `index` has a header of kPackedHeaderValues u64 values and a body whose
// byte `j` is PackedBodyByte(index, j).
inline constexpr uint32_t kPackedHeaderValues = 16;
inline uint64_t PackedHeaderValue(uint64_t index, uint32_t value, uint64_t body_bytes) {
  if (value == 0) return index;
  if (value == 1) return body_bytes;
  return index * 1000 + value;
}
inline std::byte PackedBodyByte(uint64_t index, size_t j) {
  return static_cast<std::byte>((index * 131 + j * 7 + (j >> 8)) & 0xFF);
}

}  // namespace tocl::testing
