// The layout of a packed message's segments (runtime/packed_codec.h): what
// the writer builds parses back item by item, and a malformed segment from
// a network is refused with what is wrong. Also the mailbox side of
// packed pieces: a frame flagged as a piece is matched only by a piece
// selector. No daemon, no network.
#include "runtime/packed_codec.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "mailbox_messages.h"
#include "runtime/mailbox.h"
#include "wire/frame.h"

namespace tocl::runtime::packed {
namespace {

std::vector<std::byte> Bytes(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::string_view Text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

TEST_CASE("a segment of values, an inline range and a reference parses back in order", "[packed]") {
  std::vector<std::byte> memory(256);
  SegmentBuilder builder;
  builder.Start(memory, kHeadMagic, 77);
  const uint32_t rows = 1024;
  const double scale = 0.5;
  const auto text = Bytes("hello");
  REQUIRE(builder.AddValue(PackedType::kU32, &rows, sizeof rows));
  REQUIRE(builder.AddValue(PackedType::kF64, &scale, sizeof scale));
  REQUIRE(builder.AddInline(text));
  builder.EndWithReference(uint64_t{4} << 20);

  auto segment = ParseSegment(std::span(memory).first(builder.size()));
  REQUIRE(segment.ok());
  CHECK(segment->magic == kHeadMagic);
  CHECK(segment->number == 77);
  REQUIRE(segment->items.size() == 4);
  CHECK(segment->items[0].type() == PackedType::kU32);
  uint32_t got_rows = 0;
  std::memcpy(&got_rows, segment->items[0].data.data(), 4);
  CHECK(got_rows == 1024);
  CHECK(segment->items[1].type() == PackedType::kF64);
  CHECK(segment->items[1].length == 8);
  CHECK(segment->items[2].code == Code::kInline);
  CHECK(Text(segment->items[2].data) == "hello");
  CHECK(segment->items[3].code == Code::kReference);
  CHECK(segment->items[3].length == uint64_t{4} << 20);
  CHECK(segment->items[3].type() == PackedType::kBytes);
}

TEST_CASE("a full segment refuses an item but keeps room for its terminator", "[packed]") {
  std::vector<std::byte> memory(kSegmentHeaderBytes + kTerminatorRoom + 10);
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 1);
  const uint64_t value = 7;
  REQUIRE(builder.AddValue(PackedType::kU64, &value, 8));  // 10 bytes
  CHECK_FALSE(builder.AddValue(PackedType::kU8, &value, 1));
  const size_t before = builder.size();
  CHECK_FALSE(builder.AddInline(Bytes("x")));
  CHECK(builder.size() == before);
  builder.EndWithReference(1);  // the longest terminator still fits
  CHECK(builder.size() == memory.size());
  CHECK(ParseSegment(memory).ok());
}

TEST_CASE("an empty segment holds an inline range of InlineRoom bytes and no more", "[packed]") {
  constexpr size_t kCapacity = 1024;
  std::vector<std::byte> memory(kCapacity);
  std::vector<std::byte> range(SegmentBuilder::InlineRoom(kCapacity));
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 1);
  CHECK(builder.AddInline(range));
  builder.Start(memory, kSegmentMagic, 1);
  range.push_back(std::byte{0});
  CHECK_FALSE(builder.AddInline(range));
}

TEST_CASE("an abort segment carries its reason, cut to the limit", "[packed]") {
  std::vector<std::byte> memory(4096);
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 3);
  builder.EndWithAbort(std::string(2000, 'x'), 4096);
  auto segment = ParseSegment(std::span(memory).first(builder.size()));
  REQUIRE(segment.ok());
  REQUIRE(segment->items.size() == 1);
  CHECK(segment->items[0].code == Code::kAbort);
  CHECK(segment->items[0].data.size() == kMaxAbortReason);
  CHECK(AbortReason(std::span(memory).first(builder.size()), 3) ==
        std::string(kMaxAbortReason, 'x'));
}

