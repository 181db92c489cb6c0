#include "wire/frame.h"

#include <fmt/format.h>

namespace tocl::wire {

namespace {

Status CheckThreads(const Header& header) {
  if (!Gid::FromRaw(header.source).is_thread() || !Gid::FromRaw(header.destination).is_thread()) {
    return InvalidArgument(fmt::format("source {} or destination {} is not a thread",
                                       Gid::FromRaw(header.source).ToString(),
                                       Gid::FromRaw(header.destination).ToString()));
  }
  return Status::Ok();
}

Status CheckLength(const Header& header, const Limits& limits) {
  if (header.length > limits.max_payload) {
    return InvalidArgument(fmt::format("payload of {} bytes exceeds the limit of {}", header.length,
                                       limits.max_payload));
  }
  return Status::Ok();
}

Status CheckControl(const Header& header) {
  if (header.length != 0 || header.offset != 0 || header.total != 0) {
    return InvalidArgument("a control frame with a payload, offset or total");
  }
  return CheckThreads(header);
}

std::string_view HandshakeName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kHello:
      return "hello";
    case FrameKind::kAuth:
      return "handshake answer";
    default:
      return "handshake proof";
  }
}

Status CheckHandshake(const Header& header) {
  const uint32_t payload = HandshakePayloadBytes(header.kind);
  if (header.length != payload || header.offset != 0 || header.total != 0 || header.tag != 0) {
    return InvalidArgument(
        fmt::format("a {} frame of {} bytes (it carries {}), or with a tag, "
                    "offset or total",
                    HandshakeName(header.kind), header.length, payload));
  }
  if (!Gid::FromRaw(header.source).is_process() || !Gid::FromRaw(header.destination).is_process()) {
    return InvalidArgument(fmt::format(
        "{} from {} to {}: both must be processes", HandshakeName(header.kind),
        Gid::FromRaw(header.source).ToString(), Gid::FromRaw(header.destination).ToString()));
  }
  return Status::Ok();
}

Status CheckStream(const Header& header) {
  if (header.length != 0 || header.tag != 0 || header.total != 0 || header.seq == 0) {
    return InvalidArgument("a stream frame with a payload, tag or total, or without a stream id");
  }
  if (!Gid::FromRaw(header.source).is_process() || !Gid::FromRaw(header.destination).is_process()) {
    return InvalidArgument(fmt::format("a stream frame from {} to {}: both must be processes",
                                       Gid::FromRaw(header.source).ToString(),
                                       Gid::FromRaw(header.destination).ToString()));
  }
  return Status::Ok();
}

}  // namespace

uint32_t HandshakePayloadBytes(FrameKind kind) {
  switch (kind) {
    case FrameKind::kHello:
      return kHandshakeNonceBytes;
    case FrameKind::kAuth:
      return kHandshakeNonceBytes + kHandshakeMacBytes;
    case FrameKind::kProof:
      return kHandshakeMacBytes;
    default:
      return 0;
  }
}

Status ValidateHeader(const Header& header, const Limits& limits) {
  if (header.magic != kMagic) {
    return InvalidArgument(fmt::format("bad magic {:#010x}", header.magic));
  }
  if (header.version != kVersion) {
    return InvalidArgument(fmt::format("unsupported wire version {}", header.version));
  }
  if (header.flags != 0) {
    // (Plain frames, nearly all of them, skip this.)
    const bool piece_kind =
        header.kind == FrameKind::kMessage || header.kind == FrameKind::kLongStart;
    const bool relay_kind = RelayedTowardReceiver(header.kind) || RelayedTowardSender(header.kind);
    const uint16_t allowed_flags =
        (piece_kind ? kFlagPackedPiece : 0) | (relay_kind ? kFlagRelayed : 0);
    if ((header.flags & ~allowed_flags) != 0 || header.flags == (kFlagRelayed | kFlagPackedPiece)) {
      // A relay never carries a packed message's piece.
      return InvalidArgument(fmt::format("header flags {:#06x} on a frame of kind {}", header.flags,
                                         static_cast<unsigned>(header.kind)));
    }
  }
  if (header.reserved != 0 && header.kind != FrameKind::kLongStart &&
      header.kind != FrameKind::kMarker) {
    return InvalidArgument("reserved header bits are set");
  }
  // A short message's or long start's offset, unless it is a fill's nonce.
  const uint64_t offset = Relayed(header) ? 0 : header.offset;
  switch (header.kind) {
    case FrameKind::kMessage:
      TOCL_RETURN_IF_ERROR(CheckLength(header, limits));
      if (offset != 0 || header.total != header.length) {
        return InvalidArgument("a short message with a fragment offset or total");
      }
      return CheckThreads(header);
    case FrameKind::kHello:
    case FrameKind::kAuth:
    case FrameKind::kProof:
      return CheckHandshake(header);
    case FrameKind::kLongStart:
      if (header.length != 0 || offset != 0) {
        return InvalidArgument("a long-message start with a payload or offset");
      }
      if (header.total == 0 || header.total > kMaxMessageBytes) {
        return InvalidArgument(fmt::format("a long message of {} bytes", header.total));
      }
      if (header.reserved == 0 || header.reserved > limits.max_payload) {
        return InvalidArgument(fmt::format("a fragment size of {} bytes (limit {})",
                                           header.reserved, limits.max_payload));
      }
      return CheckThreads(header);
    case FrameKind::kFragment:
      TOCL_RETURN_IF_ERROR(CheckLength(header, limits));
      if (header.length == 0 || header.total > kMaxMessageBytes || header.length > header.total ||
          header.offset > header.total - header.length) {
        return InvalidArgument(fmt::format("a fragment of {} bytes at {} of a {} byte message",
                                           header.length, header.offset, header.total));
      }
      return CheckThreads(header);
    case FrameKind::kAck:
      if (header.length != 0 || header.total == 0 || header.offset > kMaxMessageBytes ||
          header.total > kMaxMessageBytes - header.offset) {
        return InvalidArgument(
            fmt::format("an acknowledgement of {} bytes at {}", header.total, header.offset));
      }
      return CheckThreads(header);
    case FrameKind::kGrant:
    case FrameKind::kAbort:
    case FrameKind::kProbe:
      return CheckControl(header);
    case FrameKind::kResume:
    case FrameKind::kReceived:
      return CheckStream(header);
    case FrameKind::kMarker:
      if (header.length != 0 || header.total > kMaxMessageBytes ||
          !Gid::FromRaw(header.offset).is_process()) {
        return InvalidArgument(fmt::format("a marker of {} bytes with a payload, or carrier {}",
                                           header.total, Gid::FromRaw(header.offset).ToString()));
      }
      return CheckThreads(header);
  }
  return InvalidArgument(fmt::format("unknown frame kind {}", static_cast<unsigned>(header.kind)));
}

Result<Header> DecodeHeader(std::span<const std::byte> bytes, const Limits& limits) {
  if (bytes.size() < kHeaderBytes) {
    return InvalidArgument(
        fmt::format("truncated header: {} of {} bytes", bytes.size(), kHeaderBytes));
  }
  Header header;
  std::memcpy(&header, bytes.data(), sizeof(Header));
  TOCL_RETURN_IF_ERROR(ValidateHeader(header, limits));
  return header;
}

}  // namespace tocl::wire
