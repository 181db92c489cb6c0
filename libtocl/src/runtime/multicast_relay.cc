#include "runtime/multicast_relay.h"

#include <fmt/format.h>

#include "core/logger.h"
#include "runtime/internal_threads.h"

namespace tocl::runtime {

using Clock = std::chrono::steady_clock;

MulticastRelay::~MulticastRelay() {
  Stop();
}

void MulticastRelay::Open(Gid process) {
  process_ = process;
  relay_ = receive_.AddInternal(kRelayThread);
}

void MulticastRelay::Start() {
  server_ = std::thread([this] { Serve(); });
}

void MulticastRelay::Stop() {
  if (server_.joinable()) server_.join();
}

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

void MulticastRelay::Serve() {
  const Selector requests{Gid(), kMulticastRequestTag};
  std::vector<Book::Settled> settled;
  for (;;) {
    auto message = receive_.ReceiveOn(*relay_, requests, book_.NextDeadline(), {});
    if (message.ok()) {
      Handle(std::move(*message), settled);
    } else if (message.status().code() != StatusCode::kDeadlineExceeded) {
      // Cancelled: the runtime is shutting down.
      if (message.status().code() != StatusCode::kCancelled) {
        Log().error("tocl: the multicast relay stops: {}", message.status().ToString());
      }
      // The waiting requests' buffers go now, before the runtime's pools
      // (unanswered: their senders fall back after their timeout).
      book_.Expire(Clock::time_point::max(), settled);
      return;
    }
    // Expired ones are settled after every message too, so a steady
    // stream of messages does not keep them waiting past their end.
    book_.Expire(Clock::now(), settled);
    for (Book::Settled& request : settled) Settle(request);
    settled.clear();
  }
}

void MulticastRelay::Handle(Buffer message, std::vector<Book::Settled>& settled) {
  const Gid source = message.source();
  if (IsMulticastTicket(message.span())) {
    // From a sender's reply mailbox; it vouches for its own process only
    // (TicketBook::AddTicket).
    auto ticket = DecodeMulticastTicket(message.span());
    Status kept;
    if (!ticket.ok()) {
      kept = ticket.status();
    } else if (!IsInternalThread(source)) {
      kept = InvalidArgument(
          fmt::format("a multicast ticket from {}: not the runtime's mailbox", source.ToString()));
    } else {
      kept = book_.AddTicket(source, *ticket, Clock::now(), settled);
    }
    if (!kept.ok()) {
      Log().warn("tocl: multicast relay: a bad ticket from {}: {}", source.ToString(),
                 kept.ToString());
    }
    return;
  }
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
    // (DecodeMulticastRequest sets `reply_to` only when it is of the
    // source's process: nobody has us answer a third process.) The answer
    // echoes the group's secret: without it the sender ignores it.
    if (request.ok() && IsInternalThread(reply_to)) {
      Answer(reply_to, MulticastReply{.id = id,
                                      .relay = process_,
                                      .secret = request->groups.front().secret,
                                      .status = refused});
    }
    return;
  }
  if (source.process() == request->source.process()) {
    // From the sender's own process: its own word, no ticket needed.
    Carry(*request);
    return;
  }
  // Passed on by a relay above (or made up by someone): carried only
  // with its ticket from the sender's process.
  const MulticastTicket terms = TicketOf(*request);
  const size_t bytes = message.size();
  book_.AddRequest(std::move(message), terms, bytes, Clock::now(), settled);
}

void MulticastRelay::Settle(Book::Settled& request) {
  uint64_t id = 0;
  Gid reply_to;
  auto decoded = DecodeMulticastRequest(request.held.span(), id, reply_to);
  if (!decoded.ok()) return;  // (it decoded when it came)
  if (request.status.ok()) {
    Carry(*decoded);
    return;
  }
  Log().warn("tocl: multicast relay: {}", request.status.ToString());
  // One that waited for its ticket in vain (Unavailable) is answered: its
  // sender, if it is a real one, sends to the group itself (a replay of
  // one carried waits in vain too: its answer is ignored, the sender took
  // the first). One that does not fit its ticket is no real sender's (the
  // real one fits): answering it would only let its maker send the sender
  // our refusal of a call we may still carry.
  if (request.status.code() == StatusCode::kUnavailable) {
    Answer(reply_to, MulticastReply{.id = id,
                                    .relay = process_,
                                    .secret = decoded->groups.front().secret,
                                    .status = request.status});
  }
}

void MulticastRelay::Carry(const MulticastRequest& request) {
  PassOn(request);
  MulticastReply reply{
      .id = request.id, .relay = process_, .secret = request.groups.front().secret};
  for (const NumberedReceiver& receiver : request.groups.front().receivers) {
    Status status =
        shutting_down_.load()
            ? Unavailable("the relay is shutting down")
            : hooks_.send_fill(request.source, receiver.thread, request.tag, request.payload,
                               FillOf{receiver.seq, request.groups.front().nonce}, *relay_);
    reply.receivers.push_back(MulticastReceiverOutcome{receiver.thread, std::move(status)});
  }
  Answer(request.reply_to, reply);
}

void MulticastRelay::PassOn(const MulticastRequest& request) {
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
             MulticastReply{
                 .id = request.id, .relay = group.relay, .secret = group.secret, .status = why});
    }
  }
}

void MulticastRelay::Answer(Gid reply_to, const MulticastReply& reply) {
  Status sent =
      hooks_.send(RelayOf(process_), reply_to, kMulticastReplyTag, EncodeMulticastReply(reply));
  if (!sent.ok()) {
    Log().warn("tocl: multicast relay: cannot answer {}: {}", reply_to.ToString(), sent.ToString());
  }
}

}  // namespace tocl::runtime
