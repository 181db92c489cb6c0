#include "runtime/packed_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "wire/frame.h"

namespace tocl::runtime::packed {

size_t ValueSize(PackedType type) {
  switch (type) {
    case PackedType::kBool:
    case PackedType::kChar:
    case PackedType::kI8:
    case PackedType::kU8:
      return 1;
    case PackedType::kI16:
    case PackedType::kU16:
      return 2;
    case PackedType::kI32:
    case PackedType::kU32:
    case PackedType::kF32:
      return 4;
    case PackedType::kI64:
    case PackedType::kU64:
    case PackedType::kF64:
      return 8;
    case PackedType::kBytes:
      return 0;
  }
  return 0;
}

bool IsValueType(uint8_t code) {
  return code >= static_cast<uint8_t>(PackedType::kBool) &&
         code <= static_cast<uint8_t>(PackedType::kF64);
}

PackedType Item::type() const {
  return is_value() ? static_cast<PackedType>(code) : PackedType::kBytes;
}

// --- building -------------------------------------------------------------------

void SegmentBuilder::Start(std::span<std::byte> memory, uint32_t magic, uint32_t number) {
  memory_ = memory;
  size_ = 0;
  Put(&magic, 4);
  Put(&number, 4);
}

void SegmentBuilder::Put(const void* data, size_t bytes) {
  if (bytes != 0) std::memcpy(memory_.data() + size_, data, bytes);
  size_ += bytes;
}

bool SegmentBuilder::AddValue(PackedType type, const void* data, size_t size) {
  if (!Fits(2 + size)) return false;
  const auto code = static_cast<uint8_t>(type);
  const auto size8 = static_cast<uint8_t>(size);
  Put(&code, 1);
  Put(&size8, 1);
  Put(data, size);
  return true;
}

bool SegmentBuilder::AddInline(std::span<const std::byte> bytes) {
  if (!Fits(5 + bytes.size())) return false;
  const auto code = static_cast<uint8_t>(Code::kInline);
  const auto length = static_cast<uint32_t>(bytes.size());
  Put(&code, 1);
  Put(&length, 4);
  Put(bytes.data(), bytes.size());
  return true;
}

void SegmentBuilder::EndWithReference(uint64_t length) {
  const auto code = static_cast<uint8_t>(Code::kReference);
  Put(&code, 1);
  Put(&length, 8);
}

void SegmentBuilder::EndWith(Code terminator) {
  const auto code = static_cast<uint8_t>(terminator);
  Put(&code, 1);
}

void SegmentBuilder::EndWithAbort(std::string_view reason, size_t below) {
  const size_t room = memory_.size() - size_ - 3;
  const size_t shorter = below > size_ + 4 ? below - size_ - 4 : 0;
  reason = reason.substr(0, std::min({reason.size(), kMaxAbortReason, room, shorter}));
  const auto code = static_cast<uint8_t>(Code::kAbort);
  const auto length = static_cast<uint16_t>(reason.size());
  Put(&code, 1);
  Put(&length, 2);
  Put(reason.data(), reason.size());
}

size_t SegmentBuilder::InlineRoom(size_t capacity) {
  const size_t overhead = kSegmentHeaderBytes + 5 + kTerminatorRoom;
  return capacity > overhead ? capacity - overhead : 0;
}

// --- parsing ----------------------------------------------------------------------

namespace {

// A cursor over untrusted bytes: every read checks the bytes are there.
class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> bytes) : bytes_(bytes) {}
  size_t offset() const { return offset_; }
  size_t left() const { return bytes_.size() - offset_; }
  template <typename T>
  bool Read(T& out) {
    if (left() < sizeof(T)) return false;
    std::memcpy(&out, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }
  bool Take(uint64_t length, std::span<const std::byte>& out) {
    if (left() < length) return false;
    out = bytes_.subspan(offset_, static_cast<size_t>(length));
    offset_ += static_cast<size_t>(length);
    return true;
  }

 private:
  std::span<const std::byte> bytes_;
  size_t offset_ = 0;
};

Status Malformed(const Cursor& cursor, std::string_view what) {
  return DataLoss(fmt::format("a malformed packed segment: {} at byte {}", what, cursor.offset()));
}

}  // namespace

