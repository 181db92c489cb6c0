// The little protocol the via subsystem speaks on every VI, above the
// provider: the immediate data of each message (what it is, credits
// returned, frames acknowledged) and the number of receive descriptors per
// VI.
//
// Flow control (VIA drops nothing only if no message ever finds the
// receive queue empty): a sender posts a message only against a credit,
// one per descriptor the receiver has posted. The receiver re-posts a
// descriptor once it has handed the message on, and returns the credit
// with the next message it sends on the VI (every message carries the
// credits re-posted since the last), or, when it has nothing to send and
// a quarter of the window waits to be returned, with a credit message.
//
// Acknowledgements (stream_pair.h): every message also carries how many
// data frames its sender has received on this VI (modulo 2^14), so acks
// ride on reverse traffic and on credit messages. The count is per VI, not
// per stream: between two messages of the receiver the sender can post at
// most the receiver's window (256 descriptors at most), so 14 bits never
// wrap ambiguously, and a count from a VI that is closing or replaced is
// still a true statement about the stream. With nothing to send, the
// receiver acknowledges in a credit message after a quarter window of
// frames, after 200 us while its poller runs (it looks every 64th round:
// at least 128 rounds), and always before its process sleeps. A peer that
// announces more than kMaxDescriptorsPerVi descriptors, or sends more
// credits, is refused: it could make the count wrap.
//
// Credit messages and the close handshake consume descriptors too, so a
// sender keeps credits in reserve: data needs more than kReserve credits,
// a credit message more than one (it never takes the last credit, which
// belongs to the single close message a VI ever sends). A credit message
// returns at least two credits, so two sides that both wait for
// credits always have one of them able to return some.
//
// Closing (least-recently-used VIs over the cap): the side that closes
// sends kCloseRequest after its last message and nothing after it; the
// other side answers kCloseAck after its own last message. The closing
// side then has everything and disconnects. Requests that cross count as
// each other's answer. Frames whose acknowledgement did not make it before
// the close (they crossed the close request) stay in their sender's window,
// which opens a new VI for them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "buffers/size_class.h"

namespace tocl::subsystem::via {

enum class ViMessage : uint32_t {
  kData = 0,    // a tocl frame (wire header + payload)
  kCredit = 1,  // credits and acknowledgements only, no bytes
  kCloseRequest = 2,
  kCloseAck = 3,
};

// The immediate data: kind (4 bits) | credits (14) | frames received (14).
inline constexpr uint32_t kCreditBits = 14;
inline constexpr uint32_t kAckBits = 14;
inline constexpr uint32_t kMaxCreditsPerMessage = (1u << kCreditBits) - 1;
inline constexpr uint32_t kAckMask = (1u << kAckBits) - 1;
// Credits data never uses: one for a credit message, one for the close message.
inline constexpr uint32_t kReserve = 2;

inline constexpr uint32_t EncodeImmediate(ViMessage kind, uint32_t credits, uint64_t received) {
  return (static_cast<uint32_t>(kind) << (kCreditBits + kAckBits)) |
         ((credits & kMaxCreditsPerMessage) << kAckBits) |
         (static_cast<uint32_t>(received) & kAckMask);
}
inline constexpr uint32_t ImmediateCredits(uint32_t immediate) {
  return (immediate >> kAckBits) & kMaxCreditsPerMessage;
}
// The sender's count of data frames received on the VI, modulo 2^14.
inline constexpr uint32_t ImmediateReceived(uint32_t immediate) {
  return immediate & kAckMask;
}
// False for a kind this version does not know (the VI is then broken).
inline constexpr bool ImmediateKind(uint32_t immediate, ViMessage* kind) {
  const uint32_t value = immediate >> (kCreditBits + kAckBits);
  if (value > static_cast<uint32_t>(ViMessage::kCloseAck)) return false;
  *kind = static_cast<ViMessage>(value);
  return true;
}

// Receive descriptors a VI posts: about 2 MiB of buffers, 16 to 256 of
// them. Enough that credits come back before a busy sender runs out, even
// when the receiver's poller has to be woken (~40 us on these VMs): with 8
// descriptors of 64 KiB a stream ran at half tcp's speed.
inline constexpr uint32_t kMaxDescriptorsPerVi = 256;
inline constexpr uint32_t DescriptorsPerVi(uint32_t class_index) {
  const size_t by_bytes = (size_t{2} << 20) / buffers::ClassBytes(class_index);
  return static_cast<uint32_t>(std::clamp<size_t>(by_bytes, 16, kMaxDescriptorsPerVi));
}
// Re-posted descriptors (or frames received) worth a credit message of
// their own: a quarter of the window, so credits and acknowledgements flow
// back while the sender still has some.
inline constexpr uint32_t CreditThreshold(uint32_t window) {
  return std::max(window / 4, 2u);
}

static_assert(DescriptorsPerVi(0) == 256 && DescriptorsPerVi(8) == 32);
// A window's credits fit one message, and a window of frames never wraps
// the acknowledgement count.
static_assert(kMaxDescriptorsPerVi <= kMaxCreditsPerMessage && 2 * kMaxDescriptorsPerVi < kAckMask);
static_assert(EncodeImmediate(ViMessage::kCloseAck, 7, 5) == 0x3001C005);
static_assert(EncodeImmediate(ViMessage::kData, 0, kAckMask + 3) == 2);

}  // namespace tocl::subsystem::via
