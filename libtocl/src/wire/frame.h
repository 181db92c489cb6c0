// The wire header in front of every message and fragment (DESIGN.md §6).
//
// 64 bytes, little-endian, one cache line. A pool buffer holds the header
// followed by the payload, so a message travels as one contiguous block:
// shm copies it into a buffer the receiver provided, tcp writes it as is.
//
//   offset  size  field
//        0     4  magic "TOCL" (0x4C434F54 read as a little-endian u32)
//        4     1  version (kVersion: 6)
//        5     1  kind (FrameKind)
//        6     2  flags (kFlagRelayed, kFlagPackedPiece or 0; the other bits
//                 reserved)
//        8     4  tag
//       12     4  length: payload bytes in this frame
//       16     8  source Gid (a thread; a process for handshake frames)
//       24     8  destination Gid (a thread; a process for handshake frames)
//       32     8  seq: per (source thread, destination thread), from 0
//       40     8  offset of this fragment in its message (0 for short messages)
//       48     8  total length of the message (= length for short messages)
//       56     8  reserved (0; the fragment size of a long-message start)
//
// A long message (larger than the short maximum, paper §4.3) is a
// conversation between the sending and the receiving thread:
//   kLongStart  sender -> receiver, in the pair's sequence like a short
//               message: tag, total, fragment size (in `reserved`)
//   kGrant      receiver -> sender: memory is ready, send the fragments
//   kFragment   sender -> receiver, over any network: `length` bytes at
//               `offset` of the message with sequence number `seq`
//   kAck        receiver -> sender, over the network the fragment came by:
//               bytes [offset, offset + total) of message `seq` are placed
//   kAbort      either way: message `seq` is given up (sender out of
//               networks, receiver thread gone)
// Control frames (grant, ack, abort) go from the receiving thread to the
// sending one, so every frame names two threads.
//
// A tcp connection starts with the data plane's handshake
// (security/handshake.h), between the two processes:
//   kHello      connector -> acceptor: the connector's nonce (32 bytes)
//   kAuth       acceptor -> connector: the acceptor's nonce and MAC (64)
//   kProof      connector -> acceptor: the connector's MAC (32)
// then, both ways, the stream's bookkeeping (a connection is one stream of
// frames from the connector, numbered from 0 without a field for it, that
// outlives the connection: subsystem/tcp/README.md):
//   kResume     connector -> acceptor, right after the proof: stream `seq`
//               (the connector's random id for it) goes on with its frame
//               number `offset` (every frame before it was received, or
//               moved to another network)
//   kReceived   acceptor -> connector: stream `seq` has its frames before
//               number `offset` here (cumulative); the first one answers
//               kResume and says where the connector resumes. Also in
//               front of frames on the acceptor's own connection back to
//               the connector (the count rides on reverse traffic)
// Both are header-only frames between the two processes.
// Version 2 brought the handshake, version 3 kProbe (a long send waiting for
// its grant), version 4 kResume and kReceived (nothing sent is lost with a
// connection), version 5 kReceived on reverse traffic, version 6 header
// flags (kFlagPackedPiece, and kFlagRelayed with kMarker: no release came
// between the two, so one version covers both); peers of another version
// are refused at the handshake, naming the version: tcp's hello carries
// it, via's ConnectData version (3) and shm's kSegmentVersion (5) follow
// it, so such peers never exchange a frame.
//
// Flags: kFlagPackedPiece marks a short message or a long-message start as
// a body piece of a packed message (tocl/packed_message.h): it is matched
// only by the runtime's packed reader, never by a receive the application
// posts, so a Recv of the packed message's tag does not take its pieces.
// The flag came with version 6, so a peer older than it never sees one: it
// refuses the hello, and the two processes do not talk at all rather than
// lose a channel to the first packed message.
//
// Multicast (runtime/multicast_service.h): markers and fills. S's thread's
// message to R of another host may be carried by a relay process Q. S's
// process posts a header-only kMarker into the (S, R) pair like a Send: it
// takes the next number n and says "n is a `total` byte message with `tag`
// carried by process `offset` (Q), with nonce `reserved`" (64 random bits
// per call and relay group). The payload reaches R as a *fill* for (S, R,
// n): a kMessage or kLongStart (its kFragments and the long-message
// conversation run in S's place) with kFlagRelayed and the nonce in
// `offset`, from Q or (its fallback) S's own process. Fills name S as
// source, R's answers to Q (kGrant, kAck, a receiver's kAbort and kProbe)
// name S as destination; kFlagRelayed lets a network accept a thread of
// neither end there (SourceFits, DestinationFits; the runtime checks that
// an abort or probe goes the way its tag says). A marker must come from S's
// process; R's pair order (runtime/pair_order.h) delivers a fill only from
// Q or S's process with the marker's tag, size and nonce (a relay carries
// only what S's process announced to it, runtime/multicast_tickets.h; any
// process may still send fills of its own: such a misfit is dropped).
// Any fill that does not fit, from whichever process and for whichever
// number, is dropped and counted, its carrier not blamed
// (its connection and pairs stay); one that came first waits within its
// carrier's fill budget and is judged at the marker. A fill naming a
// runtime's internal thread closes its connection. A relayed fragment of
// no message being received is dropped. Other kinds: no flag.
//
// Nothing from a network is trusted: DecodeHeader checks every field a
// receiver relies on before anything uses it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::wire {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and so is every host we build for");

