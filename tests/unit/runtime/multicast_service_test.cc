// The sender's side of a multicast with a fake runtime (multicast_hooks.h)
// and a real receive side and reply mailboxes: the test plays the relays,
// reading what the service sends them and answering it. It sends each
// relay below the top of the tree a ticket with that relay's group's
// nonce (none to the tops), and takes no answer that does not echo the
// nonce of the group it is for.
#include "runtime/multicast_service.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "buffers/size_class.h"
#include "part_fixtures.h"
#include "runtime/internal_threads.h"
#include "wire/frame.h"

namespace tocl::runtime {
namespace {

using namespace std::chrono_literals;

constexpr Gid kProcess = Gid::Process(1, 3);  // the sender's
constexpr Gid kSender = Gid::Thread(1, 3, 1);
constexpr Tag kTag = 7;

// Group g's receiver (one per host: a group each, in this order) and relay.
Gid ReceiverOf(size_t g) {
  return Gid::Thread(static_cast<uint32_t>(g + 2), 5, 1);
}
Gid RelayProcessOf(size_t g) {
  return ReceiverOf(g).process();
}

struct Sent {
  Gid from;
  Gid to;
  Tag tag = 0;
  std::vector<std::byte> bytes;
};

struct Fixture : PoolAndPoller {
  Fixture()
      : receive(64 * buffers::ClassBytes(0), 50us, shutting_down,
                ReceiveSide::Hooks{.wake_poller = [] {},
                                   .receive_posted = [] {},
                                   .unbind_posted = [](PostedReceive&) { return true; }}),
        replies(receive),
        service(receive, replies, shutting_down, Hooks()) {
    receive.SetProcess(kProcess);
    receive.AttachProgress(progress);
    receive.AddThread(kSender);
    service.Open(kProcess);  // (its relay is not started: nothing goes to it)
  }
  ~Fixture() {
    shutting_down = true;
    receive.WakeAll();
  }

  MulticastHooks Hooks() {
    MulticastHooks hooks;
    hooks.send = [this](Gid from, Gid to, Tag tag, std::span<const std::byte> bytes) {
      std::lock_guard lock(mu);
      sent.push_back(Sent{from, to, tag, {bytes.begin(), bytes.end()}});
      changed.notify_all();
      if (to == RelayOf(no_ticket_to) && IsMulticastTicket(bytes)) {
        return Unavailable("the test refuses this ticket");
      }
      if (to == RelayOf(no_request_to) && !IsMulticastTicket(bytes)) {
        return Unavailable("the test refuses this request");
      }
      return Status::Ok();
    };
    hooks.post_marker = [this](Gid, Gid, Tag, uint64_t, Gid, uint64_t) -> Result<uint64_t> {
      return next_seq++;
    };
    hooks.send_fill = [this](Gid, Gid to, Tag, std::span<const std::byte>, FillOf, Mailbox&) {
      std::lock_guard lock(mu);
      direct.push_back(to);
      changed.notify_all();
      return Status::Ok();
    };
    hooks.post_no_fill = [](Gid, Gid, uint64_t) {};
    hooks.sender_mailbox = [this](Gid from) { return receive.LocalMailbox(from); };
    return hooks;
  }

  // Waits until the service sent `n` messages, and returns them.
  std::vector<Sent> WaitSent(size_t n) {
    std::unique_lock lock(mu);
    REQUIRE(changed.wait_for(lock, 20s, [&] { return sent.size() >= n; }));
    return sent;
  }
  std::vector<Gid> Direct() {
    std::lock_guard lock(mu);
    return direct;
  }
  // Waits until the sender sent `n` fills itself, and returns them.
  std::vector<Gid> WaitDirect(size_t n) {
    std::unique_lock lock(mu);
    REQUIRE(changed.wait_for(lock, 20s, [&] { return direct.size() >= n; }));
    return direct;
  }

  // `reply` from the relay thread of `from` arriving at mailbox `to`.
  void Answer(Gid from, Gid to, const MulticastReply& reply) {
    const std::vector<std::byte> bytes = EncodeMulticastReply(reply);
    buffers::SlotRef slot(pool.TryGet(0));
    REQUIRE(slot);
    wire::Header& header = slot->header();
    header.kind = wire::FrameKind::kMessage;
    header.source = RelayOf(from).raw();
    header.destination = to.raw();
    header.tag = kMulticastReplyTag;
    header.length = static_cast<uint32_t>(bytes.size());
    header.total = header.length;
    std::memcpy(slot->payload(), bytes.data(), bytes.size());
    REQUIRE(receive.Deliver(slot).ok());
  }

  // Group g's relay answers request `id` (to `reply_to`): carried, with
  // its group's secret.
  void AnswerOk(size_t g, uint64_t id, Gid reply_to, uint64_t secret) {
    MulticastReply ok{.id = id, .relay = RelayProcessOf(g), .secret = secret};
    ok.receivers.push_back({ReceiverOf(g), Status::Ok()});
    Answer(RelayProcessOf(g), reply_to, ok);
  }

