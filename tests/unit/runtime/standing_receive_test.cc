// A standing posted receive (a message handler's, posted_receive.h) on a
// mailbox: it claims the messages it matches in place, receives skip them,
// its owner takes them in order, and withdrawing it leaves the untaken ones
// where they were, for anyone. No daemon, no network.
#include <catch2/catch.hpp>
#include <vector>

#include "buffers/buffer_pool.h"
#include "mailbox_messages.h"
#include "runtime/mailbox.h"
#include "runtime/posted_receive.h"

namespace tocl::runtime {
namespace {

constexpr Gid kReceiver = Gid::Thread(1, 9, 1);
constexpr Gid kA = Gid::Thread(1, 2, 3);
constexpr Gid kB = Gid::Thread(1, 5, 1);

struct Messages : MailboxMessages {
  Messages() : MailboxMessages(kReceiver, size_t{64} << 20) {}
};

struct CountingSink final : ClaimSink {
  void Claimed() override { ++claims; }
  int claims = 0;
};

struct Standing : PostedReceive {
  explicit Standing(Selector match) {
    selector = match;
    standing = &sink;
  }
  CountingSink sink;
};

Tag TagOf(detail::BufferSlot* slot) {
  return slot->header().tag;
}

TEST_CASE("a standing receive claims queued and arriving matches in order and Take skips them",
          "[mailbox][handlers]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  REQUIRE(mailbox.Deliver(m.Make(kA, 1)));
  REQUIRE(mailbox.Deliver(m.Make(kA, 2)));
  Standing handler(Selector{kA, 1});
  mailbox.Post(&handler);
  CHECK(handler.sink.claims == 1);  // the queued one
  REQUIRE(mailbox.Deliver(m.Make(kA, 1)));
  REQUIRE(mailbox.Deliver(m.Make(kB, 1)));  // another source: not its
  CHECK(handler.sink.claims == 2);
  CHECK_FALSE(handler.done.load());

  // A receive of any message skips the claimed ones.
  detail::BufferSlot* taken = mailbox.Take(Selector{});
  REQUIRE(taken != nullptr);
  CHECK(TagOf(taken) == 2);
  m.Drop(taken);
  MessageInfo info;
  REQUIRE(mailbox.Peek(Selector{}, info));
  CHECK(info.source == kB);

  // The handler's come in arrival order, then none.
  for (int i = 0; i < 2; ++i) {
    detail::BufferSlot* claimed = mailbox.TakeClaimed(&handler);
    REQUIRE(claimed != nullptr);
    CHECK(TagOf(claimed) == 1);
    CHECK(claimed->claimed_by == nullptr);
    m.Drop(claimed);
  }
  CHECK(mailbox.TakeClaimed(&handler) == nullptr);
  mailbox.WithdrawStanding(&handler);
  mailbox.Leave();
  CHECK(m.InUse() == 0);
}

TEST_CASE("withdrawing a standing receive leaves its untaken messages in place, in order",
          "[mailbox][handlers]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  Standing handler(Selector{Gid(), 7});
  mailbox.Post(&handler);
  // A's messages alternate: 7 (the handler's), 8 (not), 7, 8.
  for (Tag tag : {7u, 8u, 7u, 8u}) REQUIRE(mailbox.Deliver(m.Make(kA, tag)));
  CHECK(handler.sink.claims == 2);
  mailbox.WithdrawStanding(&handler);
  mailbox.WithdrawStanding(&handler);  // idempotent
  // Nothing claimed is left: a receive of anything gets all four as sent.
  for (Tag tag : {7u, 8u, 7u, 8u}) {
    detail::BufferSlot* slot = mailbox.Take(Selector{kA, kAnyTag});
    REQUIRE(slot != nullptr);
    CHECK(TagOf(slot) == tag);
    CHECK(slot->claimed_by == nullptr);
    m.Drop(slot);
  }
  CHECK(mailbox.Take(Selector{}) == nullptr);
  CHECK(m.InUse() == 0);
}

TEST_CASE("a withdrawn handler's messages go to a receive posted after it", "[mailbox][handlers]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  Standing first(Selector{Gid(), 3});
  Standing second(Selector{Gid(), 3});
  PostedReceive request;
  request.selector = Selector{Gid(), 3};
  mailbox.Post(&first);
  mailbox.Post(&second);
  REQUIRE(mailbox.Deliver(m.Make(kA, 3)));
  REQUIRE(mailbox.Deliver(m.Make(kB, 3)));
  CHECK(first.sink.claims == 2);
  CHECK(second.sink.claims == 0);  // post order: the first one's
  mailbox.WithdrawStanding(&first);
  CHECK(second.sink.claims == 2);  // re-offered, in order
  detail::BufferSlot* slot = mailbox.TakeClaimed(&second);
  REQUIRE(slot != nullptr);
  CHECK(slot->header().source == kA.raw());
  m.Drop(slot);
  mailbox.WithdrawStanding(&second);
  mailbox.Post(&request);  // no handler left: the queued one is its
  REQUIRE(request.done.load());
  REQUIRE(request.slot != nullptr);
  CHECK(request.slot->header().source == kB.raw());
  m.Drop(request.slot);
  CHECK(m.InUse() == 0);
}

TEST_CASE("a message behind a long one of its sender is claimed after it", "[mailbox][handlers]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  Standing handler(Selector{kA, kAnyTag});
  mailbox.Post(&handler);
  buffers::LargeSlot* arriving = m.MakeArriving(kA, 1, 1 << 20);
  REQUIRE(mailbox.Deliver(arriving));
  REQUIRE(mailbox.Deliver(m.Make(kA, 2)));
  CHECK(handler.sink.claims == 0);  // the short one waits behind the long one
  mailbox.MessageComplete(arriving);
  CHECK(handler.sink.claims == 2);
  detail::BufferSlot* first = mailbox.TakeClaimed(&handler);
  detail::BufferSlot* second = mailbox.TakeClaimed(&handler);
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  CHECK(TagOf(first) == 1);
  CHECK(TagOf(second) == 2);
  m.Drop(first);
  m.Drop(second);
  mailbox.WithdrawStanding(&handler);
}

TEST_CASE("the thread leaving drops claimed messages and unclaims them", "[mailbox][handlers]") {
  Messages m;
  Mailbox mailbox(kReceiver);
  Standing handler(Selector{});
  mailbox.Post(&handler);
  REQUIRE(mailbox.Deliver(m.Make(kA, 1)));
  REQUIRE(mailbox.Deliver(m.Make(kB, 1)));
  CHECK(mailbox.Leave() == 2);
  CHECK(mailbox.TakeClaimed(&handler) == nullptr);
  CHECK_FALSE(handler.done.load());  // a standing receive never completes
  CHECK(m.InUse() == 0);
  // A reused slot starts unclaimed.
  detail::BufferSlot* again = m.Make(kA, 1);
  CHECK(again->claimed_by == nullptr);
  m.Drop(again);
}

TEST_CASE("a standing receive is not posted on a thread that has left", "[mailbox][handlers]") {
  Mailbox mailbox(kReceiver);
  (void)mailbox.Leave();
  Standing handler(Selector{});
  CHECK_FALSE(mailbox.Post(&handler));  // its owner reports the error
  CHECK_FALSE(handler.listed);
  CHECK_FALSE(handler.done.load());  // not completed: nobody waits for it
  CHECK_FALSE(mailbox.HasPosted());
  // A receive is completed with the error, as before.
  PostedReceive request;
  CHECK_FALSE(mailbox.Post(&request));
  REQUIRE(request.done.load());
  CHECK(request.status.code() == StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tocl::runtime
