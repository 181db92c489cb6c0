#include "runtime/multicast_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/logger.h"
#include "runtime/internal_threads.h"
#include "runtime/send_side.h"
#include "security/random_bytes.h"

namespace tocl::runtime {

using Clock = std::chrono::steady_clock;

// --- the sender ---------------------------------------------------------------

Status MulticastService::CheckReceivers(Gid from, std::span<const Gid> to) const {
  if (to.empty()) return InvalidArgument("multicast: the list of receivers is empty");
  for (Gid receiver : to) {
    if (!receiver.is_thread()) {
      return InvalidArgument(
          fmt::format("multicast: receiver {} is not a thread id", receiver.ToString()));
    }
    if (IsInternalThread(receiver)) return ReservedThread(receiver);
    if (receiver == from) {
      return InvalidArgument(
          fmt::format("multicast: the sender {} is among its receivers", from.ToString()));
    }
  }
  std::vector<Gid> sorted(to.begin(), to.end());
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    return InvalidArgument(
        fmt::format("multicast: receiver {} is in the list twice", twice->ToString()));
  }
  return Status::Ok();
}

Result<MulticastResult> MulticastService::Send(Gid from, std::span<const Gid> to, Tag tag,
                                               std::span<const std::byte> payload,
                                               const MulticastOptions& options) {
  if (shutting_down_.load()) return Unavailable("the runtime is shutting down");
  TOCL_ASSIGN_OR_RETURN(Mailbox * own, hooks_.sender_mailbox(from));
  TOCL_RETURN_IF_ERROR(CheckSendableTag(tag));
  if (payload.size() > kMaxMessageBytes) {
    return InvalidArgument(fmt::format("a {} byte message is larger than the limit of {} bytes",
                                       payload.size(), kMaxMessageBytes));
  }
  TOCL_RETURN_IF_ERROR(CheckReceivers(from, to));

  // A nonce for each group (wire/frame.h), drawn before anything is sent
  // (at most one group per receiver).
  std::vector<uint64_t> nonces(to.size());
  TOCL_RETURN_IF_ERROR(security::FillRandom(std::as_writable_bytes(std::span(nonces))));
  // And a secret for each group's relay (multicast_protocol.h): in its
  // request, its ticket and its answers only.
  std::vector<uint64_t> secrets(to.size());
  TOCL_RETURN_IF_ERROR(security::FillRandom(std::as_writable_bytes(std::span(secrets))));

  MulticastResult result;
  result.receivers.resize(to.size());
  RelayedCall relayed{.from = from, .tag = tag, .payload = payload, .wake = own};
  std::vector<NumberedReceiver> remote;
  for (size_t i = 0; i < to.size(); ++i) {
    const Gid receiver = to[i];
    MulticastOutcome& outcome = result.receivers[i];
    outcome.receiver = receiver;
    outcome.carried_by = process_;
    const bool direct = receiver.process() == process_ ||
                        (receiver.host() == process_.host() && !options.relay_local);
    if (direct) {
      // This process (a mailbox) or this host (an shm copy): no link.
      outcome.status = hooks_.send(from, receiver, tag, payload);
      if (receiver.process() != process_) ++result.copies_sent;
      continue;
    }
    remote.push_back(NumberedReceiver{receiver});
    relayed.index_of[receiver.raw()] = i;
  }
  relayed.groups = GroupByHost(std::move(remote));
  // Its place among our messages to each receiver, whoever carries it: a
  // marker in the pair now, naming the group's relay and holding a nonce
  // only this call knows (wire/frame.h: nobody else can have the relay
  // carry a fill that fits it).
  for (MulticastGroup& group : relayed.groups) {
    group.nonce = nonces[static_cast<size_t>(&group - relayed.groups.data())];
    group.secret = secrets[static_cast<size_t>(&group - relayed.groups.data())];
    std::erase_if(group.receivers, [&](NumberedReceiver& receiver) {
      auto seq =
          hooks_.post_marker(from, receiver.thread, tag, payload.size(), group.relay, group.nonce);
      if (!seq.ok()) {
        result.receivers[relayed.index_of.at(receiver.thread.raw())].status = seq.status();
        return true;
      }
      receiver.seq = *seq;
      return false;
    });
  }
  std::erase_if(relayed.groups,
                [](const MulticastGroup& group) { return group.receivers.empty(); });
  if (!relayed.groups.empty()) RelayAndWait(options, relayed, result);
  return result;
}

