#include "runtime/multicast_service.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/logger.h"
#include "runtime/internal_threads.h"
#include "runtime/send_side.h"

namespace tocl::runtime {

using Clock = std::chrono::steady_clock;

MulticastService::~MulticastService() {
  Stop();
}

void MulticastService::Open(Gid process) {
  process_ = process;
  relay_ = receive_.AddInternal(kRelayThread);
}

void MulticastService::Start() {
  server_ = std::thread([this] { Serve(); });
}

void MulticastService::Stop() {
  if (server_.joinable()) server_.join();
}

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

  MulticastResult result;
  result.receivers.resize(to.size());
  Relayed relayed;
  relayed.wake = own;
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
  // marker in the pair now, naming the group's relay.
  for (MulticastGroup& group : relayed.groups) {
    std::erase_if(group.receivers, [&](NumberedReceiver& receiver) {
      auto seq = hooks_.post_marker(from, receiver.thread, tag, payload.size(), group.relay);
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
  if (!relayed.groups.empty()) RelayAndWait(from, tag, payload, options, relayed, result);
  return result;
}

std::optional<size_t> MulticastService::AnsweredGroup(const Relayed& relayed,
                                                      const std::vector<size_t>& subtree_sizes,
                                                      Gid source, Gid relay) const {
  const std::vector<MulticastGroup>& groups = relayed.groups;
  const auto group = std::find_if(groups.begin(), groups.end(),
                                  [&](const MulticastGroup& g) { return g.relay == relay; });
  if (group == groups.end()) return std::nullopt;
  const size_t g = static_cast<size_t>(group - groups.begin());
  // Its relay answers for it, or a relay above it in the tree that could
  // not pass the message on to it (PassOn): one whose subtree holds it.
  for (size_t a = 0; a <= g; ++a) {
    if (a + subtree_sizes[a] > g && source == RelayOf(groups[a].relay)) return g;
  }
  return std::nullopt;
}

void MulticastService::RelayAndWait(Gid from, Tag tag, std::span<const std::byte> payload,
                                    const MulticastOptions& options, Relayed& relayed,
                                    MulticastResult& result) {
  const std::vector<MulticastGroup>& groups = relayed.groups;
  relayed.answered.assign(groups.size(), false);
  std::vector<Gid> relays;
  for (const MulticastGroup& group : groups) relays.push_back(group.relay);
  auto acquired = replies_.Acquire(relays, "Multicast");
  if (!acquired.ok()) {
    for (const MulticastGroup& group : groups) {
      SendGroupDirectly(from, tag, payload, group, acquired.status(), relayed, result);
    }
    return;
  }
  const ReplyMailboxes::Lease mailbox(replies_, *acquired);
  const std::vector<size_t> subtree_sizes = SubtreeSizes(groups);
  // A relay that answered had passed the message on to its subtree first.
  std::vector<bool> passed_on(groups.size(), false);
  // A relay that failed (or refused) before it answered: its group and,
  // since the message may not have gone on from it, every group of its
  // subtree that has not answered.
  auto relay_failed = [&](size_t index, const Status& why) {
    if (passed_on[index]) return;
    for (size_t k = index; k < index + subtree_sizes[index]; ++k) {
      SendGroupDirectly(from, tag, payload, groups[k], why, relayed, result);
    }
  };

  MulticastRequest request;
  request.id = next_request_.fetch_add(1, std::memory_order_relaxed);
  request.source = from;
  request.reply_to = (*mailbox).gid();
  request.tag = tag;
  request.payload = payload;
  size_t at = 0;
  for (std::span<const MulticastGroup> subtree : SplitBinomial(groups)) {
    const Gid relay = RelayOf(subtree.front().relay);
    Status sent = hooks_.send(request.reply_to, relay, kMulticastRequestTag,
                              EncodeMulticastRequest(request, subtree));
    ++result.copies_sent;
    if (!sent.ok()) {
      relay_failed(at, sent.WithContext(fmt::format("multicast relay {}", relay.ToString())));
    }
    at += subtree.size();
  }

  const auto deadline = Clock::now() + options.timeout;
  size_t failures_seen = 0;
  auto new_failure = [&]() -> Status {
    return replies_.FailureCount(mailbox.get()) > failures_seen ? Unavailable("a relay failed")
                                                                : Status::Ok();
  };
  const Selector replies{Gid(), kMulticastReplyTag};
  while (std::find(relayed.answered.begin(), relayed.answered.end(), false) !=
         relayed.answered.end()) {
    auto message = receive_.ReceiveOn(*mailbox, replies, deadline, new_failure);
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kUnavailable) {
        // Processes or hosts of relays went away (the directory said so).
        const auto failures = replies_.Failures(mailbox.get());
        for (size_t f = failures_seen; f < failures.size(); ++f) {
          for (size_t g = 0; g < groups.size(); ++g) {
            if (groups[g].relay == failures[f].first && !relayed.answered[g]) {
              relay_failed(g, failures[f].second);
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
        if (!relayed.answered[g])
          SendGroupDirectly(from, tag, payload, groups[g], why, relayed, result);
      }
      return;
    }
    auto reply = DecodeMulticastReply(message->span());
    if (!reply.ok()) {
      Log().warn("tocl: multicast: a bad answer from {}: {}", message->source().ToString(),
                 reply.status().ToString());
      continue;
    }
    if (reply->id != request.id) continue;  // a late answer to an earlier call
    const std::optional<size_t> answered =
        AnsweredGroup(relayed, subtree_sizes, message->source(), reply->relay);
    if (!answered) {
      Log().warn("tocl: multicast: ignoring an answer for relay {} from {}: not its tree's",
                 reply->relay.ToString(), message->source().ToString());
      continue;
    }
    const size_t g = *answered;
    if (relayed.answered[g]) continue;  // sent to directly already
    if (!reply->status.ok()) {
      // The relay did not take it, or its parent could not pass it on to
      // it and answers for it: nothing went on from it either.
      relay_failed(g, reply->status);
      continue;
    }
    passed_on[g] = true;
    relayed.answered[g] = true;
    for (const NumberedReceiver& receiver : groups[g].receivers) {
      const auto outcome = std::find_if(
          reply->receivers.begin(), reply->receivers.end(),
          [&](const MulticastReceiverOutcome& o) { return o.thread == receiver.thread; });
      MulticastOutcome& mine = result.receivers[relayed.index_of.at(receiver.thread.raw())];
      const Status status = outcome == reply->receivers.end()
                                ? Unavailable(fmt::format("relay {} said nothing about it",
                                                          groups[g].relay.ToString()))
                                : outcome->status;
      const StatusCode code = status.code();
      if (status.ok() || code == StatusCode::kNotFound || code == StatusCode::kFailedPrecondition) {
        // Given, or the receiver is gone (as the relay sees it: should
        // it be alive after all, its pair is told that no fill comes).
        mine.status = status;
        mine.carried_by = groups[g].relay;
        if (!status.ok()) hooks_.post_no_fill(from, receiver.thread, receiver.seq);
        continue;
      }
      // The relay could not give it to a receiver that may be alive: we
      // try ourselves (the number must be filled).
      Log().info("tocl: multicast: relay {} could not deliver to {} ({}): sending it directly",
                 groups[g].relay.ToString(), receiver.thread.ToString(), status.ToString());
      SendReceiverDirectly(from, tag, payload, receiver, relayed, result);
    }
  }
}

void MulticastService::SendGroupDirectly(Gid from, Tag tag, std::span<const std::byte> payload,
                                         const MulticastGroup& group, const Status& why,
                                         Relayed& relayed, MulticastResult& result) {
  const size_t g = static_cast<size_t>(&group - relayed.groups.data());
  if (relayed.answered[g]) return;
  relayed.answered[g] = true;
  Log().info("tocl: multicast: relay {} ({}): sending its {} receivers the message directly",
             group.relay.ToString(), why.ToString(), group.receivers.size());
  for (const NumberedReceiver& receiver : group.receivers) {
    SendReceiverDirectly(from, tag, payload, receiver, relayed, result);
  }
}

void MulticastService::SendReceiverDirectly(Gid from, Tag tag, std::span<const std::byte> payload,
                                            const NumberedReceiver& receiver, Relayed& relayed,
                                            MulticastResult& result) {
  MulticastOutcome& outcome = result.receivers[relayed.index_of.at(receiver.thread.raw())];
  outcome.carried_by = process_;
  // The marker's number: a receiver that got it from the relay drops
  // this second copy.
  outcome.status =
      hooks_.send_fill(from, receiver.thread, tag, payload, receiver.seq, *relayed.wake);
  ++result.copies_sent;
  if (!outcome.status.ok()) hooks_.post_no_fill(from, receiver.thread, receiver.seq);
}

// --- the relay ------------------------------------------------------------------

namespace {

// What a relay refuses to carry (its receivers verify the rest: a fill is
// taken only where its sender's marker names this relay): a message of or
// to one of a runtime's own threads, or with a tag no Send may use.
Status CheckRequestEnds(const MulticastRequest& request) {
  if (!request.source.is_thread() || IsInternalThread(request.source)) {
    return InvalidArgument(
        fmt::format("a multicast from {}: not an application's thread", request.source.ToString()));
  }
  TOCL_RETURN_IF_ERROR(CheckSendableTag(request.tag));
  for (const MulticastGroup& group : request.groups) {
    for (const NumberedReceiver& receiver : group.receivers) {
      if (!receiver.thread.is_thread() || IsInternalThread(receiver.thread)) {
        return InvalidArgument(fmt::format("a multicast to {}: not an application's thread",
                                           receiver.thread.ToString()));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

void MulticastService::Serve() {
  const Selector requests{Gid(), kMulticastRequestTag};
  for (;;) {
    auto request = receive_.ReceiveOn(*relay_, requests, Clock::time_point::max(), {});
    if (!request.ok()) {
      // Cancelled: the runtime is shutting down.
      if (request.status().code() != StatusCode::kCancelled) {
        Log().error("tocl: the multicast relay stops: {}", request.status().ToString());
      }
      return;
    }
    Handle(*request);
  }
}

void MulticastService::Handle(const Buffer& message) {
  const Gid source = message.source();
  uint64_t id = 0;
  Gid reply_to;
  auto request = DecodeMulticastRequest(message.span(), id, reply_to);
  Status refused;
  if (!request.ok()) {
    refused = request.status();
  } else if (!IsInternalThread(source) || !IsInternalThread(request->reply_to)) {
    refused = InvalidArgument(
        fmt::format("a multicast request from {} answered to {}: not the runtime's mailboxes",
                    source.ToString(), request->reply_to.ToString()));
  } else if (request->groups.front().relay != process_) {
    refused =
        InvalidArgument(fmt::format("relay {} got the request for the group of {}",
                                    process_.ToString(), request->groups.front().relay.ToString()));
  } else if (source.thread_index() != kRelayThread &&
             source.process() != request->source.process()) {
    // From a sender's own mailbox (not a relay passing it on): for a
    // thread of its own process only.
    refused = InvalidArgument(fmt::format("a multicast request from {} for a message of {}",
                                          source.ToString(), request->source.ToString()));
  } else {
    refused = CheckRequestEnds(*request);
  }
  if (!refused.ok()) {
    Log().warn("tocl: multicast relay: a bad request from {}: {}", source.ToString(),
               refused.ToString());
    // Answered when it says where to: its sender then sends to its
    // receivers itself.
    if (reply_to.is_thread() && IsInternalThread(reply_to)) {
      Answer(reply_to, MulticastReply{.id = id, .relay = process_, .status = refused});
    }
    return;
  }
  PassOn(*request);
  MulticastReply reply{.id = request->id, .relay = process_};
  for (const NumberedReceiver& receiver : request->groups.front().receivers) {
    Status status = shutting_down_.load()
                        ? Unavailable("the relay is shutting down")
                        : hooks_.send_fill(request->source, receiver.thread, request->tag,
                                           request->payload, receiver.seq, *relay_);
    reply.receivers.push_back(MulticastReceiverOutcome{receiver.thread, std::move(status)});
  }
  Answer(request->reply_to, reply);
}

void MulticastService::PassOn(const MulticastRequest& request) {
  std::span<const MulticastGroup> below(request.groups);
  below = below.subspan(1);
  for (std::span<const MulticastGroup> subtree : SplitBinomial(below)) {
    const Gid relay = RelayOf(subtree.front().relay);
    Status sent = hooks_.send(RelayOf(process_), relay, kMulticastRequestTag,
                              EncodeMulticastRequest(request, subtree));
    if (sent.ok()) continue;
    // Its groups hear nothing from us: their sender sends to them itself.
    const Status why = sent.WithContext(fmt::format("relay {} could not pass the message on to {}",
                                                    process_.ToString(), relay.ToString()));
    for (const MulticastGroup& group : subtree) {
      Answer(request.reply_to,
             MulticastReply{.id = request.id, .relay = group.relay, .status = why});
    }
  }
}

void MulticastService::Answer(Gid reply_to, const MulticastReply& reply) {
  Status sent =
      hooks_.send(RelayOf(process_), reply_to, kMulticastReplyTag, EncodeMulticastReply(reply));
  if (!sent.ok()) {
    Log().warn("tocl: multicast relay: cannot answer {}: {}", reply_to.ToString(), sent.ToString());
  }
}

}  // namespace tocl::runtime
