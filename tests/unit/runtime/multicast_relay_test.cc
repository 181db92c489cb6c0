// The multicast relay with a fake runtime (multicast_hooks.h) and a real
// receive side: it carries a request from the sender's own process at once,
// and a request passed on by another relay only with the ticket the
// sender's process sent it (before or after the request), once; what has
// no fitting ticket is answered with the reason, never carried.
#include "runtime/multicast_relay.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "buffers/size_class.h"
#include "part_fixtures.h"
#include "runtime/internal_threads.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kProcess = Gid::Process(2, 5);  // the relay's
constexpr Gid kReceiver = Gid::Thread(2, 6, 1);
constexpr Gid kSender = Gid::Thread(1, 3, 1);
const Gid kSenderMailbox = Gid::Thread(1, 3, kFirstInternalThread);
const Gid kParent = RelayOf(Gid::Process(3, 4));  // a relay above
const Gid kThirdMailbox = Gid::Thread(4, 4, kFirstInternalThread);
constexpr Tag kTag = 7;
constexpr uint64_t kNonce = 0x5EC12E7;    // the group's: its receivers know it
constexpr uint64_t kSecret = 0x7E1A95EC;  // the group's: only its relay knows it

struct Fill {
  Gid to;
  uint64_t seq = 0;
  uint64_t nonce = 0;
};

struct Fixture : PoolAndPoller {
  Fixture()
      : receive(64 * buffers::ClassBytes(0), 50us, shutting_down,
                ReceiveSide::Hooks{.wake_poller = [] {},
                                   .receive_posted = [] {},
                                   .unbind_posted = [](PostedReceive&) { return true; }}),
        relay(receive, shutting_down, hooks) {
    hooks.send = [this](Gid, Gid, Tag tag, std::span<const std::byte> bytes) {
      if (tag == kMulticastReplyTag) {
        // (The relay's thread: no Catch assertion here, they are not
        // thread-safe; the destructor checks.)
        auto reply = DecodeMulticastReply(bytes);
        std::lock_guard lock(mu);
        if (reply.ok()) {
          replies.push_back(std::move(*reply));
        } else {
          bad_replies.push_back(reply.status().ToString());
        }
        changed.notify_all();
      }
      return Status::Ok();
    };
    hooks.send_fill = [this](Gid, Gid to, Tag, std::span<const std::byte>, FillOf fill, Mailbox&) {
      std::lock_guard lock(mu);
      fills.push_back(Fill{to, fill.seq, fill.nonce});
      return Status::Ok();
    };
    hooks.post_marker = [](Gid, Gid, Tag, uint64_t, Gid, uint64_t) -> Result<uint64_t> {
      return Status(StatusCode::kUnimplemented, "not a sender");
    };
    hooks.post_no_fill = [](Gid, Gid, uint64_t) {};
    hooks.sender_mailbox = [](Gid) -> Result<Mailbox*> {
      return Status(StatusCode::kUnimplemented, "not a sender");
    };
    receive.SetProcess(kProcess);
    receive.AttachProgress(progress);
    relay.Open(kProcess);
    relay.Start();
  }
  ~Fixture() {
    shutting_down = true;
    receive.WakeAll();
    relay.Stop();
    CHECK(bad_replies.empty());
  }

  // `bytes` from `source` arriving at the relay's mailbox.
  void Arrive(Gid source, const std::vector<std::byte>& bytes) {
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    wire::Header& header = slot->header();
    header.kind = wire::FrameKind::kMessage;
    header.source = source.raw();
    header.destination = RelayOf(kProcess).raw();
    header.tag = kMulticastRequestTag;
    header.length = static_cast<uint32_t>(bytes.size());
    header.total = header.length;
    std::memcpy(slot->payload(), bytes.data(), bytes.size());
    REQUIRE(receive.Deliver(slot).ok());
  }
  void Request(Gid from, uint64_t id, uint64_t seq, uint32_t wait_ms = 10000,
               uint64_t nonce = kNonce, uint64_t secret = kSecret) {
    const MulticastRequest request{.id = id,
                                   .source = kSender,
                                   .reply_to = kSenderMailbox,
                                   .tag = kTag,
                                   .wait_ms = wait_ms,
                                   .payload = payload};
    const std::vector<MulticastGroup> groups{
        MulticastGroup{kProcess, {{kReceiver, seq}}, nonce, secret}};
    Arrive(from, EncodeMulticastRequest(request, groups));
  }
  void Ticket(Gid from, uint64_t id) {
    Arrive(from, EncodeMulticastTicket(MulticastTicket{.id = id,
                                                       .source = kSender,
                                                       .nonce = kNonce,
                                                       .secret = kSecret,
                                                       .tag = kTag,
                                                       .payload_bytes = payload.size(),
                                                       .wait_ms = 10000}));
  }
  // Waits for the relay's `n`th answer (1-based) and returns it.
  MulticastReply Reply(size_t n) {
    std::unique_lock lock(mu);
    REQUIRE(changed.wait_for(lock, 20s, [&] { return replies.size() >= n; }));
    return replies[n - 1];
  }
  size_t Answers() {
    std::lock_guard lock(mu);
    return replies.size();
  }
  std::vector<Fill> Fills() {
    std::lock_guard lock(mu);
    return fills;
  }

  const std::vector<std::byte> payload = std::vector<std::byte>(100, std::byte{42});
  std::atomic<bool> shutting_down{false};
  ReceiveSide receive;
  MulticastHooks hooks;
  MulticastRelay relay;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<MulticastReply> replies;   // guarded by mu
  std::vector<std::string> bad_replies;  // guarded by mu: replies that did not decode
  std::vector<Fill> fills;               // guarded by mu
};

