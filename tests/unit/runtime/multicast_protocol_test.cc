// The relays' requests and replies: what goes in comes out, and bytes from
// the network that are cut short, miscounted or name the wrong ids are
// refused with a clear error, never read past.
#include "runtime/multicast_protocol.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace tocl::runtime {
namespace {

const Gid kSource = Gid::Thread(1, 2, 3);
const Gid kReplyTo = Gid::Thread(1, 2, 16000000);

std::vector<MulticastGroup> TwoGroups() {
  return {
      MulticastGroup{
          Gid::Process(2, 5), {{Gid::Thread(2, 5, 1), 7}, {Gid::Thread(2, 6, 1), 9}}, 0xA1, 0x5A1},
      MulticastGroup{Gid::Process(3, 4), {{Gid::Thread(3, 4, 2), 0}}, 0xB2, 0x5B2}};
}

std::vector<std::byte> Payload(size_t n) {
  std::vector<std::byte> payload(n);
  for (size_t i = 0; i < n; ++i) payload[i] = std::byte(i * 7);
  return payload;
}

std::vector<std::byte> Request(const std::vector<std::byte>& payload) {
  MulticastRequest header{
      .id = 42, .source = kSource, .reply_to = kReplyTo, .tag = 77, .wait_ms = 2500};
  header.payload = payload;
  const auto groups = TwoGroups();
  return EncodeMulticastRequest(header, groups);
}

void CheckRefused(std::span<const std::byte> bytes, const std::string& words) {
  uint64_t id = 0;
  Gid reply_to;
  auto decoded = DecodeMulticastRequest(bytes, id, reply_to);
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.status().code() == StatusCode::kInvalidArgument);
  INFO(decoded.status().message());
  CHECK(decoded.status().message().find(words) != std::string::npos);
}

TEST_CASE("a multicast request comes out as it went in", "[multicast]") {
  const auto payload = Payload(5000);
  const auto bytes = Request(payload);
  uint64_t id = 0;
  Gid reply_to;
  auto decoded = DecodeMulticastRequest(bytes, id, reply_to);
  REQUIRE(decoded.ok());
  CHECK(id == 42);
  CHECK(reply_to == kReplyTo);
  CHECK(decoded->source == kSource);
  CHECK(decoded->tag == 77);
  CHECK(decoded->wait_ms == 2500);
  CHECK(decoded->groups == TwoGroups());
  REQUIRE(decoded->payload.size() == payload.size());
  CHECK(std::memcmp(decoded->payload.data(), payload.data(), payload.size()) == 0);
}

TEST_CASE("a malformed multicast request is refused naming what is wrong", "[multicast]") {
  const auto payload = Payload(100);
  const auto good = Request(payload);

  CheckRefused(std::span(good).first(3), "not a multicast request");
  auto bad = good;
  bad[0] = std::byte{0};
  CheckRefused(bad, "not a multicast request");
  CheckRefused(std::span(good).first(20), "cut short");
  // Every cut of the bytes is refused, and none is read past.
  for (size_t n = 0; n < good.size(); ++n) {
    uint64_t id = 0;
    Gid reply_to;
    CHECK_FALSE(DecodeMulticastRequest(std::span(good).first(n), id, reply_to).ok());
  }
  // One byte too many: the payload length does not match.
  bad = good;
  bad.push_back(std::byte{1});
  CheckRefused(bad, "says 100 payload bytes, but 101 follow");

  // Field offsets: magic 0, id 4, source 12, reply-to 20, tag 28, groups
  // 32, first relay 36, its nonce 44, its secret 52, its count 60, first
  // receiver 64.
  auto put = [](std::vector<std::byte>& bytes, size_t at, auto value) {
    std::memcpy(bytes.data() + at, &value, sizeof(value));
  };
  bad = good;
  put(bad, 20, Gid::Thread(9, 9, 9).raw());  // answers to another process
  CheckRefused(bad, "both must be threads of one process");
  bad = good;
  put(bad, 32, uint32_t{0xFFFFFFFF});  // more groups than bytes
  CheckRefused(bad, "says 4294967295 groups");
  bad = good;
  put(bad, 60, uint32_t{1000000});  // more receivers than bytes
  CheckRefused(bad, "says 1000000 receivers");
  bad = good;
  put(bad, 36, Gid::Thread(2, 5, 1).raw());  // a relay that is not a process
  CheckRefused(bad, "receivers in");
  bad = good;
  put(bad, 64, Gid::Thread(7, 5, 1).raw());  // a receiver on another host than its relay
  CheckRefused(bad, "names receiver h7.p5.t1 in the group of h2.p5");
}