inline constexpr uint32_t kMagic = 0x4C434F54;  // "TOCL"
inline constexpr uint8_t kVersion = 6;

// Handshake payloads (security::Nonce and security::Mac).
inline constexpr uint32_t kHandshakeNonceBytes = 32;
inline constexpr uint32_t kHandshakeMacBytes = 32;

enum class FrameKind : uint8_t {
  kMessage = 1,  // a short message: the whole payload follows
  kHello = 2,    // handshake, first frame of a tcp connection: source = the connecting process
  kLongStart = 3,
  kGrant = 4,
  kFragment = 5,
  kAck = 6,
  kAbort = 7,
  kAuth = 8,       // handshake: the acceptor's answer to a hello
  kProof = 9,      // handshake: the connector's proof
  kProbe = 10,     // long message: the sender asks what became of its start; the receiver answers
  kResume = 11,    // stream: the connector says which stream and from which frame on
  kReceived = 12,  // stream: the acceptor's cumulative count of frames received
  kMarker = 13,    // multicast: pair number `seq` is a message carried by process `offset`
};

// Header::flags: a fill (see above): a frame of a message whose number a
// marker took, carried on behalf of its source (to its receiver), or a
// receiver's answer about it (to its carrier).
inline constexpr uint16_t kFlagRelayed = 1;

// Header::flags: a body piece of a packed message (see above).
inline constexpr uint16_t kFlagPackedPiece = 0x0002;

// The payload a handshake frame carries (0 for other kinds).
uint32_t HandshakePayloadBytes(FrameKind kind);

// The largest long message (1 TiB): totals and offsets above it are refused.
inline constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;

struct Header {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  FrameKind kind = FrameKind::kMessage;
  uint16_t flags = 0;
  uint32_t tag = 0;
  uint32_t length = 0;
  uint64_t source = 0;
  uint64_t destination = 0;
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  uint64_t reserved = 0;
};
static_assert(sizeof(Header) == 64 && alignof(Header) == 8);
inline constexpr size_t kHeaderBytes = sizeof(Header);

// The headers a sender makes, one function per kind of frame: every field
// set, none left from whatever a buffer held before (a user's buffer is
// sent again, a pool slot is reused). `seq` is the pair's sequence number
// where the frame has one; the send queue (runtime/send_queue.h) sets it
// for short messages and long-message starts when it numbers them.

// A short message of `length` payload bytes.
constexpr Header MessageHeader(Gid from, Gid to, uint32_t tag, uint32_t length, uint64_t seq = 0) {
  return Header{.kind = FrameKind::kMessage,
                .tag = tag,
                .length = length,
                .source = from.raw(),
                .destination = to.raw(),
                .seq = seq,
                .total = length};
}

// A long message held whole in library memory (received, or delivered in
// this process): never on a network; `length` 0, `total` its size.
constexpr Header WholeMessageHeader(Gid from, Gid to, uint32_t tag, uint64_t total) {
  return Header{.kind = FrameKind::kMessage,
                .tag = tag,
                .source = from.raw(),
                .destination = to.raw(),
                .total = total};
}

// The start of a `total` byte long message cut into `fragment_bytes` pieces.
constexpr Header LongStartHeader(Gid from, Gid to, uint32_t tag, uint64_t total,
                                 uint64_t fragment_bytes, uint64_t seq = 0) {
  return Header{.kind = FrameKind::kLongStart,
                .tag = tag,
                .source = from.raw(),
                .destination = to.raw(),
                .seq = seq,
                .total = total,
                .reserved = fragment_bytes};
}

// `length` bytes at `offset` of long message `seq` (`total` bytes).
constexpr Header FragmentHeader(Gid from, Gid to, uint32_t tag, uint64_t seq, uint64_t offset,
                                uint32_t length, uint64_t total) {
  return Header{.kind = FrameKind::kFragment,
                .tag = tag,
                .length = length,
                .source = from.raw(),
                .destination = to.raw(),
                .seq = seq,
                .offset = offset,
                .total = total};
}

