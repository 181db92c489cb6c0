// The 64-byte wire header: what DecodeHeader accepts, and that every field a
// receiver relies on is checked, with a message that names the problem.
#include "wire/frame.h"

#include <array>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::wire {
namespace {

constexpr Limits kLimits{.max_payload = 65536 - 64};
constexpr Gid kSource = Gid::Thread(3, 17, 5);
constexpr Gid kDestination = Gid::Thread(4, 2, 1);

Header ValidMessage() {
  Header header;
  header.kind = FrameKind::kMessage;
  header.tag = 42;
  header.length = 1000;
  header.source = kSource.raw();
  header.destination = kDestination.raw();
  header.seq = 77;
  header.offset = 0;
  header.total = 1000;
  return header;
}

Header ValidHello() {
  Header header;
  header.kind = FrameKind::kHello;
  header.length = kHandshakeNonceBytes;
  header.source = Gid::Process(3, 17).raw();
  header.destination = Gid::Process(4, 2).raw();
  return header;
}

std::array<std::byte, kHeaderBytes> Encode(const Header& header) {
  std::array<std::byte, kHeaderBytes> bytes{};
  EncodeHeader(header, bytes.data());
  return bytes;
}

// Decodes `header` (encoded), expecting InvalidArgument whose message
// contains `words`; ValidateHeader must agree.
void CheckRejected(const Header& header, const std::string& words) {
  auto bytes = Encode(header);
  Result<Header> decoded = DecodeHeader(bytes, kLimits);
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(decoded.status().message(), Catch::Matchers::Contains(words));
  Status validated = ValidateHeader(header, kLimits);
  CHECK(validated == decoded.status());
}

TEST_CASE("a valid message header round-trips through encode and decode", "[wire]") {
  const Header header = ValidMessage();
  auto bytes = Encode(header);
  Result<Header> decoded = DecodeHeader(bytes, kLimits);
  REQUIRE(decoded.ok());
  CHECK(std::memcmp(&*decoded, &header, sizeof(Header)) == 0);
  CHECK(decoded->magic == kMagic);
  CHECK(decoded->version == kVersion);
  CHECK(decoded->kind == FrameKind::kMessage);
  CHECK(decoded->tag == 42);
  CHECK(decoded->length == 1000);
  CHECK(Gid::FromRaw(decoded->source) == kSource);
  CHECK(Gid::FromRaw(decoded->destination) == kDestination);
  CHECK(decoded->seq == 77);
  CHECK(decoded->total == 1000);
  CHECK(ValidateHeader(header, kLimits).ok());
}

TEST_CASE("every header a sender makes passes the receiver's checks, with its fields", "[wire]") {
  const Header message = MessageHeader(kSource, kDestination, 42, 1000, 77);
  CHECK(DecodeHeader(Encode(message), kLimits).ok());
  CHECK(message.total == 1000);
  CHECK(message.seq == 77);

  const Header start = LongStartHeader(kSource, kDestination, 42, uint64_t{1} << 30, 65472, 3);
  CHECK(ValidateHeader(start, kLimits).ok());
  CHECK(start.kind == FrameKind::kLongStart);
  CHECK(start.reserved == 65472);
  CHECK(start.length == 0);

  const Header fragment = FragmentHeader(kSource, kDestination, 42, 3, 65472, 65472, 1 << 20);
  CHECK(ValidateHeader(fragment, kLimits).ok());
  CHECK(fragment.offset == 65472);

  for (FrameKind kind : {FrameKind::kGrant, FrameKind::kAbort, FrameKind::kProbe}) {
    CHECK(ValidateHeader(ControlHeader(kind, kDestination, kSource, 3, 1), kLimits).ok());
  }
  const Header ack = ControlHeader(FrameKind::kAck, kDestination, kSource, 3, 0, 65472, 65472);
  CHECK(ValidateHeader(ack, kLimits).ok());

  for (FrameKind kind : {FrameKind::kHello, FrameKind::kAuth, FrameKind::kProof}) {
    const Header handshake = HandshakeHeader(kind, kSource.process(), kDestination.process());
    CHECK(ValidateHeader(handshake, kLimits).ok());
    CHECK(handshake.length == HandshakePayloadBytes(kind));
  }
}

TEST_CASE("the wire layout is little-endian with the fields at their documented offsets",
          "[wire]") {
  Header header = ValidMessage();
  header.seq = 0x0102030405060708ull;
  auto bytes = Encode(header);
  CHECK(std::to_integer<char>(bytes[0]) == 'T');
  CHECK(std::to_integer<char>(bytes[1]) == 'O');
  CHECK(std::to_integer<char>(bytes[2]) == 'C');
  CHECK(std::to_integer<char>(bytes[3]) == 'L');
  CHECK(std::to_integer<int>(bytes[4]) == kVersion);
  CHECK(std::to_integer<int>(bytes[5]) == static_cast<int>(FrameKind::kMessage));
  CHECK(std::to_integer<int>(bytes[8]) == 42);  // tag
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, 4);
  CHECK(length == 1000);
  uint64_t source = 0;
  std::memcpy(&source, bytes.data() + 16, 8);
  CHECK(source == kSource.raw());
  CHECK(std::to_integer<int>(bytes[32]) == 0x08);  // seq, low byte first
  CHECK(std::to_integer<int>(bytes[39]) == 0x01);
}