TEST_CASE("a multicast reply comes out as it went in, and a malformed one is refused",
          "[multicast]") {
  MulticastReply reply{
      .id = 5, .relay = Gid::Process(2, 5), .secret = 0xABCDEF0123, .status = Status::Ok()};
  reply.receivers.push_back({Gid::Thread(2, 5, 1), Status::Ok()});
  reply.receivers.push_back({Gid::Thread(2, 6, 1), NotFound(std::string(2000, 'x'))});
  const auto bytes = EncodeMulticastReply(reply);
  auto decoded = DecodeMulticastReply(bytes);
  REQUIRE(decoded.ok());
  CHECK(decoded->id == 5);
  CHECK(decoded->relay == Gid::Process(2, 5));
  CHECK(decoded->secret == 0xABCDEF0123);
  CHECK(decoded->status.ok());
  REQUIRE(decoded->receivers.size() == 2);
  CHECK(decoded->receivers[0].status.ok());
  CHECK(decoded->receivers[1].status.code() == StatusCode::kNotFound);
  CHECK(decoded->receivers[1].status.message().size() == kMaxMulticastMessageBytes);

  for (size_t n = 0; n < bytes.size(); ++n)
    CHECK_FALSE(DecodeMulticastReply(std::span(bytes).first(n)).ok());
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_FALSE(DecodeMulticastReply(longer).ok());
}

TEST_CASE("a multicast ticket comes out as it went in, and a malformed one is refused",
          "[multicast]") {
  const MulticastTicket ticket{.id = 42,
                               .source = kSource,
                               .nonce = 0xA1B2C3D4E5F60718,
                               .secret = 0x0123456789ABCDEF,
                               .tag = 77,
                               .payload_bytes = 5000,
                               .wait_ms = 1234};
  const auto bytes = EncodeMulticastTicket(ticket);
  CHECK(IsMulticastTicket(bytes));
  auto decoded = DecodeMulticastTicket(bytes);
  REQUIRE(decoded.ok());
  CHECK(*decoded == ticket);

  // A request is not a ticket, nor is a ticket a request.
  const auto payload = Payload(10);
  const auto request = Request(payload);
  CHECK_FALSE(IsMulticastTicket(request));
  auto refused = DecodeMulticastTicket(request);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("not a multicast ticket") != std::string::npos);
  CheckRefused(bytes, "not a multicast request");

  // Every cut, and one byte too many, is refused.
  for (size_t n = 0; n < bytes.size(); ++n) {
    CHECK_FALSE(DecodeMulticastTicket(std::span(bytes).first(n)).ok());
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  refused = DecodeMulticastTicket(longer);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("of 53 bytes (one is 52)") != std::string::npos);
  // A source that is not a thread (offset 12).
  auto bad = bytes;
  const uint64_t process = Gid::Process(1, 2).raw();
  std::memcpy(bad.data() + 12, &process, sizeof(process));
  refused = DecodeMulticastTicket(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("not a thread") != std::string::npos);
}

TEST_CASE("a request, ticket or reply of the first layout (magic TMQ1, TMT1, TMA1) is refused",
          "[multicast]") {
  // The layouts gained the secret: an old peer's messages are refused by
  // name rather than misread.
  const auto version1 = [](std::vector<std::byte> bytes) {
    REQUIRE(bytes.size() > 4);
    REQUIRE(bytes[3] == std::byte{'2'});
    bytes[3] = std::byte{'1'};
    return bytes;
  };
  const auto payload = Payload(10);
  CheckRefused(version1(Request(payload)), "not a multicast request");
  const auto ticket = version1(EncodeMulticastTicket({.id = 42, .source = kSource}));
  CHECK_FALSE(IsMulticastTicket(ticket));
  CHECK_FALSE(DecodeMulticastTicket(ticket).ok());
  CHECK_FALSE(
      DecodeMulticastReply(version1(EncodeMulticastReply({.id = 5, .relay = Gid::Process(2, 5)})))
          .ok());
}

TEST_CASE("a request's ticket terms are its first group's", "[multicast]") {
  const auto payload = Payload(300);
  const auto bytes = Request(payload);
  uint64_t id = 0;
  Gid reply_to;
  auto decoded = DecodeMulticastRequest(bytes, id, reply_to);
  REQUIRE(decoded.ok());
  const MulticastTicket terms = TicketOf(*decoded);
  CHECK(terms.id == 42);
  CHECK(terms.source == kSource);
  CHECK(terms.nonce == 0xA1);
  CHECK(terms.tag == 77);
  CHECK(terms.payload_bytes == 300);
  CHECK(terms.wait_ms == 2500);
}

}  // namespace
}  // namespace tocl::runtime
