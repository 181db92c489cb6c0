#include "test_message.h"

#include <charconv>
#include <cstring>
#include <random>

namespace tocl::testing {
namespace {

constexpr uint32_t kMagic = 0x746f636c;     // "tocl"
constexpr uint32_t kEndMagic = 0x656e6421;  // "end!"

// Header layout (little-endian, as the machine): magic u32, thread u32,
// seq u64, size u64, body SHA-256 [32], 8 bytes zero.
struct RawHeader {
  uint32_t magic;
  uint32_t thread;
  uint64_t seq;
  uint64_t size;
  uint8_t body_sha256[32];
  uint64_t zero;
};
static_assert(sizeof(RawHeader) == kTestMessageHeaderBytes);

}  // namespace

void FillPattern(std::span<std::byte> body, uint64_t key, uint64_t seq) {
  uint64_t x = key ^ (seq * 0x9E3779B97F4A7C15ull) ^ 0x2545F4914F6CDD1Dull;
  if (x == 0) x = 1;  // xorshift would stay at zero
  size_t i = 0;
  for (; i + 8 <= body.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(body.data() + i, &x, 8);
  }
  for (; i < body.size(); ++i) body[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
}

Sha256::Digest FillTestMessage(std::span<std::byte> message, uint32_t thread, uint64_t seq) {
  std::span<std::byte> body = message.subspan(kTestMessageHeaderBytes);
  FillPattern(body, uint64_t{thread} << 40, seq);
  const Sha256::Digest digest = Sha256::Of(body);
  RawHeader header{kMagic, thread, seq, message.size(), {}, 0};
  std::memcpy(header.body_sha256, digest.data(), digest.size());
  std::memcpy(message.data(), &header, sizeof(header));
  return digest;
}

Result<TestMessageHeader> CheckTestMessage(std::span<const std::byte> message) {
  if (message.size() < kTestMessageHeaderBytes) {
    return InvalidArgument("a " + std::to_string(message.size()) + " byte message has no header");
  }
  RawHeader raw;
  std::memcpy(&raw, message.data(), sizeof(raw));
  if (raw.magic != kMagic || raw.zero != 0) return InvalidArgument("the header is garbled");
  if (raw.size != message.size()) {
    return InvalidArgument("the header says " + std::to_string(raw.size) + " bytes, " +
                           std::to_string(message.size()) + " arrived");
  }
  TestMessageHeader header{raw.thread, raw.seq, raw.size, {}};
  std::memcpy(header.body_sha256.data(), raw.body_sha256, header.body_sha256.size());
  if (Sha256::Of(message.subspan(kTestMessageHeaderBytes)) != header.body_sha256) {
    return InvalidArgument("the body's SHA-256 differs from the header's (seq " +
                           std::to_string(raw.seq) + ")");
  }
  return header;
}

std::vector<std::byte> EndMarker(uint64_t count) {
  std::vector<std::byte> payload(16);
  std::memcpy(payload.data(), &kEndMagic, 4);
  std::memcpy(payload.data() + 8, &count, 8);
  return payload;
}

Result<uint64_t> ParseEndMarker(std::span<const std::byte> payload) {
  uint32_t magic = 0;
  uint64_t count = 0;
  if (payload.size() != 16) return InvalidArgument("an end marker of the wrong size");
  std::memcpy(&magic, payload.data(), 4);
  std::memcpy(&count, payload.data() + 8, 8);
  if (magic != kEndMagic) return InvalidArgument("a garbled end marker");
  return count;
}

Result<uint64_t> ParseSize(const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || rest == text.data()) {
    return InvalidArgument("not a size: '" + text + "'");
  }
  const std::string suffix(rest, end);
  if (suffix == "K") return value << 10;
  if (suffix == "M") return value << 20;
  if (suffix == "G") return value << 30;
  if (suffix.empty()) return value;
  return InvalidArgument("not a size: '" + text + "'");
}

Result<std::vector<uint64_t>> ParsePlan(const std::string& plan, uint32_t thread) {
  std::vector<uint64_t> sizes;
  std::mt19937_64 random(thread + 1);
  size_t start = 0;
  while (start <= plan.size()) {
    size_t comma = plan.find(',', start);
    if (comma == std::string::npos) comma = plan.size();
    const std::string item = plan.substr(start, comma - start);
    start = comma + 1;
    if (item.rfind("mix", 0) == 0) {
      TOCL_ASSIGN_OR_RETURN(uint64_t count, ParseSize(item.substr(3)));
      for (uint64_t i = 0; i < count; ++i) {
        if (random() % 4 == 0) {
          sizes.push_back(std::uniform_int_distribution<uint64_t>(1 << 20, 8 << 20)(random));
        } else {
          sizes.push_back(std::uniform_int_distribution<uint64_t>(100, 64 << 10)(random));
        }
      }
      continue;
    }
    uint64_t repeat = 1;
    std::string size = item;
    if (size_t x = item.find('x'); x != std::string::npos) {
      TOCL_ASSIGN_OR_RETURN(repeat, ParseSize(item.substr(0, x)));
      size = item.substr(x + 1);
    }
    TOCL_ASSIGN_OR_RETURN(uint64_t bytes, ParseSize(size));
    if (bytes < kTestMessageHeaderBytes) {
      return InvalidArgument("'" + item + "': a message has at least 64 bytes");
    }
    sizes.insert(sizes.end(), repeat, bytes);
  }
  if (sizes.empty()) return InvalidArgument("an empty plan");
  return sizes;
}

}  // namespace tocl::testing
