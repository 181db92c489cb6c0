// Multicast (tocl/multicast.h), the sender's side (Send: the receivers
// numbered in their pairs, grouped by host, the requests to the relays of
// a binomial tree, the answers awaited, a failed relay's receivers sent to
// directly), and the relay every runtime runs (multicast_relay.h), which
// it owns.
//
// Order and identity (wire/frame.h: markers and fills): for each receiver
// on another host the sender posts a marker into the (sender, receiver)
// pair through its own send queue, like a Send, naming the receiver's
// relay; the marker takes the message's number there. The relay then
// carries the message to the receiver as a fill for that number
// (SendQueue::PostNumbered, LongSender::SendFill, wire::kFlagRelayed), and
// the receiver's pair order (pair_order.h) delivers it where the marker
// stands, taking it only from that relay or from the sender's own process.
// A receiver in the relay's own process gets it through its pair order
// too. Whenever a relay does not deliver (it failed, refused, did not
// answer in time, or reported an error for a receiver that is not gone),
// the sender sends the fill itself; when even that fails it tells the
// receiver that no fill comes (a sender's abort: PairOrder::Skip), so the
// pair never stalls on the number.
//
// Identity of a request (multicast_tickets.h): a relay carries a request
// passed on to it only with a ticket from the sender's process, which
// Send sends, after the top requests, to each relay below the top of the
// tree (the top ones get the request from this process itself).
//
// Requests and replies are ordinary messages between internal mailboxes
// (multicast_protocol.h): the sender's reply mailbox (reply_mailboxes.h,
// failed at once when a relay's process exits or its host goes down) and
// the relays' kRelayThread.
//
// It sees the runtime only through its hooks (multicast_hooks.h).
//
// Threading: Send from any thread, several at once; Open, Start and Stop
// from Runtime::Start and Runtime::Impl::Shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/mailbox.h"
#include "runtime/multicast_hooks.h"
#include "runtime/multicast_plan.h"
#include "runtime/multicast_protocol.h"
#include "runtime/multicast_relay.h"
#include "runtime/receive_side.h"
#include "runtime/reply_mailboxes.h"
#include "runtime/send_queue.h"
#include "tocl/multicast.h"
#include "tocl/runtime.h"

namespace tocl::runtime {

class MulticastService {
 public:
  // `receive`, `replies` and `shutting_down` must outlive this.
  MulticastService(ReceiveSide& receive, ReplyMailboxes& replies,
                   const std::atomic<bool>& shutting_down, MulticastHooks hooks)
      : receive_(receive),
        replies_(replies),
        shutting_down_(shutting_down),
        hooks_(std::move(hooks)),
        relay_(receive, shutting_down, hooks_) {}
  MulticastService(const MulticastService&) = delete;
  MulticastService& operator=(const MulticastService&) = delete;

  // MulticastRelay's: the relay of `process` (before the endpoints are
  // published), its thread started and ended.
  void Open(Gid process) {
    process_ = process;
    relay_.Open(process);
  }
  void Start() { relay_.Start(); }
  void Stop() { relay_.Stop(); }

  // Runtime::Multicast with a list (tocl/multicast.h): `to` checked here.
  Result<MulticastResult> Send(Gid from, std::span<const Gid> to, Tag tag,
                               std::span<const std::byte> payload, const MulticastOptions& options);

 private:
  // One call's receivers on other hosts, numbered and grouped, and what
  // became of each of them (their index in the caller's list).
  struct RelayedCall {
    Gid from;
    Tag tag = 0;
    std::span<const std::byte> payload;
    Mailbox* wake = nullptr;  // the sending thread's
    std::vector<MulticastGroup> groups = {};
    std::unordered_map<uint64_t, size_t> index_of = {};  // receiver's raw gid -> its outcome
    uint64_t request_id = 0;
    std::vector<size_t> subtree_sizes = {};  // per group (SubtreeSizes)
    std::vector<bool> answered = {};         // per group: answered, or sent to directly
    std::vector<bool> passed_on = {};        // per group: its relay answered (so passed it on)
  };

  // Checks of the list (InvalidArgument).
  Status CheckReceivers(Gid from, std::span<const Gid> to) const;
  // Sends the requests down the tree and waits for every group's answer,
  // or its relay's failure, or the deadline; groups unanswered then are
  // sent to directly.
  void RelayAndWait(const MulticastOptions& options, RelayedCall& call, MulticastResult& result);
  // A ticket (multicast_tickets.h) to the relay of each of the call's
  // groups that gets `request` passed on by a relay above it (the top ones
  // get it from us), each with its group's nonce and secret: only what we announced
  // is carried. A group whose ticket cannot be sent is sent to directly at
  // once, with its subtree (RelayFailed: its relay refuses the request).
  void SendTickets(const MulticastRequest& request, RelayedCall& call, MulticastResult& result);
  // One answer to the call's request: its group's outcomes taken, or the
  // group (and those of its subtree) sent to directly.
  void OnReply(const Buffer& message, RelayedCall& call, MulticastResult& result);
  // The relay of group `index` failed (or refused) before it answered:
  // its group and, since the message may not have gone on from it, every
  // group of its subtree that has not answered are sent to directly.
  void RelayFailed(size_t index, const Status& why, RelayedCall& call, MulticastResult& result);
  // Sends `group`'s receivers the message from this process itself (with
  // their numbers): its relay failed or said nothing in time.
  void SendGroupDirectly(const MulticastGroup& group, const Status& why, RelayedCall& call,
                         MulticastResult& result);
  // Sends `receiver` (of `group`) the fill for its number from this
  // process itself; when that fails, tells it that none comes.
  void SendReceiverDirectly(const MulticastGroup& group, const NumberedReceiver& receiver,
                            RelayedCall& call, MulticastResult& result);

  ReceiveSide& receive_;
  ReplyMailboxes& replies_;
  const std::atomic<bool>& shutting_down_;
  const MulticastHooks hooks_;
  Gid process_;  // set by Open
  std::atomic<uint64_t> next_request_{1};
  MulticastRelay relay_;
};

}  // namespace tocl::runtime