TEST_CASE("a header with a payload of exactly the limit is accepted, and an empty one too",
          "[wire]") {
  Header header = ValidMessage();
  header.length = kLimits.max_payload;
  header.total = kLimits.max_payload;
  CHECK(DecodeHeader(Encode(header), kLimits).ok());
  header.length = 0;
  header.total = 0;
  CHECK(DecodeHeader(Encode(header), kLimits).ok());
}

TEST_CASE("a valid hello header round-trips", "[wire]") {
  const Header header = ValidHello();
  Result<Header> decoded = DecodeHeader(Encode(header), kLimits);
  REQUIRE(decoded.ok());
  CHECK(decoded->kind == FrameKind::kHello);
  CHECK(Gid::FromRaw(decoded->source) == Gid::Process(3, 17));
}

TEST_CASE("decoding reads only the first 64 bytes of a longer input", "[wire]") {
  std::vector<std::byte> bytes(kHeaderBytes + 100, std::byte{0xAB});
  EncodeHeader(ValidMessage(), bytes.data());
  Result<Header> decoded = DecodeHeader(bytes, kLimits);
  REQUIRE(decoded.ok());
  CHECK(decoded->length == 1000);
}

TEST_CASE("a header with a bad magic is rejected naming the magic", "[wire]") {
  Header header = ValidMessage();
  header.magic = 0x12345678;
  CheckRejected(header, "bad magic 0x12345678");
}

TEST_CASE("a header of another wire version is rejected naming the version", "[wire]") {
  Header header = ValidMessage();
  for (uint8_t version : {uint8_t{0}, uint8_t{1}, uint8_t{2}, uint8_t{3}, uint8_t{4}, uint8_t{5},
                          uint8_t{7}, uint8_t{255}}) {
    INFO("version " << int{version});
    header.version = version;
    CheckRejected(header, "unsupported wire version " + std::to_string(version));
  }
}

TEST_CASE("a header of an unknown kind is rejected naming the kind", "[wire]") {
  Header header = ValidMessage();
  for (uint8_t kind : {uint8_t{0}, uint8_t{14}, uint8_t{200}}) {
    INFO("kind " << int{kind});
    header.kind = static_cast<FrameKind>(kind);
    CheckRejected(header, "unknown frame kind " + std::to_string(kind));
  }
}

TEST_CASE("a header with flags or reserved bits set is rejected", "[wire]") {
  Header header = ValidMessage();
  header.flags = 4;
  CheckRejected(header, "header flags 0x0004 on a frame of kind 1");
  header.flags = 0x8000;
  CheckRejected(header, "header flags 0x8000 on a frame of kind 1");
  header.flags = kFlagRelayed | 0x8000;
  CheckRejected(header, "header flags 0x8001 on a frame of kind 1");
  header = ValidHello();
  header.flags = kFlagRelayed;  // a handshake is never relayed
  CheckRejected(header, "header flags 0x0001 on a frame of kind 2");
  header = ValidMessage();
  header.reserved = uint64_t{1} << 63;
  CheckRejected(header, "reserved header bits are set");
  header = ValidHello();
  header.reserved = 1;
  CheckRejected(header, "reserved header bits are set");
}

