#include "soak_message.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "test_message.h"

namespace tocl::testing {
namespace {

constexpr uint32_t kDataMagic = 0x736f616b;     // "soak"
constexpr uint32_t kControlMagic = 0x63746c21;  // "ctl!"

// Little-endian, as the machine: magic u32, 4 zero bytes, sender u64, seq
// u64, size u64, send time u64, body SHA-256 [32].
struct RawHeader {
  uint32_t magic;
  uint32_t zero;
  uint64_t sender;
  uint64_t seq;
  uint64_t size;
  uint64_t sent_ns;
  uint8_t body_sha256[32];
};
static_assert(sizeof(RawHeader) == kSoakHeaderBytes);

struct RawControl {
  uint32_t magic;
  uint32_t zero;
  uint64_t sender;
  uint64_t number;
};
static_assert(sizeof(RawControl) == kSoakControlBytes);

}  // namespace

void FillSoakMessage(std::span<std::byte> message, Gid sender, uint64_t seq, uint64_t sent_ns) {
  std::span<std::byte> body = message.subspan(kSoakHeaderBytes);
  FillPattern(body, sender.raw(), seq);
  const Sha256::Digest digest = Sha256::Of(body);
  RawHeader header{kDataMagic, 0, sender.raw(), seq, message.size(), sent_ns, {}};
  std::memcpy(header.body_sha256, digest.data(), digest.size());
  std::memcpy(message.data(), &header, sizeof(header));
}

Result<SoakHeader> CheckSoakMessage(std::span<const std::byte> message) {
  if (message.size() < kSoakHeaderBytes) {
    return InvalidArgument("a " + std::to_string(message.size()) + " byte message has no header");
  }
  RawHeader raw;
  std::memcpy(&raw, message.data(), sizeof(raw));
  if (raw.magic != kDataMagic || raw.zero != 0) return InvalidArgument("the header is garbled");
  if (raw.size != message.size()) {
    return InvalidArgument("the header says " + std::to_string(raw.size) + " bytes, " +
                           std::to_string(message.size()) + " arrived");
  }
  SoakHeader header{Gid::FromRaw(raw.sender), raw.seq, raw.size, raw.sent_ns, {}};
  std::memcpy(header.body_sha256.data(), raw.body_sha256, header.body_sha256.size());
  if (Sha256::Of(message.subspan(kSoakHeaderBytes)) != header.body_sha256) {
    return InvalidArgument("the body's SHA-256 differs from the header's (seq " +
                           std::to_string(raw.seq) + ")");
  }
  return header;
}

std::array<std::byte, kSoakControlBytes> EncodeSoakControl(const SoakControl& control) {
  const RawControl raw{kControlMagic, 0, control.sender.raw(), control.number};
  std::array<std::byte, kSoakControlBytes> bytes;
  std::memcpy(bytes.data(), &raw, sizeof(raw));
  return bytes;
}

Result<SoakControl> ParseSoakControl(std::span<const std::byte> bytes) {
  if (bytes.size() != kSoakControlBytes) {
    return InvalidArgument("a control message of " + std::to_string(bytes.size()) + " bytes");
  }
  RawControl raw;
  std::memcpy(&raw, bytes.data(), sizeof(raw));
  if (raw.magic != kControlMagic || raw.zero != 0) {
    return InvalidArgument("a garbled control message");
  }
  return SoakControl{Gid::FromRaw(raw.sender), raw.number};
}

SoakSizeMix::SoakSizeMix(uint64_t seed, size_t short_max_payload, uint32_t long_every)
    : random_(seed), short_max_payload_(short_max_payload), long_every_(long_every) {}

uint64_t SoakSizeMix::Next() {
  auto between = [&](uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(random_);
  };
  if (long_every_ > 0 && between(1, long_every_) == 1) {
    return between(short_max_payload_ + 1, uint64_t{1} << 20);
  }
  if (between(1, 5) == 1) return between(4096, short_max_payload_);
  return between(kSoakHeaderBytes, 4096);
}

}  // namespace tocl::testing
