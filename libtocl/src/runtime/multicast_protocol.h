// The messages of a multicast (multicast_service.h): a request from the
// sender's reply mailbox (or from a relay passing it on) to a relay
// (internal_threads.h: RelayOf), and a reply from each relay to the
// sender's reply mailbox.
//
//   request  u32 magic "TMQ1" | u64 request id | u64 source thread |
//            u64 reply-to thread | u32 tag | u32 groups |
//            per group: u64 relay process | u64 nonce | u32 receivers |
//                       per receiver: u64 thread | u64 seq
//            | u64 payload length | payload
//   reply    u32 magic "TMA1" | u64 request id | u64 relay process |
//            u32 status code | u16 message length | message |
//            u32 receivers | per receiver: u64 thread | u32 status code |
//                                          u16 message length | message
//
// A request's first group is the relay's own; the others are the subtree
// it passes the message on to (multicast_plan.h). A reply's status is the
// relay's own (an error: it did not take the message for its group, and
// the sender sends to its receivers itself); the receivers' are per
// receiver.
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
  std::vector<MulticastGroup> groups = {};  // [0]: the relay's own
  std::span<const std::byte> payload = {};  // into the decoded bytes
};

struct MulticastReceiverOutcome {
  Gid thread;
  Status status;
};

struct MulticastReply {
  uint64_t id = 0;
  Gid relay;
  Status status = {};  // the relay's: an error means it did not take the message
  std::vector<MulticastReceiverOutcome> receivers = {};
};

// The request for `groups` (the first is the relay's it goes to).
std::vector<std::byte> EncodeMulticastRequest(const MulticastRequest& header,
                                              std::span<const MulticastGroup> groups);
// InvalidArgument naming what is wrong; `id` and `reply_to` are set when
// the bytes got that far (so the relay can still answer).
Result<MulticastRequest> DecodeMulticastRequest(std::span<const std::byte> bytes, uint64_t& id,
                                                Gid& reply_to);

std::vector<std::byte> EncodeMulticastReply(const MulticastReply& reply);
Result<MulticastReply> DecodeMulticastReply(std::span<const std::byte> bytes);

}  // namespace tocl::runtime