TEST_CASE("an abort segment is shorter than the by-reference ranges it may stand in for",
          "[packed]") {
  std::vector<std::byte> memory(4096);
  SegmentBuilder builder;
  for (size_t below : {kMinByReference, size_t{100}, size_t{520}, kMaxAbortSegment + 1}) {
    INFO("ranges from " << below << " bytes");
    builder.Start(memory, kSegmentMagic, 2);
    builder.EndWithAbort(std::string(2000, 'y'), below);
    CHECK(builder.size() < below);
    // The reader recognises it in a range's receive, by number.
    auto reason = AbortReason(std::span(memory).first(builder.size()), 2);
    REQUIRE(reason.has_value());
    CHECK(reason->size() == builder.size() - kSegmentHeaderBytes - 3);
    CHECK_FALSE(AbortReason(std::span(memory).first(builder.size()), 3).has_value());
  }
}

TEST_CASE("range bytes that are not an abort segment give no abort reason", "[packed]") {
  std::vector<std::byte> memory(64);
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 1);
  builder.EndWith(Code::kEnd);
  CHECK_FALSE(AbortReason(std::span(memory).first(builder.size()), 1).has_value());
  std::vector<std::byte> data(40, std::byte{0x54});
  CHECK_FALSE(AbortReason(data, 1).has_value());
  CHECK_FALSE(AbortReason({}, 1).has_value());
}

// A well-formed segment's bytes, for corrupting.
std::vector<std::byte> GoodSegment() {
  std::vector<std::byte> memory(64);
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 1);
  const uint16_t value = 5;
  REQUIRE(builder.AddValue(PackedType::kU16, &value, 2));
  REQUIRE(builder.AddInline(Bytes("abc")));
  builder.EndWith(Code::kEnd);
  memory.resize(builder.size());
  return memory;
}

void CheckRefused(std::span<const std::byte> bytes, std::string_view says) {
  auto parsed = ParseSegment(bytes);
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().code() == StatusCode::kDataLoss);
  INFO(parsed.status().message());
  CHECK(parsed.status().message().find(says) != std::string::npos);
}

TEST_CASE("malformed segments are refused with what is wrong", "[packed]") {
  const std::vector<std::byte> good = GoodSegment();
  REQUIRE(ParseSegment(good).ok());
  CheckRefused(std::span(good).first(5), "shorter than a segment header");

  auto bad = good;
  bad[0] = std::byte{'X'};
  CheckRefused(bad, "not a packed message");

  bad = good;
  bad[kSegmentHeaderBytes + 1] = std::byte{4};  // a u16 that says 4 bytes
  CheckRefused(bad, "a u16 of 4 bytes (it has 2)");

  bad = good;
  bad[kSegmentHeaderBytes] = std::byte{0x7F};
  CheckRefused(bad, "unknown code 0x7f");

  bad = good;
  bad[kSegmentHeaderBytes + 5] = std::byte{0xFF};  // the inline range's length
  CheckRefused(bad, "past the end of the segment");

  CheckRefused(std::span(good).first(good.size() - 1), "no terminator");

  bad = good;
  bad.push_back(std::byte{0});
  CheckRefused(bad, "1 bytes after the terminator");
}

TEST_CASE("a reference longer than any message is refused before anything sizes memory from it",
          "[packed]") {
  std::vector<std::byte> memory(64);
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 1);
  builder.EndWithReference(wire::kMaxMessageBytes);
  REQUIRE(ParseSegment(std::span(memory).first(builder.size())).ok());

  builder.Start(memory, kSegmentMagic, 1);
  builder.EndWithReference(wire::kMaxMessageBytes + 1);
  CheckRefused(std::span(memory).first(builder.size()), "a reference of 1099511627777 bytes");

  builder.Start(memory, kSegmentMagic, 1);
  builder.EndWithReference(uint64_t{1} << 63);  // would throw in a resize
  CheckRefused(std::span(memory).first(builder.size()), "a reference of 9223372036854775808");
}