Result<Segment> ParseSegment(std::span<const std::byte> bytes) {
  Cursor cursor(bytes);
  Segment segment;
  if (!cursor.Read(segment.magic) || !cursor.Read(segment.number)) {
    return DataLoss(fmt::format("not a packed message ({} bytes, shorter than a segment header)",
                                bytes.size()));
  }
  if (segment.magic != kHeadMagic && segment.magic != kSegmentMagic) {
    return DataLoss(fmt::format("not a packed message (magic {:#010x})", segment.magic));
  }
  for (;;) {
    uint8_t code = 0;
    if (!cursor.Read(code)) return Malformed(cursor, "no terminator");
    Item item;
    item.code = static_cast<Code>(code);
    if (IsValueType(code)) {
      uint8_t size = 0;
      if (!cursor.Read(size)) return Malformed(cursor, "a value without its size");
      const size_t expected = ValueSize(static_cast<PackedType>(code));
      if (size != expected) {
        return Malformed(
            cursor, fmt::format("a {} of {} bytes (it has {})",
                                PackedTypeName(static_cast<PackedType>(code)), size, expected));
      }
      item.length = size;
      if (!cursor.Take(size, item.data)) return Malformed(cursor, "a value cut short");
      // Any other byte copied into a bool is undefined behaviour.
      if (item.code == static_cast<Code>(PackedType::kBool) &&
          std::to_integer<uint8_t>(item.data[0]) > 1) {
        return Malformed(cursor,
                         fmt::format("a bool of value {}", std::to_integer<uint8_t>(item.data[0])));
      }
      segment.items.push_back(item);
      continue;
    }
    switch (item.code) {
      case Code::kInline: {
        uint32_t length = 0;
        if (!cursor.Read(length) || !cursor.Take(length, item.data)) {
          return Malformed(cursor, "a byte range past the end of the segment");
        }
        item.length = length;
        segment.items.push_back(item);
        continue;
      }
      case Code::kReference:
        if (!cursor.Read(item.length)) return Malformed(cursor, "a reference without its length");
        // No message is longer; the reader sizes memory from this length.
        if (item.length > wire::kMaxMessageBytes) {
          return Malformed(cursor, fmt::format("a reference of {} bytes (at most {})", item.length,
                                               wire::kMaxMessageBytes));
        }
        break;
      case Code::kContinue:
      case Code::kEnd:
        break;
      case Code::kAbort: {
        uint16_t length = 0;
        if (!cursor.Read(length) || !cursor.Take(length, item.data)) {
          return Malformed(cursor, "an abort reason past the end of the segment");
        }
        item.length = length;
        break;
      }
      default:
        return Malformed(cursor, fmt::format("unknown code {:#04x}", code));
    }
    segment.items.push_back(item);
    if (cursor.left() != 0) {
      return Malformed(cursor, fmt::format("{} bytes after the terminator", cursor.left()));
    }
    return segment;
  }
}

std::optional<std::string> AbortReason(std::span<const std::byte> bytes, uint32_t number) {
  if (bytes.size() > kMaxAbortSegment) return std::nullopt;
  Result<Segment> segment = ParseSegment(bytes);
  if (!segment.ok() || segment->magic != kSegmentMagic || segment->number != number ||
      segment->items.size() != 1 || segment->items[0].code != Code::kAbort) {
    return std::nullopt;
  }
  const std::span<const std::byte> reason = segment->items[0].data;
  return std::string(reinterpret_cast<const char*>(reason.data()), reason.size());
}

}  // namespace tocl::runtime::packed