TEST_CASE("a message longer than the limit is rejected naming both sizes", "[wire]") {
  Header header = ValidMessage();
  header.length = kLimits.max_payload + 1;
  header.total = header.length;
  CheckRejected(header, "payload of 65473 bytes exceeds the limit of 65472");
  header.length = 0xFFFF'FFFFu;
  header.total = header.length;
  CheckRejected(header, "payload of 4294967295 bytes exceeds the limit");
}

TEST_CASE("with a zero limit only empty messages are accepted", "[wire]") {
  Header header = ValidMessage();
  header.length = 0;
  header.total = 0;
  CHECK(DecodeHeader(Encode(header), Limits{}).ok());
  header.length = 1;
  header.total = 1;
  CHECK(DecodeHeader(Encode(header), Limits{}).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a truncated header (0 to 63 bytes) is rejected naming how many bytes came", "[wire]") {
  auto bytes = Encode(ValidMessage());
  for (size_t n = 0; n < kHeaderBytes; ++n) {
    INFO(n << " bytes");
    Result<Header> decoded = DecodeHeader(std::span<const std::byte>(bytes.data(), n), kLimits);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.status().code() == StatusCode::kInvalidArgument);
    CHECK(decoded.status().message() == "truncated header: " + std::to_string(n) + " of 64 bytes");
  }
}

TEST_CASE("a message whose offset or total does not describe a short message is rejected",
          "[wire]") {
  Header header = ValidMessage();
  header.offset = 64;
  CheckRejected(header, "a short message with a fragment offset or total");
  header = ValidMessage();
  header.total = header.length + 1;
  CheckRejected(header, "a short message with a fragment offset or total");
  header = ValidMessage();
  header.total = header.length - 1;
  CheckRejected(header, "a short message with a fragment offset or total");
  header = ValidMessage();
  header.total = 0;
  CheckRejected(header, "a short message with a fragment offset or total");
}

TEST_CASE("a message whose source or destination is not a thread id is rejected naming both",
          "[wire]") {
  struct Case {
    const char* what;
    uint64_t source;
    uint64_t destination;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"null source", 0, kDestination.raw(), "source null or destination h4.p2.t1"},
      {"process source", Gid::Process(3, 17).raw(), kDestination.raw(),
       "source h3.p17 or destination h4.p2.t1 is not a thread"},
      {"host source", Gid::Host(3).raw(), kDestination.raw(), "source h3 or destination"},
      {"process destination", kSource.raw(), Gid::Process(4, 2).raw(),
       "source h3.p17.t5 or destination h4.p2 is not a thread"},
      {"null destination", kSource.raw(), 0, "destination null is not a thread"},
      {"thread without a process", kSource.raw(), (uint64_t{4} << 48) | 9, "invalid("},
      {"thread without a host", Gid::Thread(0, 1, 1).raw(), kDestination.raw(), "invalid("},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Header header = ValidMessage();
    header.source = c.source;
    header.destination = c.destination;
    CheckRejected(header, c.words);
  }
}

TEST_CASE("a handshake frame of another length, or with a tag, offset or total is rejected",
          "[wire]") {
  Header header = ValidHello();
  header.length = 1;
  CheckRejected(header, "a hello frame of 1 bytes (it carries 32)");
  header.length = 0;
  CheckRejected(header, "a hello frame of 0 bytes (it carries 32)");
  header = ValidHello();
  header.total = 8;
  CheckRejected(header, "a hello frame of 32 bytes (it carries 32), or with a tag, offset");
  header = ValidHello();
  header.offset = 8;
  CheckRejected(header, "or with a tag, offset or total");
  header = ValidHello();
  header.tag = 7;
  CheckRejected(header, "or with a tag, offset or total");
  header = ValidHello();
  header.kind = FrameKind::kAuth;
  CheckRejected(header, "a handshake answer frame of 32 bytes (it carries 64)");
  header.length = kHandshakeNonceBytes + kHandshakeMacBytes;
  CHECK(DecodeHeader(Encode(header), kLimits).ok());
  header.kind = FrameKind::kProof;
  CheckRejected(header, "a handshake proof frame of 64 bytes (it carries 32)");
  header.length = kHandshakeMacBytes;
  CHECK(DecodeHeader(Encode(header), kLimits).ok());
  header.destination = Gid::Thread(4, 2, 1).raw();
  CheckRejected(header, "handshake proof from h3.p17 to h4.p2.t1: both must be processes");
}

