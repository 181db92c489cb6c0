// What the soak workers send each other (soak_worker.cc): data messages of
// mixed sizes carrying their sender's Gid, a sequence number, their length
// and the SHA-256 of their body, and the small control messages of the
// application's own acknowledgement protocol.
//
//   std::vector<std::byte> message(size);
//   FillSoakMessage(message, sender, seq);
//   ...
//   Result<SoakHeader> header = CheckSoakMessage(received);  // or what is wrong
//
// A data message is a 64-byte header (magic, sender Gid, seq, total size,
// body SHA-256, 8 zero bytes) and a body of pseudo-random bytes drawn from
// (sender, seq), so that a fragment put at the wrong offset changes the
// digest. A control message (ack, end, end-ack) is 24 bytes: magic, the
// data sender's Gid, a number (the seq acknowledged, or how many messages
// the stream sent).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "sha256.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::testing {

// Tags of the soak protocol. Data goes sender -> receiver; the receiver
// answers every data message it accepted with an ack. At the end the sender
// sends an end (its count), answered by an end-ack. Notices are the exit
// notifications (tocl/exit_notice.h) a sender asks for on its receiver.
inline constexpr Tag kSoakDataTag = 11;
inline constexpr Tag kSoakAckTag = 12;
inline constexpr Tag kSoakEndTag = 13;
inline constexpr Tag kSoakEndAckTag = 14;
inline constexpr Tag kSoakNoticeTag = 15;

inline constexpr size_t kSoakHeaderBytes = 64;
inline constexpr size_t kSoakControlBytes = 24;

struct SoakHeader {
  Gid sender;
  uint64_t seq = 0;
  uint64_t size = 0;  // the whole message, header included
  Sha256::Digest body_sha256 = {};
};

// Writes the header and body into `message` (at least kSoakHeaderBytes).
void FillSoakMessage(std::span<std::byte> message, Gid sender, uint64_t seq);

// The header of a received message once its magic, size and body digest
// are checked; InvalidArgument naming what is wrong otherwise.
Result<SoakHeader> CheckSoakMessage(std::span<const std::byte> message);

struct SoakControl {
  Gid sender;  // the data sender's stream (its thread Gid)
  uint64_t number = 0;
};
std::array<std::byte, kSoakControlBytes> EncodeSoakControl(const SoakControl& control);
Result<SoakControl> ParseSoakControl(std::span<const std::byte> bytes);

// The sizes a sending thread draws: mostly short messages (64 B to 4 KiB),
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
