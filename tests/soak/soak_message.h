// What the soak workers send each other (soak_worker.cc): data messages of
// mixed sizes carrying their sender's Gid, a sequence number, their length,
// when they were sent and the SHA-256 of their body, and the two control
// messages that end a stream.
//
//   std::vector<std::byte> message(size);
//   FillSoakMessage(message, sender, seq, SteadyNowNs());
//   ...
//   Result<SoakHeader> header = CheckSoakMessage(received);  // or what is wrong
//
// A data message is a 72-byte header (magic, 4 zero bytes, sender Gid, seq,
// total size, send time, body SHA-256) and a body of pseudo-random bytes
// drawn from (sender, seq), so that a fragment put at the wrong offset
// changes the digest. A control message (end, end-ack) is 24 bytes: magic,
// 4 zero bytes, the data sender's Gid, a number (how many messages the
// stream sent; the seq the receiver expects next).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "sha256.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::testing {

// Tags of the soak protocol. Data goes sender -> receiver, unanswered: what
// counts is what the library says of each message (soak_sender.cc). When
// the worker stops, the sender ends its stream with an end (its count),
// answered by an end-ack once the receiver has it: everything the library
// said was sent is in the receiving process then. Notices are the exit
// notifications (tocl/exit_notice.h) a sender asks for on its receiver.
inline constexpr Tag kSoakDataTag = 11;
inline constexpr Tag kSoakEndTag = 13;
inline constexpr Tag kSoakEndAckTag = 14;
inline constexpr Tag kSoakNoticeTag = 15;

inline constexpr size_t kSoakHeaderBytes = 72;
inline constexpr size_t kSoakControlBytes = 24;

// The steady clock in ns: the same clock in every process of the machine
// (the hosts are namespaces of one kernel), so the driver lines up send
// times, arrivals and the start of its faults.
inline uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

struct SoakHeader {
  Gid sender;
  uint64_t seq = 0;
  uint64_t size = 0;     // the whole message, header included
  uint64_t sent_ns = 0;  // SteadyNowNs() just before its Send
  Sha256::Digest body_sha256 = {};
};

// Writes the header and body into `message` (at least kSoakHeaderBytes).
void FillSoakMessage(std::span<std::byte> message, Gid sender, uint64_t seq, uint64_t sent_ns);

// The header of a received message once its magic, size and body digest
// are checked; InvalidArgument naming what is wrong otherwise.
Result<SoakHeader> CheckSoakMessage(std::span<const std::byte> message);

struct SoakControl {
  Gid sender;  // the data sender's stream (its thread Gid)
  uint64_t number = 0;
};
std::array<std::byte, kSoakControlBytes> EncodeSoakControl(const SoakControl& control);
Result<SoakControl> ParseSoakControl(std::span<const std::byte> bytes);

// The sizes a sending thread draws: mostly short messages (72 B to 4 KiB),
// some up to the short maximum, and one in `long_every` longer than it (up
// to 1 MiB): those are cut into fragments that travel over both networks.
class SoakSizeMix {
 public:
  SoakSizeMix(uint64_t seed, size_t short_max_payload, uint32_t long_every);
  uint64_t Next();

 private:
  std::mt19937_64 random_;
  size_t short_max_payload_;
  uint32_t long_every_;
};

}  // namespace tocl::testing
