// The messages of a multicast (multicast_service.h): a request from the
// sender's reply mailbox (or from a relay passing it on) to a relay
// (internal_threads.h: RelayOf), a ticket from the sender's reply mailbox
// to each relay a request reaches passed on, and a reply from each relay
// to the sender's reply mailbox. Requests and tickets go to the relay's
// mailbox with kMulticastRequestTag; the magic tells them apart.
//
//   request  u32 magic "TMQ2" | u64 request id | u64 source thread |
//            u64 reply-to thread | u32 tag | u32 groups |
//            per group: u64 relay process | u64 nonce | u64 secret |
//                       u32 receivers |
//                       per receiver: u64 thread | u64 seq
//            | u32 wait ms | u64 payload length | payload
//   ticket   u32 magic "TMT2" | u64 request id | u64 source thread |
//            u64 nonce | u64 secret | u32 tag | u64 payload length |
//            u32 wait ms
//   reply    u32 magic "TMA2" | u64 request id | u64 relay process |
//            u64 secret | u32 status code | u16 message length | message |
//            u32 receivers | per receiver: u64 thread | u32 status code |
//                                          u16 message length | message
//
// A request's first group is the relay's own; the others are the subtree
// it passes the message on to (multicast_plan.h). A ticket announces one
// request to one relay (multicast_tickets.h): the sender's process vouches
// for it, since only that process's frames carry its process id; its nonce
// and secret are that relay's group's: the receivers of the group learn its
// nonce (markers and fills carry it), only its relay (and those above it)
// its secret, and the relay carries a passed-on request only when both fit.
// "Wait" is how long the sender waits for the answers
// (MulticastOptions::timeout): a relay keeps neither a ticket nor a request
// waiting for its ticket longer. A reply's status is the relay's own (an
// error: it did not take the message for its group, and the sender sends to
// its receivers itself); the receivers' are per receiver. A reply echoes
// the secret of the group it answers for (the request's first group's, or
// each group's a relay could not pass the request on to): the sender takes
// no answer without it, so a process that knows a call's id and nonces (a
// receiver) but not its secrets can neither end nor fail it.
//
// Decoding checks every count and length against the bytes there are, and
// the ids' forms (a relay is a process, every receiver a thread of its
// relay's host, the reply-to thread of the source's process): requests
// come from any process that can reach ours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/multicast_plan.h"
#include "tocl/gid.h"
#include "tocl/runtime.h"
#include "tocl/status.h"

namespace tocl::runtime {

// Longest error message a reply carries per receiver.
inline constexpr size_t kMaxMulticastMessageBytes = 512;

struct MulticastRequest {
  uint64_t id = 0;
  Gid source;    // the sending thread (the receivers' pairs are its)
  Gid reply_to;  // the sender's reply mailbox
  Tag tag = 0;
  uint32_t wait_ms = 0;                     // the sender's MulticastOptions::timeout
  std::vector<MulticastGroup> groups = {};  // [0]: the relay's own
  std::span<const std::byte> payload = {};  // into the decoded bytes
};

// The request's terms a relay matches against its ticket.
struct MulticastTicket {
  uint64_t id = 0;
  Gid source;           // the sending thread
  uint64_t nonce = 0;   // the group's of the relay it goes to
  uint64_t secret = 0;  // that group's (never sent to receivers)
  Tag tag = 0;
  uint64_t payload_bytes = 0;
  uint32_t wait_ms = 0;
  bool operator==(const MulticastTicket&) const = default;
};

struct MulticastReceiverOutcome {
  Gid thread;
  Status status;
};

struct MulticastReply {
  uint64_t id = 0;
  Gid relay;
  uint64_t secret = 0;  // the answered group's (the sender ignores any other)
  Status status = {};   // the relay's: an error means it did not take the message
  std::vector<MulticastReceiverOutcome> receivers = {};
};

// The request for `groups` (the first is the relay's it goes to).
std::vector<std::byte> EncodeMulticastRequest(const MulticastRequest& header,
                                              std::span<const MulticastGroup> groups);
// InvalidArgument naming what is wrong; `id` and `reply_to` are set when
// the bytes got that far (so the relay can still answer).
Result<MulticastRequest> DecodeMulticastRequest(std::span<const std::byte> bytes, uint64_t& id,
                                                Gid& reply_to);

// The ticket a relay matches `request` against (its first group's).
MulticastTicket TicketOf(const MulticastRequest& request);

// True when `bytes` start with a ticket's magic (else: a request's).
bool IsMulticastTicket(std::span<const std::byte> bytes);
std::vector<std::byte> EncodeMulticastTicket(const MulticastTicket& ticket);
// InvalidArgument naming what is wrong (cut short, too long, a source
// that is not a thread).
Result<MulticastTicket> DecodeMulticastTicket(std::span<const std::byte> bytes);

std::vector<std::byte> EncodeMulticastReply(const MulticastReply& reply);
Result<MulticastReply> DecodeMulticastReply(std::span<const std::byte> bytes);

}  // namespace tocl::runtime
