// Where a multicast goes (multicast_service.h): its receivers on other
// hosts grouped by host, a relay process per group, and the binomial tree
// over the groups along which the relays pass the message on.
//
// A group's relay is the process of its lowest receiver. A node of the
// tree (the sender, or a relay once its own group is taken off) passes the
// message to the groups it is responsible for by cutting them into
// subtrees of ceil(n/2), then ceil(rest/2), ... groups: the first group of
// each subtree is the relay it sends to, which does the same with the rest
// of that subtree. So a node sends ceil(log2(n + 1)) copies and the tree is
// that deep: 1 for one group, 2 for two or three, 3 for up to seven.
//
// Pure functions: no runtime, unit-tested alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tocl/gid.h"

namespace tocl::runtime {

// A receiver and the multicast's number in its (sender, receiver) pair.
struct NumberedReceiver {
  Gid thread;
  uint64_t seq = 0;
  bool operator==(const NumberedReceiver&) const = default;
};

struct MulticastGroup {
  Gid relay;  // a process of the group's host
  std::vector<NumberedReceiver> receivers = {};
  // The call's secret for this group (wire/frame.h: markers and fills):
  // in the markers its receivers get and in the fills its relay sends.
  uint64_t nonce = 0;
  // The call's secret for this group's relay: only in the requests and
  // tickets that reach the relay and in its answers (never in frames to
  // receivers), so that another receiver process of the group, which
  // learns the nonce, cannot make a request that fits the ticket.
  uint64_t secret = 0;
  bool operator==(const MulticastGroup&) const = default;
};

// `receivers` grouped by host (hosts in Gid order, receivers in Gid order
// in each), each group's relay the process of its first receiver.
std::vector<MulticastGroup> GroupByHost(std::vector<NumberedReceiver> receivers);

// The subtrees a node passes the message on to, given the groups it is
// responsible for (without its own): each subtree's first group is the
// relay it goes to. Empty for none.
std::vector<std::span<const MulticastGroup>> SplitBinomial(std::span<const MulticastGroup> groups);

// For each of `groups` (as the sender gives them to SplitBinomial), how
// many groups its subtree holds (itself included): the groups whose
// message went through it.
std::vector<size_t> SubtreeSizes(std::span<const MulticastGroup> groups);

// The one of the sender's `groups` (with their SubtreeSizes) that an
// answer for the group of relay `for_relay` is about, if process
// `answerer` (its relay thread answered) may answer for it: that group's
// relay, or (only when `ok` is false: it could not pass the request on) a
// relay above it in the tree, whose subtree holds it. Else none (the
// answer is ignored).
std::optional<size_t> AnsweredGroup(std::span<const MulticastGroup> groups,
                                    std::span<const size_t> subtree_sizes, Gid answerer,
                                    Gid for_relay, bool ok);

}  // namespace tocl::runtime