TEST_CASE("a hello frame from something other than a process is rejected naming it", "[wire]") {
  Header header = ValidHello();
  header.source = Gid::Thread(3, 17, 5).raw();
  CheckRejected(header, "hello from h3.p17.t5 to h4.p2: both must be processes");
  header.source = Gid::Host(3).raw();
  CheckRejected(header, "hello from h3 to h4.p2: both must be processes");
  header.source = 0;
  CheckRejected(header, "hello from null to h4.p2: both must be processes");
}

TEST_CASE("a packed piece's flag is accepted on messages and long starts only", "[wire][packed]") {
  Header header = ValidMessage();
  header.flags = kFlagPackedPiece;
  CHECK(ValidateHeader(header, kLimits).ok());
  Header start = LongStartHeader(kSource, kDestination, 42, uint64_t{1} << 30, 65472, 3);
  start.flags = kFlagPackedPiece;
  CHECK(ValidateHeader(start, kLimits).ok());
  Header fragment = FragmentHeader(kSource, kDestination, 42, 3, 0, 100, 1000);
  fragment.flags = kFlagPackedPiece;
  CheckRejected(fragment, "header flags 0x0002 on a frame of kind 5");
  header.flags = kFlagPackedPiece | kFlagRelayed;  // a relay never carries a piece
  CheckRejected(header, "header flags 0x0003 on a frame of kind 1");
}

TEST_CASE("the first problem found is the one reported: magic before everything else", "[wire]") {
  Header header = ValidMessage();
  header.magic = 0;
  header.version = 9;
  header.flags = 1;
  header.length = 0xFFFF'FFFFu;
  CheckRejected(header, "bad magic");
}

}  // namespace
}  // namespace tocl::wire

namespace tocl::wire {
namespace {

TEST_CASE("long-message frames: starts, fragments, acks and control frames are checked", "[wire]") {
  const Header message = ValidMessage();
  Header start = message;
  start.kind = FrameKind::kLongStart;
  start.length = 0;
  start.total = uint64_t{1} << 32;  // over 4 GiB
  start.reserved = kLimits.max_payload;
  CHECK(ValidateHeader(start, kLimits).ok());
  Header bad = start;
  bad.total = kMaxMessageBytes + 1;
  CheckRejected(bad, "a long message of");
  bad = start;
  bad.reserved = kLimits.max_payload + 1;
  CheckRejected(bad, "a fragment size of");
  bad = start;
  bad.length = 10;
  CheckRejected(bad, "a long-message start with a payload");

  Header fragment = message;
  fragment.kind = FrameKind::kFragment;
  fragment.length = 100;
  fragment.total = 1000;
  fragment.offset = 900;
  CHECK(ValidateHeader(fragment, kLimits).ok());
  bad = fragment;
  bad.offset = 901;  // past the end
  CheckRejected(bad, "a fragment of 100 bytes at 901");
  bad = fragment;
  bad.offset = ~uint64_t{0} - 50;  // would wrap
  CheckRejected(bad, "a fragment of");
  bad = fragment;
  bad.length = 0;
  CheckRejected(bad, "a fragment of 0 bytes");
  bad = fragment;
  bad.reserved = 1;
  CheckRejected(bad, "reserved header bits");

  Header ack = message;
  ack.kind = FrameKind::kAck;
  ack.length = 0;
  ack.offset = 65536;
  ack.total = 65536;
  CHECK(ValidateHeader(ack, kLimits).ok());
  bad = ack;
  bad.offset = kMaxMessageBytes;
  CheckRejected(bad, "an acknowledgement of");
  bad = ack;
  bad.total = 0;
  CheckRejected(bad, "an acknowledgement of 0 bytes");

  for (FrameKind kind : {FrameKind::kGrant, FrameKind::kAbort, FrameKind::kProbe}) {
    Header control = message;
    control.kind = kind;
    control.length = 0;
    control.total = 0;
    CHECK(ValidateHeader(control, kLimits).ok());
    control.total = 5;
    CheckRejected(control, "a control frame with a payload");
    control.total = 0;
    control.source = Gid::Process(1, 2).raw();
    CheckRejected(control, "is not a thread");
  }
}

}  // namespace
}  // namespace tocl::wire

