// The wire header decoder (libtocl/src/wire/frame.h): whatever bytes come
// off a socket, DecodeHeader either rejects them with InvalidArgument or
// returns a header every later step of a receiver can trust, for every
// frame kind.
#include <cstring>

#include "buffers/size_class.h"
#include "check_support.h"
#include "fuzz_checks.h"
#include "tocl/gid.h"
#include "wire/frame.h"

namespace tocl::fuzz {
namespace {

namespace buffers = tocl::buffers;
namespace wire = tocl::wire;

// The receivers the runtime builds: the default nine classes (64 KiB), the
// largest (1 MiB) and the smallest (256 B), as the tcp subsystem sets its
// limits: the largest class minus the header.
constexpr uint32_t kClassCounts[] = {9, buffers::kMaxClasses, 1};

Result<Verdict> CheckOne(std::span<const std::byte> bytes, uint32_t num_classes) {
  const wire::Limits limits{.max_payload = static_cast<uint32_t>(
                                buffers::ClassBytes(num_classes - 1) - wire::kHeaderBytes)};
  Result<wire::Header> decoded = wire::DecodeHeader(bytes, limits);
  if (!decoded.ok()) {
    TOCL_FUZZ_EXPECT(decoded.status().code() == StatusCode::kInvalidArgument, "{}",
                     decoded.status().ToString());
    TOCL_FUZZ_EXPECT(!decoded.status().message().empty());
    if (bytes.size() >= wire::kHeaderBytes) {
      // The in-place check (the shm path) agrees with the decoder.
      wire::Header in_place;
      std::memcpy(&in_place, bytes.data(), sizeof(in_place));
      TOCL_FUZZ_EXPECT(wire::ValidateHeader(in_place, limits) == decoded.status());
    }
    return Verdict::kRejected;
  }
  const wire::Header& header = *decoded;
  TOCL_FUZZ_EXPECT(bytes.size() >= wire::kHeaderBytes);
  TOCL_FUZZ_EXPECT(std::memcmp(&header, bytes.data(), wire::kHeaderBytes) == 0);
  TOCL_FUZZ_EXPECT(wire::ValidateHeader(header, limits).ok());
  TOCL_FUZZ_EXPECT(header.magic == wire::kMagic && header.version == wire::kVersion);
  TOCL_FUZZ_EXPECT(header.flags == 0);
  TOCL_FUZZ_EXPECT(header.reserved == 0 || header.kind == wire::FrameKind::kLongStart);

  const Gid source = Gid::FromRaw(header.source);
  const Gid destination = Gid::FromRaw(header.destination);
  // What the tcp reader does with a frame that carries a payload: pick a
  // buffer class for header + payload and copy both into it.
  const auto fits_a_class = [&](uint64_t payload) {
    if (payload > limits.max_payload) return false;
    const uint32_t class_index = buffers::ClassFor(payload);
    const size_t frame_bytes = wire::kHeaderBytes + payload;
    return class_index < num_classes && frame_bytes <= buffers::ClassBytes(class_index) &&
           (class_index == 0 || frame_bytes > buffers::ClassBytes(class_index - 1));
  };
  // The runtime reads the host and process off a thread id.
  const auto threads = [&] {
    return source.is_thread() && destination.is_thread() && source.process().is_process() &&
           destination.process().is_process();
  };
  switch (header.kind) {
    case wire::FrameKind::kMessage:
      TOCL_FUZZ_EXPECT(fits_a_class(header.length), "length {}", header.length);
      TOCL_FUZZ_EXPECT(header.offset == 0 && header.total == header.length);
      TOCL_FUZZ_EXPECT(threads());
      break;
    case wire::FrameKind::kLongStart:
      // The receiver allocates `total` bytes and asks for fragments of
      // `reserved` bytes, each of which must fit a buffer.
      TOCL_FUZZ_EXPECT(header.length == 0 && header.offset == 0);
      TOCL_FUZZ_EXPECT(header.total > 0 && header.total <= wire::kMaxMessageBytes);
      TOCL_FUZZ_EXPECT(header.reserved > 0 && fits_a_class(header.reserved), "fragment size {}",
                       header.reserved);
      TOCL_FUZZ_EXPECT(threads());
      break;
    case wire::FrameKind::kFragment:
      // Placed at [offset, offset + length) of a message of `total` bytes:
      // no overflow, no write past the end.
      TOCL_FUZZ_EXPECT(header.length > 0 && fits_a_class(header.length), "length {}",
                       header.length);
      TOCL_FUZZ_EXPECT(header.total <= wire::kMaxMessageBytes);
      TOCL_FUZZ_EXPECT(
          header.offset <= header.total && header.length <= header.total - header.offset,
          "{} bytes at {} of {}", header.length, header.offset, header.total);
      TOCL_FUZZ_EXPECT(threads());
      break;
    case wire::FrameKind::kAck:
      TOCL_FUZZ_EXPECT(header.length == 0 && header.total > 0);
      TOCL_FUZZ_EXPECT(header.offset <= wire::kMaxMessageBytes &&
                           header.total <= wire::kMaxMessageBytes - header.offset,
                       "{} bytes at {}", header.total, header.offset);
      TOCL_FUZZ_EXPECT(threads());
      break;
    case wire::FrameKind::kGrant:
    case wire::FrameKind::kAbort:
    case wire::FrameKind::kProbe:
      TOCL_FUZZ_EXPECT(header.length == 0 && header.offset == 0 && header.total == 0);
      TOCL_FUZZ_EXPECT(threads());
      break;
    case wire::FrameKind::kHello:
    case wire::FrameKind::kAuth:
    case wire::FrameKind::kProof: {
      // Nonce, nonce + MAC, MAC: exactly that payload, between processes.
      const uint32_t payload = header.kind == wire::FrameKind::kAuth
                                   ? wire::kHandshakeNonceBytes + wire::kHandshakeMacBytes
                               : header.kind == wire::FrameKind::kHello ? wire::kHandshakeNonceBytes
                                                                        : wire::kHandshakeMacBytes;
      TOCL_FUZZ_EXPECT(header.length == payload, "length {}", header.length);
      TOCL_FUZZ_EXPECT(header.offset == 0 && header.total == 0 && header.tag == 0);
      TOCL_FUZZ_EXPECT(source.is_process() && destination.is_process());
      break;
    }
    case wire::FrameKind::kResume:
    case wire::FrameKind::kReceived:
      // A stream's bookkeeping: header only, between processes, a stream id.
      TOCL_FUZZ_EXPECT(header.length == 0 && header.tag == 0 && header.total == 0);
      TOCL_FUZZ_EXPECT(header.seq != 0);
      TOCL_FUZZ_EXPECT(source.is_process() && destination.is_process());
      break;
    default:
      TOCL_FUZZ_EXPECT(false, "an unknown frame kind {} was accepted",
                       static_cast<int>(header.kind));
  }

  // Encoding what was decoded gives the same bytes, and decodes again.
  std::byte again[wire::kHeaderBytes];
  wire::EncodeHeader(header, again);
  TOCL_FUZZ_EXPECT(std::memcmp(again, bytes.data(), wire::kHeaderBytes) == 0);
  TOCL_FUZZ_EXPECT(wire::DecodeHeader(again, limits).ok());
  return Verdict::kAccepted;
}

}  // namespace

Result<Verdict> CheckFrameDecoder(std::span<const std::byte> input) {
  bool accepted_by_smaller = false;
  Verdict largest = Verdict::kRejected;
  for (uint32_t num_classes : kClassCounts) {
    TOCL_ASSIGN_OR_RETURN(const Verdict verdict, CheckOne(input, num_classes));
    if (num_classes == buffers::kMaxClasses) {
      largest = verdict;
    } else {
      accepted_by_smaller |= verdict == Verdict::kAccepted;
    }
  }
  // Limits only ever shrink what is accepted.
  TOCL_FUZZ_EXPECT(!accepted_by_smaller || largest == Verdict::kAccepted);
  // A zero limit: only empty messages.
  Result<wire::Header> empty_only = wire::DecodeHeader(input, wire::Limits{});
  if (empty_only.ok() && empty_only->kind == wire::FrameKind::kMessage) {
    TOCL_FUZZ_EXPECT(empty_only->length == 0);
  }
  return largest;
}

}  // namespace tocl::fuzz