TEST_CASE("a bool whose byte is neither 0 nor 1 is refused", "[packed]") {
  std::vector<std::byte> memory(64);
  SegmentBuilder builder;
  builder.Start(memory, kSegmentMagic, 1);
  const bool yes = true;
  REQUIRE(builder.AddValue(PackedType::kBool, &yes, 1));
  builder.EndWith(Code::kEnd);
  memory.resize(builder.size());
  const size_t value_at = kSegmentHeaderBytes + 2;  // after the code and size bytes
  REQUIRE(memory[value_at] == std::byte{1});
  REQUIRE(ParseSegment(memory).ok());
  memory[value_at] = std::byte{0};
  REQUIRE(ParseSegment(memory).ok());

  memory[value_at] = std::byte{2};
  CheckRefused(memory, "a bool of value 2");
  memory[value_at] = std::byte{0xFF};
  CheckRefused(memory, "a bool of value 255");
}

TEST_CASE("value types have the sizes of their C++ types", "[packed]") {
  CHECK(PackedTypeOf<bool>() == PackedType::kBool);
  CHECK(PackedTypeOf<char>() == PackedType::kChar);
  CHECK(PackedTypeOf<signed char>() == PackedType::kI8);
  CHECK(PackedTypeOf<uint16_t>() == PackedType::kU16);
  CHECK(PackedTypeOf<int>() == PackedType::kI32);
  CHECK(PackedTypeOf<long>() == PackedType::kI64);
  CHECK(PackedTypeOf<unsigned long long>() == PackedType::kU64);
  CHECK(PackedTypeOf<float>() == PackedType::kF32);
  enum class Color : uint8_t { kRed };
  CHECK(PackedTypeOf<Color>() == PackedType::kU8);
  CHECK(ValueSize(PackedType::kF64) == 8);
  CHECK(PackedTypeName(PackedType::kU32) == "u32");
}

}  // namespace
}  // namespace tocl::runtime::packed

namespace tocl::runtime {
namespace {

constexpr Gid kReceiver = Gid::Thread(1, 9, 1);
constexpr Gid kSender = Gid::Thread(1, 2, 3);

TEST_CASE("a packed piece is matched only by a piece selector, and a plain message only by others",
          "[packed][mailbox]") {
  MailboxMessages m(kReceiver, size_t{64} << 20);
  Mailbox mailbox(kReceiver);
  detail::BufferSlot* piece = m.Make(kSender, 5);
  piece->header().flags = wire::kFlagPackedPiece;
  REQUIRE(mailbox.Deliver(piece));
  REQUIRE(mailbox.Deliver(m.Make(kSender, 5)));

  Selector pieces{kSender, TagMatch(5)};
  pieces.pieces = true;
  // Any source, any tag: still not a piece.
  detail::BufferSlot* plain = mailbox.Take(Selector{});
  REQUIRE(plain != nullptr);
  CHECK(plain->header().flags == 0);
  m.Drop(plain);
  CHECK(mailbox.Take(Selector{}) == nullptr);
  MessageInfo info;
  CHECK_FALSE(mailbox.Peek(Selector{Gid(), TagMatch(5)}, info));
  detail::BufferSlot* got = mailbox.Take(pieces);
  REQUIRE(got != nullptr);
  CHECK(got->header().flags == wire::kFlagPackedPiece);
  m.Drop(got);
}

TEST_CASE("a posted receive for pieces takes an arriving piece and leaves plain messages",
          "[packed][mailbox]") {
  MailboxMessages m(kReceiver, size_t{64} << 20);
  Mailbox mailbox(kReceiver);
  PostedReceive post;
  post.selector = Selector{kSender, TagMatch(9)};
  post.selector.pieces = true;
  mailbox.Post(&post);
  REQUIRE(mailbox.Deliver(m.Make(kSender, 9)));  // plain: queued
  CHECK_FALSE(post.done.load());
  detail::BufferSlot* piece = m.Make(kSender, 9);
  piece->header().flags = wire::kFlagPackedPiece;
  REQUIRE(mailbox.Deliver(piece));
  REQUIRE(post.done.load());
  REQUIRE(post.slot == piece);
  m.Drop(post.slot);
  detail::BufferSlot* plain = mailbox.Take(Selector{});
  REQUIRE(plain != nullptr);
  m.Drop(plain);
}

}  // namespace
}  // namespace tocl::runtime