void MulticastService::RelayAndWait(const MulticastOptions& options, RelayedCall& call,
                                    MulticastResult& result) {
  const std::vector<MulticastGroup>& groups = call.groups;
  call.answered.assign(groups.size(), false);
  call.passed_on.assign(groups.size(), false);
  std::vector<Gid> relays;
  for (const MulticastGroup& group : groups) relays.push_back(group.relay);
  auto acquired = replies_.Acquire(relays, "Multicast");
  if (!acquired.ok()) {
    for (const MulticastGroup& group : groups) {
      SendGroupDirectly(group, acquired.status(), call, result);
    }
    return;
  }
  const ReplyMailboxes::Lease mailbox(replies_, *acquired);
  call.subtree_sizes = SubtreeSizes(groups);

  MulticastRequest request;
  request.id = next_request_.fetch_add(1, std::memory_order_relaxed);
  request.source = call.from;
  request.reply_to = (*mailbox).gid();
  request.tag = call.tag;
  request.payload = call.payload;
  request.wait_ms = static_cast<uint32_t>(
      std::clamp<int64_t>(options.timeout.count(), 0, std::numeric_limits<uint32_t>::max()));
  call.request_id = request.id;
  size_t at = 0;
  for (std::span<const MulticastGroup> subtree : SplitBinomial(groups)) {
    const Gid relay = RelayOf(subtree.front().relay);
    Status sent = hooks_.send(request.reply_to, relay, kMulticastRequestTag,
                              EncodeMulticastRequest(request, subtree));
    ++result.copies_sent;
    if (!sent.ok()) {
      RelayFailed(at, sent.WithContext(fmt::format("multicast relay {}", relay.ToString())), call,
                  result);
    }
    at += subtree.size();
  }
  // After the top requests: a ticket's send may wait (back-pressure, a
  // connect), and should delay only its own subtree. A relay that gets its
  // request before its ticket waits for it.
  SendTickets(request, call, result);

  const auto deadline = Clock::now() + options.timeout;
  size_t failures_seen = 0;
  auto new_failure = [&]() -> Status {
    return replies_.FailureCount(mailbox.get()) > failures_seen ? Unavailable("a relay failed")
                                                                : Status::Ok();
  };
  const Selector replies{Gid(), kMulticastReplyTag};
  while (std::find(call.answered.begin(), call.answered.end(), false) != call.answered.end()) {
    auto message = receive_.ReceiveOn(*mailbox, replies, deadline, new_failure);
    if (message.ok()) {
      OnReply(*message, call, result);
      continue;
    }
    if (message.status().code() == StatusCode::kUnavailable) {
      // Processes or hosts of relays went away (the directory said so).
      const auto failures = replies_.Failures(mailbox.get());
      for (size_t f = failures_seen; f < failures.size(); ++f) {
        for (size_t g = 0; g < groups.size(); ++g) {
          if (groups[g].relay == failures[f].first && !call.answered[g]) {
            RelayFailed(g, failures[f].second, call, result);
          }
        }
      }
      failures_seen = failures.size();
      continue;
    }
    // The deadline (or shutdown): whoever did not answer is sent to
    // directly (a shutdown fails those sends at once).
    const Status why =
        message.status().code() == StatusCode::kDeadlineExceeded
            ? DeadlineExceeded(fmt::format("no answer within {} ms", options.timeout.count()))
            : message.status();
    for (size_t g = 0; g < groups.size(); ++g) {
      if (!call.answered[g]) SendGroupDirectly(groups[g], why, call, result);
    }
    return;
  }
}

void MulticastService::SendTickets(const MulticastRequest& request, RelayedCall& call,
                                   MulticastResult& result) {
  std::span<const MulticastGroup> groups(call.groups);
  std::vector<bool> top(groups.size(), false);
  for (std::span<const MulticastGroup> subtree : SplitBinomial(groups)) {
    top[static_cast<size_t>(subtree.data() - groups.data())] = true;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (top[g]) continue;  // its request comes from us: our own word
    // Sent to directly already (the request or ticket of a relay above
    // it failed): no one passes its request on.
    if (call.answered[g]) continue;
    MulticastTicket ticket = TicketOf(request);
    ticket.nonce = groups[g].nonce;
    ticket.secret = groups[g].secret;
    const Gid relay = RelayOf(groups[g].relay);
    Status sent =
        hooks_.send(request.reply_to, relay, kMulticastRequestTag, EncodeMulticastTicket(ticket));
    if (!sent.ok()) {
      // That relay refuses the request (no ticket) or is gone, so nothing
      // below it is carried either: its subtree is sent to now.
      RelayFailed(
          g, sent.WithContext(fmt::format("no ticket to multicast relay {}", relay.ToString())),
          call, result);
    }
  }
}