// A header-only control frame of a long message (kGrant, kAck, kAbort,
// kProbe) about message `seq`; an acknowledgement names the bytes
// [offset, offset + total), an abort or probe says who in `tag`.
constexpr Header ControlHeader(FrameKind kind, Gid from, Gid to, uint64_t seq, uint32_t tag = 0,
                               uint64_t offset = 0, uint64_t total = 0) {
  return Header{.kind = kind,
                .tag = tag,
                .source = from.raw(),
                .destination = to.raw(),
                .seq = seq,
                .offset = offset,
                .total = total};
}

// A handshake frame (kHello, kAuth, kProof) between two processes; its
// payload (HandshakePayloadBytes) follows.
inline Header HandshakeHeader(FrameKind kind, Gid from_process, Gid to_process) {
  return Header{.kind = kind,
                .length = HandshakePayloadBytes(kind),
                .source = from_process.raw(),
                .destination = to_process.raw()};
}

// A stream's bookkeeping frame (kResume, kReceived) about stream `stream`
// at frame number `frame`, between two processes.
constexpr Header StreamHeader(FrameKind kind, Gid from_process, Gid to_process, uint64_t stream,
                              uint64_t frame) {
  return Header{.kind = kind,
                .source = from_process.raw(),
                .destination = to_process.raw(),
                .seq = stream,
                .offset = frame};
}

// A marker (see above): message `seq` of the (from, to) pair, `total` bytes
// with tag `tag`, carried by `carrier` (the caller sets the nonce).
constexpr Header MarkerHeader(Gid from, Gid to, uint32_t tag, uint64_t total, Gid carrier,
                              uint64_t seq = 0) {
  return Header{.kind = FrameKind::kMarker,
                .tag = tag,
                .source = from.raw(),
                .destination = to.raw(),
                .seq = seq,
                .offset = carrier.raw(),
                .total = total};
}

inline bool Relayed(const Header& header) {
  return (header.flags & kFlagRelayed) != 0;
}

// The kinds a fill's carrier sends toward a receiver in its source's name,
// and those a receiver answers it with (abort, probe: both; by tag, runtime).
constexpr bool RelayedTowardReceiver(FrameKind kind) {
  return kind == FrameKind::kMessage || kind == FrameKind::kLongStart ||
         kind == FrameKind::kFragment || kind == FrameKind::kAbort || kind == FrameKind::kProbe;
}
constexpr bool RelayedTowardSender(FrameKind kind) {
  return kind == FrameKind::kGrant || kind == FrameKind::kAck || kind == FrameKind::kAbort ||
         kind == FrameKind::kProbe;
}

// Whether a frame that came on a connection (shm channel, VI) from
// `peer_process` may name its source: a thread of that process, or
// anyone's for a fill toward a message's receiver (its pair order checks
// the carrier). Inline, the process compare first: every received frame
// is checked.
inline bool SourceFits(const Header& header, Gid peer_process) {
  return Gid::FromRaw(header.source).process() == peer_process ||
         (Relayed(header) && RelayedTowardReceiver(header.kind));
}
// Whether a frame that came to `self_process` may name its destination: a
// thread of this process, or anyone's for a receiver's answer to a fill's
// carrier.
inline bool DestinationFits(const Header& header, Gid self_process) {
  return Gid::FromRaw(header.destination).process() == self_process ||
         (Relayed(header) && RelayedTowardSender(header.kind));
}

// What a receiver accepts: payloads up to `max_payload` bytes.
struct Limits {
  uint32_t max_payload = 0;
};

// Reads and checks a header from the first kHeaderBytes of `bytes`.
// InvalidArgument (with what was wrong) for: too few bytes, bad magic,
// unknown version or kind, flags a kind does not take (kFlagPackedPiece:
// kMessage, kLongStart; kFlagRelayed: the kinds above; never both), nonzero
// reserved, a length over the limit,
// offset/total that do not fit the kind (see above), source or destination
// that are not thread ids (process ids for handshake frames), a handshake
// frame whose length is not its payload's.
Result<Header> DecodeHeader(std::span<const std::byte> bytes, const Limits& limits);

// Checks an already-placed header in place (the shm path: the header sits in
// a receive buffer). Same rules as DecodeHeader.
Status ValidateHeader(const Header& header, const Limits& limits);

inline void EncodeHeader(const Header& header, std::byte* out) {
  std::memcpy(out, &header, sizeof(Header));
}

}  // namespace tocl::wire