TEST_CASE("a relay carries a request from the sender's own process without a ticket",
          "[multicast][relay]") {
  Fixture f;
  f.Request(kSenderMailbox, 1, 0);
  const MulticastReply reply = f.Reply(1);
  CHECK(reply.id == 1);
  CHECK(reply.secret == kSecret);  // echoed: the sender takes no answer without it
  CHECK(reply.status.ok());
  REQUIRE(reply.receivers.size() == 1);
  CHECK(reply.receivers[0].status.ok());
  const auto fills = f.Fills();
  REQUIRE(fills.size() == 1);
  CHECK(fills[0].to == kReceiver);
  CHECK(fills[0].seq == 0);
  CHECK(fills[0].nonce == kNonce);
}

TEST_CASE("a passed-on request is carried with its ticket, before or after it, once",
          "[multicast][relay]") {
  Fixture f;
  SECTION("ticket first") {
    f.Ticket(kSenderMailbox, 1);
    f.Request(kParent, 1, 0);
    CHECK(f.Reply(1).status.ok());
    CHECK(f.Fills().size() == 1);
  }
  SECTION("request first") {
    f.Request(kParent, 1, 0);
    // The sender's own request after it is carried; the first still waits.
    f.Request(kSenderMailbox, 2, 1);
    CHECK(f.Reply(1).id == 2);
    REQUIRE(f.Fills().size() == 1);
    CHECK(f.Fills()[0].seq == 1);
    f.Ticket(kSenderMailbox, 1);
    const MulticastReply reply = f.Reply(2);
    CHECK(reply.id == 1);
    CHECK(reply.status.ok());
    REQUIRE(f.Fills().size() == 2);
    CHECK(f.Fills()[1].seq == 0);
  }
  // Passed on again (or replayed): its ticket went with the first, so it
  // waits for one (its 10 s), neither carried nor answered (the sender's
  // own request after it is, and shows it was handled).
  const size_t carried = f.Fills().size();
  const size_t answered = f.Answers();
  f.Request(kParent, 1, 0);
  f.Request(kSenderMailbox, 3, 2);
  CHECK(f.Reply(answered + 1).id == 3);
  REQUIRE(f.Fills().size() == carried + 1);
  CHECK(f.Fills().back().seq == 2);
  CHECK(f.Answers() == answered + 1);
}

TEST_CASE("a passed-on request without a fitting ticket is answered, never carried",
          "[multicast][relay]") {
  Fixture f;
  SECTION("no ticket: refused when its wait is over") {
    f.Request(kParent, 1, 0, /*wait_ms=*/50);
    const MulticastReply reply = f.Reply(1);
    CHECK(reply.id == 1);
    CHECK(reply.secret == kSecret);
    CHECK(reply.status.message().find("no ticket") != std::string::npos);
  }
  SECTION("a ticket from a third process does not count") {
    f.Ticket(kThirdMailbox, 1);
    f.Request(kParent, 1, 0, /*wait_ms=*/50);
    const MulticastReply reply = f.Reply(1);
    CHECK(reply.status.message().find("no ticket") != std::string::npos);
  }
  SECTION("the nonce but not the secret: not carried; the real one is") {
    // (Another receiver process of the group knows the nonce.)
    f.Ticket(kSenderMailbox, 1);
    // Right id, source, nonce, tag and size, for a number of its choosing.
    f.Request(kParent, 1, 5, 10000, kNonce, /*secret=*/0);
    f.Request(kParent, 1, 0);
    const MulticastReply reply = f.Reply(1);
    CHECK(reply.status.ok());
    REQUIRE(f.Fills().size() == 1);
    CHECK(f.Fills()[0].seq == 0);  // the real one's, not the made-up one's 5
    CHECK(f.Answers() == 1);
    return;
  }
  SECTION("another nonce: refused at once, unanswered; the real one carried after") {
    f.Ticket(kSenderMailbox, 1);
    f.Request(kParent, 1, 0, 10000, /*nonce=*/kNonce + 1);
    f.Request(kParent, 1, 0);
    const MulticastReply reply = f.Reply(1);
    CHECK(reply.id == 1);
    CHECK(reply.status.ok());
    REQUIRE(f.Fills().size() == 1);
    CHECK(f.Fills()[0].nonce == kNonce);
    CHECK(f.Answers() == 1);
    return;
  }
  CHECK(f.Fills().empty());
}

TEST_CASE("a request answered to another process than its source's is refused, unanswered",
          "[multicast][relay]") {
  Fixture f;
  // A third process asks for a multicast of its own thread, answered to
  // the sender's reply mailbox (as the sender's next request would be).
  const Gid third = Gid::Thread(kThirdMailbox.process(), 1);
  const MulticastRequest forged{.id = 1,
                                .source = third,
                                .reply_to = kSenderMailbox,
                                .tag = kTag,
                                .wait_ms = 10000,
                                .payload = f.payload};
  const std::vector<MulticastGroup> groups{MulticastGroup{kProcess, {{kReceiver, 0}}, kNonce}};
  f.Arrive(kThirdMailbox, EncodeMulticastRequest(forged, groups));
  // The sender's own request after it is carried and answered, and shows
  // the forged one was handled: neither carried nor answered.
  f.Request(kSenderMailbox, 2, 1);
  CHECK(f.Reply(1).id == 2);
  REQUIRE(f.Fills().size() == 1);
  CHECK(f.Fills()[0].seq == 1);
  CHECK(f.Answers() == 1);
}

}  // namespace
}  // namespace tocl::runtime
