// A relay's tickets (multicast_tickets.h): a request passed on is carried
// only with the ticket its sender's process sent, once, and only when it
// fits; what waits for a ticket is bounded and expires, and is refused
// (answered) then, never carried.
#include "runtime/multicast_tickets.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Book = TicketBook<int>;
using Clock = Book::Clock;

constexpr Gid kSender = Gid::Thread(1, 2, 3);
constexpr Gid kSenderMailbox = Gid::Thread(1, 2, 16000000);  // its process's
constexpr Gid kThird = Gid::Thread(4, 4, 16000000);          // another process's

MulticastTicket Terms(uint64_t id, uint64_t nonce = 0xAB) {
  return MulticastTicket{
      .id = id, .source = kSender, .nonce = nonce, .tag = 7, .payload_bytes = 100, .wait_ms = 1000};
}

void CheckSettled(const Book::Settled& settled, int held, bool carried, const std::string& words) {
  CHECK(settled.held == held);
  CHECK(settled.status.ok() == carried);
  INFO(settled.status.ToString());
  CHECK(settled.status.message().find(words) != std::string::npos);
}

TEST_CASE("a request with its ticket here is carried once, its ticket gone: a replay waits",
          "[multicast]") {
  Book book;
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());
  CHECK(settled.empty());
  book.AddRequest(10, Terms(1), 100, now, settled);
  REQUIRE(settled.size() == 1);
  CheckSettled(settled[0], 10, true, "");
  CHECK(book.tickets() == 0);  // used: erased
  CHECK(book.NextDeadline() == Clock::time_point::max());
  // The same request again (passed on twice, or replayed): no ticket, it
  // waits, and is refused at its end.
  settled.clear();
  book.AddRequest(11, Terms(1), 100, now, settled);
  CHECK(settled.empty());
  CHECK(book.waiting() == 1);
  book.Expire(now + 1000ms, settled);
  REQUIRE(settled.size() == 1);
  CheckSettled(settled[0], 11, false, "no ticket");
  CHECK(book.waiting() == 0);
}

TEST_CASE("a request that overtook its ticket waits for it and is carried then", "[multicast]") {
  Book book;
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  book.AddRequest(10, Terms(1), 100, now, settled);
  CHECK(settled.empty());
  CHECK(book.waiting() == 1);
  CHECK(book.waiting_bytes() == 100);
  CHECK(book.NextDeadline() == now + 1000ms);
  REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now + 5ms, settled).ok());
  REQUIRE(settled.size() == 1);
  CheckSettled(settled[0], 10, true, "");
  CHECK(book.waiting() == 0);
  CHECK(book.waiting_bytes() == 0);
}

TEST_CASE(
    "a request that does not fit its ticket is refused, and the ticket stays for the "
    "real one",
    "[multicast]") {
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  SECTION("ticket first") {
    Book book;
    REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());
    book.AddRequest(10, Terms(1, /*nonce=*/0xCD), 100, now, settled);
    MulticastTicket other_tag = Terms(1);
    other_tag.tag = 8;
    book.AddRequest(11, other_tag, 100, now, settled);
    MulticastTicket other_size = Terms(1);
    other_size.payload_bytes = 99;
    book.AddRequest(12, other_size, 100, now, settled);
    REQUIRE(settled.size() == 3);
    for (int i = 0; i < 3; ++i) CheckSettled(settled[i], 10 + i, false, "does not fit its ticket");
    settled.clear();
    book.AddRequest(13, Terms(1), 100, now, settled);
    REQUIRE(settled.size() == 1);
    CheckSettled(settled[0], 13, true, "");
  }
  SECTION("requests first, in their order") {
    Book book;
    book.AddRequest(10, Terms(1, /*nonce=*/0xCD), 100, now, settled);
    book.AddRequest(11, Terms(1), 100, now, settled);
    book.AddRequest(12, Terms(1), 100, now, settled);
    CHECK(settled.empty());
    REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());
    CheckSettled(settled.at(0), 10, false, "does not fit its ticket");
    CheckSettled(settled.at(1), 11, true, "");
    // The ticket went with 11: 12 (a second copy) waits for another.
    REQUIRE(settled.size() == 2);
    CHECK(book.waiting() == 1);
    CHECK(book.tickets() == 0);
  }
}

TEST_CASE("a request of another source waits for its own ticket and is refused when none comes",
          "[multicast]") {
  Book book;
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());
  MulticastTicket forged = Terms(1);
  forged.source = Gid::Thread(1, 2, 4);  // another thread of the sender's process
  book.AddRequest(10, forged, 100, now, settled);
  CHECK(settled.empty());
  CHECK(book.NextDeadline() == now + 1000ms);
  book.Expire(now + 999ms, settled);
  CHECK(settled.empty());
  book.Expire(now + 1000ms, settled);
  REQUIRE(settled.size() == 1);
  CheckSettled(settled[0], 10, false, "no ticket");
  CHECK(book.waiting() == 0);
  CHECK(book.tickets() == 0);  // the ticket ended with it
  CHECK(book.NextDeadline() == Clock::time_point::max());
}