namespace tocl::wire {
namespace {

TEST_CASE(
    "a relayed frame may name a thread of neither end of its connection, in its direction only",
    "[wire][multicast]") {
  const Gid sender_process = Gid::Process(1, 2);
  const Gid relay_process = Gid::Process(2, 3);
  const Gid receiver_process = Gid::Process(2, 4);
  // The relay's frame toward the receiver names the multicast's sender.
  Header toward = MessageHeader(Gid::Thread(sender_process, 1), Gid::Thread(receiver_process, 1), 7,
                                0, /*seq=*/5);
  CHECK_FALSE(SourceFits(toward, relay_process));
  toward.flags = kFlagRelayed;
  CHECK(ValidateHeader(toward, kLimits).ok());
  CHECK(SourceFits(toward, relay_process));
  CHECK(DestinationFits(toward, receiver_process));
  CHECK_FALSE(DestinationFits(toward, relay_process));  // not for anyone but its receiver

  // The receiver's grant goes to the relay, naming the sender.
  Header grant = ControlHeader(FrameKind::kGrant, Gid::Thread(receiver_process, 1),
                               Gid::Thread(sender_process, 1), 5);
  CHECK_FALSE(DestinationFits(grant, relay_process));
  grant.flags = kFlagRelayed;
  CHECK(ValidateHeader(grant, kLimits).ok());
  CHECK(DestinationFits(grant, relay_process));
  CHECK(SourceFits(grant, receiver_process));
  // A grant claiming a foreign source is refused even when relayed.
  CHECK_FALSE(SourceFits(grant, relay_process));

  // A relayed data frame cannot claim a foreign destination.
  Header fragment = FragmentHeader(Gid::Thread(sender_process, 1), Gid::Thread(receiver_process, 1),
                                   7, 5, 0, 100, 1000);
  fragment.flags = kFlagRelayed;
  CHECK(ValidateHeader(fragment, kLimits).ok());
  CHECK_FALSE(DestinationFits(fragment, relay_process));

  // A fill's nonce is in its offset (a plain message's must be 0), and a
  // relayed long start's too.
  toward.offset = 0x1234;
  CHECK(ValidateHeader(toward, kLimits).ok());
  toward.flags = 0;
  CheckRejected(toward, "a short message with a fragment offset or total");
  Header start = LongStartHeader(Gid::Thread(sender_process, 1), Gid::Thread(receiver_process, 1),
                                 7, 1000, 100, 5);
  start.offset = 0x1234;
  CheckRejected(start, "a long-message start with a payload or offset");
  start.flags = kFlagRelayed;
  CHECK(ValidateHeader(start, kLimits).ok());
}

TEST_CASE("a marker names its carrier process and the size of its message, and nothing else",
          "[wire][multicast]") {
  const Gid sender = Gid::Thread(Gid::Process(1, 2), 1);
  const Gid receiver = Gid::Thread(Gid::Process(2, 4), 1);
  const Gid relay = Gid::Process(2, 3);
  Header marker = MarkerHeader(sender, receiver, 7, uint64_t{1} << 20, relay, 5);
  CHECK(ValidateHeader(marker, kLimits).ok());
  CHECK(Gid::FromRaw(marker.offset) == relay);
  marker.reserved = 99;  // the call's nonce
  CHECK(ValidateHeader(marker, kLimits).ok());
  // It comes from the sender's own process, never from a relay.
  CHECK(SourceFits(marker, sender.process()));
  CHECK_FALSE(SourceFits(marker, relay));
  Header bad = marker;
  bad.flags = kFlagRelayed;
  CheckRejected(bad, "header flags 0x0001 on a frame of kind 13");
  bad = marker;
  bad.offset = receiver.raw();  // a thread, not a process
  CheckRejected(bad, "a marker of");
  bad = marker;
  bad.total = kMaxMessageBytes + 1;
  CheckRejected(bad, "a marker of");
  bad = marker;
  bad.length = 8;
  CheckRejected(bad, "a marker of");
}

}  // namespace
}  // namespace tocl::wire
