// The state of long messages (larger than the short maximum) on both sides
// (paper §4.3, DESIGN.md §5 "Long messages"; the frames are in wire/frame.h).
//
// Sender: the sending thread owns a LongSend while Send runs. It cuts the
// user's memory into fragments of one pool class, posts each on the
// network whose expected finish time is earliest (measured bandwidth,
// bytes already in flight there), and keeps a window of unacknowledged
// fragments per network (the decisions: fragment_scheduler.h). The poller
// records acknowledgements in the LongSend and wakes the sender. A network
// that acknowledges nothing for fragment_timeout (or whose route breaks) is
// failed for that peer and its unacknowledged fragments go back to be sent
// over the others.
//
// Receiver: the kLongStart frame takes its place in the pair's order. The
// poller then finds memory for the whole message: a RecvInto buffer the
// receiving thread has posted, else library memory within reassembly_cap
// (else the start waits, and so does its sender: slowed, not dropped); it
// delivers an incomplete entry to the thread's mailbox (so that later
// messages of the pair stay behind it) and grants. Each fragment is copied
// to its offset and acknowledged over the network it came by; duplicates
// (a fragment sent again after its network was thought dead) are
// acknowledged and dropped.
//
// Nothing heard: a start can be lost (it was in a connection that died, or
// it waits in the pair's order behind a short message that was), and a
// receiver can stop reading. While it waits for its grant the sender sends a
// kProbe every fragment_timeout, over its networks in turn; the receiver
// answers with the grant again (granted: the grant was lost), a kProbe
// (waiting for memory: a RecvInto, or room within reassembly_cap), an abort
// (it gave the message up), or nothing (it never saw the start). A Send that
// hears nothing about its message (grant, acknowledgement, answer) for
// partial_timeout fails with Unavailable and tells the receiver, which then
// drops the start if it comes after all. The receiver gives up a granted
// message after partial_timeout without fragments, so neither side waits
// for ever for the other; only a receiver that says it waits for memory
// keeps its sender waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "buffers/large_slot.h"
#include "runtime/fragment_scheduler.h"
#include "runtime/mailbox.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::runtime {

// Identifies one long message: its two threads and its pair sequence number.
struct LongKey {
  uint64_t source = 0;       // sending thread
  uint64_t destination = 0;  // receiving thread
  uint64_t seq = 0;
  bool operator==(const LongKey&) const = default;
};
// The long message a start, fragment or control frame of the sender's
// (source -> destination) is about.
inline LongKey KeyOf(const wire::Header& header) {
  return LongKey{header.source, header.destination, header.seq};
}
struct LongKeyHash {
  size_t operator()(const LongKey& key) const {
    uint64_t h = key.source * 0x9E3779B97F4A7C15ull;
    h ^= key.destination + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= key.seq + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

// kProbe's tag: which way it goes.
inline constexpr Tag kProbeAsk = 0;      // sender to receiver
inline constexpr Tag kProbeWaiting = 1;  // receiver to sender: the start waits for memory
// kAbort's tag: who gives up.
inline constexpr Tag kAbortBySender = 0;
inline constexpr Tag kAbortByReceiver = 1;
static_assert(kProbeAsk == 0 && kAbortBySender == 0 && kProbeWaiting != 0 && kAbortByReceiver != 0,
              "wire::RelayedTowardReceiver and RelayedTowardSender tell a relayed abort's and "
              "probe's direction by these tags");

// A control frame from the sender of a message this process receives (its
// abort, its probe: LongReceiver's); any other (grant, acknowledgement, the
// receiver's abort or answer to a probe) is about a message this process
// sends (LongSender's). A peer process may be on either side of a message,
// so the kind and tag say which, not who sent the frame.
inline bool FromSender(const wire::Header& header) {
  return (header.kind == wire::FrameKind::kAbort && header.tag == kAbortBySender) ||
         (header.kind == wire::FrameKind::kProbe && header.tag == kProbeAsk);
}

struct LongSend {
  LongKey key;
  std::span<const std::byte> data;
  Tag tag = 0;
  // Set before Begin: a multicast's fill has the number its marker took
  // (else the pair's next), and wire::kFlagRelayed on every frame.
  std::optional<uint64_t> numbered_as;
  uint64_t nonce = 0;  // a fill's (wire/frame.h), in its start's offset
  uint16_t flags = 0;

  std::mutex mu;         // the sender and the poller (acknowledgements)
  bool granted = false;  // guarded by mu
  Status aborted;        // guarded by mu: the receiver gave up
  // Guarded by mu: which fragments went where, which were acknowledged.
  FragmentScheduler fragments;
  // Guarded by mu: the last grant, acknowledgement or answer to a probe.
  std::chrono::steady_clock::time_point last_heard;
  Mailbox* wake = nullptr;  // the sending thread's mailbox (or the thread carrying it)

  // The sending thread's (LongSender::Begin, Step, End).
  uint64_t generation = 0;  // of the peer's routes when the send began
  bool registered = false;  // in the LongSender's table (its mu_)
  std::chrono::steady_clock::duration probe_every{};
  std::chrono::steady_clock::time_point next_probe;
  size_t probes = 0;
};

struct InboundLong {
  LongKey key;
  Gid source_process;
  uint64_t total = 0;
  uint64_t fragment_bytes = 0;
  Tag tag = 0;
  // The start's wire flags: a packed message's body piece
  // (wire::kFlagPackedPiece) is granted only into a posted receive's
  // memory, never library memory (its reader posts one: no copy).
  uint16_t flags = 0;

  std::mutex mu;                       // the poller placing fragments, a RecvInto that gives up
  std::byte* dest = nullptr;           // guarded by mu
  buffers::LargeSlot* slot = nullptr;  // library memory (one reference), or
  PostedReceive* posted = nullptr;     // the RecvInto buffer it lands in
  Mailbox* mailbox = nullptr;
  std::vector<bool> have;                               // poller only
  uint64_t received = 0;                                // fragments, poller only
  std::chrono::steady_clock::time_point last_activity;  // poller only
  std::chrono::steady_clock::time_point granted_at;     // the last grant sent
  bool granted = false;
};

}  // namespace tocl::runtime