  std::future<Result<MulticastResult>> Multicast(size_t groups,
                                                 std::chrono::milliseconds timeout = 20s) {
    for (size_t g = 0; g < groups; ++g) receivers.push_back(ReceiverOf(g));
    return std::async(std::launch::async, [this, timeout] {
      return service.Send(kSender, receivers, kTag, payload, {.timeout = timeout});
    });
  }

  const std::vector<std::byte> payload = std::vector<std::byte>(100, std::byte{42});
  std::atomic<bool> shutting_down{false};
  ReceiveSide receive;
  ReplyMailboxes replies;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<Sent> sent;   // guarded by mu
  std::vector<Gid> direct;  // guarded by mu: the fills the sender sent itself
  std::atomic<uint64_t> next_seq{0};
  std::vector<Gid> receivers;
  Gid no_ticket_to;   // a relay process whose ticket the fake network refuses
  Gid no_request_to;  // and one whose (top) request it refuses
  MulticastService service;
};

MulticastRequest DecodeRequest(const Sent& sent) {
  uint64_t id = 0;
  Gid reply_to;
  auto request = DecodeMulticastRequest(sent.bytes, id, reply_to);
  REQUIRE(request.ok());
  return *request;
}

// What the relays learn from the requests sent (not the tickets): the
// call's id and reply mailbox, and each group's secret by relay process.
struct RequestsSeen {
  uint64_t id = 0;
  Gid reply_to;
  std::map<Gid, uint64_t> secret_of;
};
RequestsSeen SeenIn(const std::vector<Sent>& sent) {
  RequestsSeen seen;
  for (const Sent& message : sent) {
    if (IsMulticastTicket(message.bytes)) continue;
    const MulticastRequest request = DecodeRequest(message);
    seen.id = request.id;
    seen.reply_to = request.reply_to;
    for (const MulticastGroup& group : request.groups) seen.secret_of[group.relay] = group.secret;
  }
  return seen;
}

TEST_CASE("a multicast sender takes no answer without its group's secret", "[multicast][service]") {
  Fixture f;
  auto pending = f.Multicast(1);
  const std::vector<Sent> sent = f.WaitSent(1);
  REQUIRE(sent[0].to == RelayOf(RelayProcessOf(0)));
  const MulticastRequest request = DecodeRequest(sent[0]);
  const uint64_t nonce = request.groups.front().nonce;
  const uint64_t secret = request.groups.front().secret;
  REQUIRE(secret != nonce);
  const Gid relay = RelayProcessOf(0);
  // The right id and relay, and the group's nonce (its receivers know it)
  // but not its secret: a refusal (taken, the sender would send to the
  // group itself and end), then an "ok".
  f.Answer(relay, request.reply_to,
           MulticastReply{
               .id = request.id, .relay = relay, .secret = nonce, .status = Unavailable("no")});
  MulticastReply ok{.id = request.id, .relay = relay, .secret = nonce};
  ok.receivers.push_back({ReceiverOf(0), Status::Ok()});
  f.Answer(relay, request.reply_to, ok);
  // (No check that the call is still on here: the sender may not have
  // read these answers yet, so it would pass whatever the code does. The
  // checks below catch a missing secret check deterministically: the reply
  // mailbox is FIFO, so the sender reads the refusal first, and had it
  // taken it, it would have sent to the group itself: carried_by would be
  // its own process and Direct() not empty.)
  // The relay's own answer ends the call.
  ok.secret = secret;
  f.Answer(relay, request.reply_to, ok);
  auto result = pending.get();
  REQUIRE(result.ok());
  REQUIRE(result->receivers.size() == 1);
  CHECK(result->receivers[0].status.ok());
  CHECK(result->receivers[0].carried_by == relay);
  CHECK(f.Direct().empty());
}

TEST_CASE("a multicast sender sends a ticket to each relay below the top of the tree",
          "[multicast][service]") {
  const auto [groups, below] = GENERATE(table<size_t, std::set<size_t>>({
      {3, {1}},           // tops: 0 (for 0-1) and 2
      {7, {1, 2, 3, 5}},  // tops: 0 (for 0-3), 4 (for 4-5) and 6
  }));
  Fixture f;
  auto pending = f.Multicast(groups);
  const std::vector<Sent> sent = f.WaitSent(groups);
  std::map<Gid, uint64_t> nonce_of;   // relay process -> its group's nonce, from the requests
  std::map<Gid, uint64_t> secret_of;  // and its secret
  std::map<Gid, MulticastTicket> tickets;
  std::set<size_t> tops;
  uint64_t id = 0;
  Gid reply_to;
  bool ticket_seen = false;
  for (const Sent& message : sent) {
    REQUIRE(message.tag == kMulticastRequestTag);
    REQUIRE(message.from.process() == kProcess);
    if (IsMulticastTicket(message.bytes)) {
      auto ticket = DecodeMulticastTicket(message.bytes);
      REQUIRE(ticket.ok());
      CHECK(tickets.emplace(message.to.process(), *ticket).second);
      ticket_seen = true;
      continue;
    }
    CHECK_FALSE(ticket_seen);  // the top requests go first
    const MulticastRequest request = DecodeRequest(message);
    id = request.id;
    reply_to = request.reply_to;
    CHECK(message.to == RelayOf(request.groups.front().relay));
    tops.insert(static_cast<size_t>(request.groups.front().relay.host_index()) - 2);
    for (const MulticastGroup& group : request.groups) {
      nonce_of[group.relay] = group.nonce;
      secret_of[group.relay] = group.secret;
    }
  }
  CHECK(tops.size() + tickets.size() == groups);
  REQUIRE(nonce_of.size() == groups);
  std::set<size_t> ticketed;
  for (const auto& [relay, ticket] : tickets) {
    ticketed.insert(static_cast<size_t>(relay.host_index()) - 2);
    CHECK(ticket.id == id);
    CHECK(ticket.source == kSender);
    CHECK(ticket.nonce == nonce_of.at(relay));
    CHECK(ticket.secret == secret_of.at(relay));
    CHECK(ticket.tag == kTag);
    CHECK(ticket.payload_bytes == f.payload.size());
  }
  CHECK(ticketed == below);
  for (size_t top : tops) CHECK_FALSE(below.contains(top));
  // The nonces and secrets differ (each group's own).
  std::set<uint64_t> nonces;
  for (const auto& [relay, nonce] : nonce_of) nonces.insert(nonce);
  for (const auto& [relay, secret] : secret_of) nonces.insert(secret);
  CHECK(nonces.size() == 2 * groups);

  for (size_t g = 0; g < groups; ++g) f.AnswerOk(g, id, reply_to, secret_of.at(RelayProcessOf(g)));
  auto result = pending.get();
  REQUIRE(result.ok());
  for (size_t g = 0; g < groups; ++g) {
    CHECK(result->receivers[g].status.ok());
    CHECK(result->receivers[g].carried_by == RelayProcessOf(g));
  }
  CHECK(f.Direct().empty());
}

// A 7-group call (tops 0 for 0-3, 4 for 4-5, and 6; 0 passes the request
// on to 1 for 1-2, and to 3; 1 to 2) in which a refused send had the
// groups `direct` sent to at once, before any answer: once `sent` messages
// went out, the other groups' relays answer, and each group is carried by
// its relay or (`direct`) by the sender.
void AnswerOthers(Fixture& f, std::future<Result<MulticastResult>>& pending,
                  const std::set<size_t>& direct, size_t sent) {
  std::vector<Gid> sent_to = f.WaitDirect(direct.size());
  std::sort(sent_to.begin(), sent_to.end());
  std::vector<Gid> expected;
  for (size_t g : direct) expected.push_back(ReceiverOf(g));
  CHECK(sent_to == expected);
  const RequestsSeen seen = SeenIn(f.WaitSent(sent));
  for (size_t g = 0; g < 7; ++g) {
    if (!direct.contains(g)) {
      f.AnswerOk(g, seen.id, seen.reply_to, seen.secret_of.at(RelayProcessOf(g)));
    }
  }
  auto result = pending.get();
  REQUIRE(result.ok());
  for (size_t g = 0; g < 7; ++g) {
    INFO(g);
    CHECK(result->receivers[g].status.ok());
    CHECK(result->receivers[g].carried_by == (direct.contains(g) ? kProcess : RelayProcessOf(g)));
  }
  CHECK(f.Direct().size() == direct.size());
}

TEST_CASE("a group whose ticket cannot be sent is sent to at once, with its subtree",
          "[multicast][service]") {
  Fixture f;
  f.no_ticket_to = RelayProcessOf(1);
  auto pending = f.Multicast(7, /*timeout=*/60s);
  // Groups 1 and 2, before any answer (and long before the timeout). Sent:
  // 3 top requests and the tickets to 1 (refused), 3 and 5; none to 2,
  // sent to with 1.
  AnswerOthers(f, pending, {1, 2}, /*sent=*/6);
  std::lock_guard lock(f.mu);
  CHECK(f.sent.size() == 6);
}

TEST_CASE("the groups sent to directly after their top request failed get no ticket",
          "[multicast][service]") {
  Fixture f;
  f.no_request_to = RelayProcessOf(0);
  auto pending = f.Multicast(7, /*timeout=*/60s);
  AnswerOthers(f, pending, {0, 1, 2, 3}, /*sent=*/3);
  // The call is over: all it sent is here. A ticket to group 5's relay
  // only (1-3 were sent to directly).
  std::set<size_t> ticketed;
  std::lock_guard lock(f.mu);
  for (const Sent& message : f.sent) {
    if (IsMulticastTicket(message.bytes)) {
      ticketed.insert(static_cast<size_t>(message.to.host_index()) - 2);
    }
  }
  CHECK(ticketed == std::set<size_t>{5});
}

}  // namespace
}  // namespace tocl::runtime