TEST_CASE("a ticket vouches for its own process's threads only, once", "[multicast]") {
  Book book;
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  book.AddRequest(10, Terms(1), 100, now, settled);
  // A third process announces the sender's request: refused, nothing kept.
  Status refused = book.AddTicket(kThird, Terms(1), now, settled);
  CHECK(refused.code() == StatusCode::kInvalidArgument);
  CHECK(refused.message().find("for a message of h1.p2.t3") != std::string::npos);
  CHECK(book.tickets() == 0);
  CHECK(settled.empty());
  REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());
  REQUIRE(settled.size() == 1);
  CHECK(settled[0].status.ok());
  CHECK(book.tickets() == 0);  // used: erased
  // A second ticket for one held does not renew it.
  REQUIRE(book.AddTicket(kSenderMailbox, Terms(2), now, settled).ok());
  refused = book.AddTicket(kSenderMailbox, Terms(2), now, settled);
  CHECK(refused.message().find("a second multicast ticket") != std::string::npos);
  CHECK(book.tickets() == 1);
}

TEST_CASE("tickets and waiting requests are bounded: the oldest go", "[multicast]") {
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  SECTION("tickets: the one nearest its end is forgotten") {
    Book book(Book::Limits{.tickets = 3});
    for (uint64_t id = 1; id <= 5; ++id) {
      REQUIRE(
          book.AddTicket(kSenderMailbox, Terms(id), now + std::chrono::milliseconds(id), settled)
              .ok());
    }
    CHECK(book.tickets() == 3);
    // 1 and 2 are forgotten: their requests wait (and are refused later).
    book.AddRequest(1, Terms(1), 100, now, settled);
    book.AddRequest(2, Terms(2), 100, now, settled);
    CHECK(settled.empty());
    CHECK(book.waiting() == 2);
    book.AddRequest(3, Terms(3), 100, now, settled);
    book.AddRequest(5, Terms(5), 100, now, settled);
    REQUIRE(settled.size() == 2);
    CHECK(settled[0].status.ok());
    CHECK(settled[1].status.ok());
  }
  SECTION("waiting requests, by count") {
    Book book(Book::Limits{.waiting = 2});
    book.AddRequest(1, Terms(1), 100, now, settled);
    book.AddRequest(2, Terms(2), 100, now, settled);
    CHECK(settled.empty());
    book.AddRequest(3, Terms(3), 100, now, settled);
    REQUIRE(settled.size() == 1);
    CheckSettled(settled[0], 1, false, "wait for their tickets");
    CHECK(book.waiting() == 2);
    // The pushed-out one is not carried when its ticket comes.
    settled.clear();
    REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());
    CHECK(settled.empty());
  }
  SECTION("waiting requests, by bytes (one alone may exceed them)") {
    Book book(Book::Limits{.waiting_bytes = 250});
    book.AddRequest(1, Terms(1), 100, now, settled);
    book.AddRequest(2, Terms(2), 100, now, settled);
    CHECK(settled.empty());
    book.AddRequest(3, Terms(3), 100, now, settled);
    REQUIRE(settled.size() == 1);
    CheckSettled(settled[0], 1, false, "wait for their tickets");
    CHECK(book.waiting_bytes() == 200);
    book.AddRequest(4, Terms(4), 1000, now, settled);
    REQUIRE(settled.size() == 3);
    CHECK(book.waiting() == 1);
    CHECK(book.waiting_bytes() == 1000);
  }
}

TEST_CASE("tickets and requests live at most their sender's wait, capped", "[multicast]") {
  Book book(Book::Limits{.max_wait = 500ms});
  const auto now = Clock::now();
  std::vector<Book::Settled> settled;
  REQUIRE(book.AddTicket(kSenderMailbox, Terms(1), now, settled).ok());  // asks 1000 ms
  MulticastTicket short_wait = Terms(2);
  short_wait.wait_ms = 100;
  book.AddRequest(2, short_wait, 100, now, settled);
  CHECK(book.NextDeadline() == now + 100ms);
  book.Expire(now + 100ms, settled);
  REQUIRE(settled.size() == 1);
  CheckSettled(settled[0], 2, false, "no ticket");
  CHECK(book.NextDeadline() == now + 500ms);
  book.Expire(now + 500ms, settled);
  CHECK(book.tickets() == 0);
  // Its ticket gone, a late request waits (and would be refused).
  settled.clear();
  book.AddRequest(1, Terms(1), 100, now + 501ms, settled);
  CHECK(settled.empty());
  CHECK(book.waiting() == 1);
}

}  // namespace
}  // namespace tocl::runtime