void MulticastService::RelayFailed(size_t index, const Status& why, RelayedCall& call,
                                   MulticastResult& result) {
  if (call.passed_on[index]) return;
  for (size_t k = index; k < index + call.subtree_sizes[index]; ++k) {
    SendGroupDirectly(call.groups[k], why, call, result);
  }
}

void MulticastService::OnReply(const Buffer& message, RelayedCall& call, MulticastResult& result) {
  auto reply = DecodeMulticastReply(message.span());
  if (!reply.ok()) {
    Log().warn("tocl: multicast: a bad answer from {}: {}", message.source().ToString(),
               reply.status().ToString());
    return;
  }
  if (reply->id != call.request_id) return;  // a late answer to an earlier call
  // Only a relay thread answers (multicast_plan.h: AnsweredGroup).
  const Gid source = message.source();
  const std::optional<size_t> answered =
      source == RelayOf(source.process())
          ? AnsweredGroup(call.groups, call.subtree_sizes, source.process(), reply->relay,
                          reply->status.ok())
          : std::nullopt;
  if (!answered) {
    Log().warn("tocl: multicast: ignoring an answer for relay {} from {}: not its tree's",
               reply->relay.ToString(), message.source().ToString());
    return;
  }
  const size_t g = *answered;
  const MulticastGroup& group = call.groups[g];
  if (reply->secret != group.secret) {
    // Only its tree knows the group's secret: someone else's words.
    Log().warn("tocl: multicast: ignoring an answer for relay {} from {}: not the group's secret",
               reply->relay.ToString(), message.source().ToString());
    return;
  }
  if (call.answered[g]) return;  // sent to directly already
  if (!reply->status.ok()) {
    // The relay did not take it, or its parent could not pass it on to
    // it and answers for it: nothing went on from it either.
    RelayFailed(g, reply->status, call, result);
    return;
  }
  call.passed_on[g] = true;
  call.answered[g] = true;
  for (const NumberedReceiver& receiver : group.receivers) {
    const auto outcome = std::find_if(
        reply->receivers.begin(), reply->receivers.end(),
        [&](const MulticastReceiverOutcome& o) { return o.thread == receiver.thread; });
    MulticastOutcome& mine = result.receivers[call.index_of.at(receiver.thread.raw())];
    const Status status =
        outcome == reply->receivers.end()
            ? Unavailable(fmt::format("relay {} said nothing about it", group.relay.ToString()))
            : outcome->status;
    const StatusCode code = status.code();
    if (status.ok() || code == StatusCode::kNotFound || code == StatusCode::kFailedPrecondition) {
      // Given, or the receiver is gone (as the relay sees it: should it
      // be alive after all, its pair is told that no fill comes).
      mine.status = status;
      mine.carried_by = group.relay;
      if (!status.ok()) hooks_.post_no_fill(call.from, receiver.thread, receiver.seq);
      continue;
    }
    // The relay could not give it to a receiver that may be alive: we try
    // ourselves (the number must be filled).
    Log().info("tocl: multicast: relay {} could not deliver to {} ({}): sending it directly",
               group.relay.ToString(), receiver.thread.ToString(), status.ToString());
    SendReceiverDirectly(group, receiver, call, result);
  }
}

void MulticastService::SendGroupDirectly(const MulticastGroup& group, const Status& why,
                                         RelayedCall& call, MulticastResult& result) {
  const size_t g = static_cast<size_t>(&group - call.groups.data());
  if (call.answered[g]) return;
  call.answered[g] = true;
  Log().info("tocl: multicast: relay {} ({}): sending its {} receivers the message directly",
             group.relay.ToString(), why.ToString(), group.receivers.size());
  for (const NumberedReceiver& receiver : group.receivers) {
    SendReceiverDirectly(group, receiver, call, result);
  }
}

void MulticastService::SendReceiverDirectly(const MulticastGroup& group,
                                            const NumberedReceiver& receiver, RelayedCall& call,
                                            MulticastResult& result) {
  MulticastOutcome& outcome = result.receivers[call.index_of.at(receiver.thread.raw())];
  outcome.carried_by = process_;
  // The marker's number: a receiver that got it from the relay drops
  // this second copy.
  outcome.status = hooks_.send_fill(call.from, receiver.thread, call.tag, call.payload,
                                    FillOf{receiver.seq, group.nonce}, *call.wake);
  ++result.copies_sent;
  if (!outcome.status.ok()) hooks_.post_no_fill(call.from, receiver.thread, receiver.seq);
}

}  // namespace tocl::runtime
