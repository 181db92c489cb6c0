// How a packed message (tocl/packed_message.h) is laid out in its
// segments: the byte table the writer builds and the reader checks. Pure
// functions over memory, no runtime: unit-tested alone
// (tests/unit/runtime/packed_codec_test.cc).
//
// A packed message is a header segment (a plain message with the writer's
// tag), then messages flagged wire::kFlagPackedPiece with the stream's tag:
// further segments, and by-reference byte ranges (raw bytes, no framing).
//
// A segment, little-endian:
//   offset  size  field
//        0     4  magic: kHeadMagic ("TPKH") or kSegmentMagic ("TPKS")
//        4     4  header: the stream id (its pieces' tag);
//                 others: the segment's number (1, 2, ...)
//        8     -  items, the last of which is a terminator
// An item: a code byte, then
//   a value (PackedType kBool..kF64)   u8 size (the type's), the value
//   kInline (PackedType::kBytes)       u32 length, the bytes
//   kReference (terminator)            u64 length: the next piece message
//                                      holds the bytes, then a segment
//   kContinue  (terminator)            the next piece message is a segment
//   kEnd       (terminator)            the message is complete
//   kAbort     (terminator)            u16 length, the reason: given up
// Nothing from a network is trusted: ParseSegment checks every code,
// size and length against the segment's bytes before anything reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/packed_message.h"
#include "tocl/status.h"

namespace tocl::runtime::packed {

inline constexpr uint32_t kHeadMagic = 0x484B5054;     // "TPKH"
inline constexpr uint32_t kSegmentMagic = 0x534B5054;  // "TPKS"
inline constexpr size_t kSegmentHeaderBytes = 8;

enum class Code : uint8_t {
  // 1..12: the value types of PackedType; 13: PackedType::kBytes, inline.
  kInline = static_cast<uint8_t>(PackedType::kBytes),
  kReference = 0x20,
  kContinue = 0x21,
  kEnd = 0x22,
  kAbort = 0x23,
};

// Room a segment keeps for its terminator (the longest: kReference).
inline constexpr size_t kTerminatorRoom = 1 + 8;
// The longest abort reason carried.
inline constexpr size_t kMaxAbortReason = 512;
// The longest abort segment (header, code, u16 length, reason).
inline constexpr size_t kMaxAbortSegment = kSegmentHeaderBytes + 3 + kMaxAbortReason;
// The shortest by-reference range. A writer's abort segment is cut to
// below its by_reference_from, so one that a range's receive takes in the
// range's place is always shorter than the range and told apart.
inline constexpr size_t kMinByReference = 64;

// The size of each value type (0 for kBytes).
size_t ValueSize(PackedType type);
bool IsValueType(uint8_t code);

// Writes one segment into caller memory (a pool buffer's payload).
class SegmentBuilder {
 public:
  // Starts a segment over `memory` (at least kSegmentHeaderBytes +
  // kTerminatorRoom + 1 bytes).
  void Start(std::span<std::byte> memory, uint32_t magic, uint32_t number);
  // False (nothing written) when the item and a terminator do not fit.
  bool AddValue(PackedType type, const void* data, size_t size);
  bool AddInline(std::span<const std::byte> bytes);
  // Terminators (the room for one is always kept).
  void EndWithReference(uint64_t length);
  void EndWith(Code terminator);  // kContinue or kEnd
  // An abort segment's terminator, its reason cut to kMaxAbortReason, to
  // the room left, and so that the segment is shorter than `below`.
  void EndWithAbort(std::string_view reason, size_t below);

  size_t size() const { return size_; }
  // The longest inline byte range an empty segment of `capacity` bytes holds.
  static size_t InlineRoom(size_t capacity);

 private:
  bool Fits(size_t bytes) const { return size_ + bytes + kTerminatorRoom <= memory_.size(); }
  void Put(const void* data, size_t bytes);

  std::span<std::byte> memory_;
  size_t size_ = 0;
};

// One item of a parsed segment.
struct Item {
  Code code = Code::kEnd;           // a value's code is its PackedType's
  uint64_t length = 0;              // value size, inline or reference length
  std::span<const std::byte> data;  // the value or inline bytes; the abort reason
  bool is_value() const { return IsValueType(static_cast<uint8_t>(code)); }
  PackedType type() const;  // kBytes for inline and reference
};

struct Segment {
  uint32_t magic = 0;
  uint32_t number = 0;      // the header's stream id, or the segment's number
  std::vector<Item> items;  // the last is its terminator
};

// The reason of `bytes` when they are abort segment `number`, else nothing
// (a malformed segment included).
std::optional<std::string> AbortReason(std::span<const std::byte> bytes, uint32_t number);

// Checks and splits `bytes` into items. DataLoss naming what is wrong for
// a malformed segment (bad magic, unknown code, a size that is not the
// type's, a length past the end, no terminator, bytes after it).
Result<Segment> ParseSegment(std::span<const std::byte> bytes);

}  // namespace tocl::runtime::packed
