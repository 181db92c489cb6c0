#include "runtime/multicast_protocol.h"

#include <fmt/format.h>

#include <string_view>

#include "runtime/byte_codec.h"

namespace tocl::runtime {
namespace {

constexpr uint32_t kRequestMagic = 0x32514D54;  // "TMQ2"
constexpr uint32_t kReplyMagic = 0x32414D54;    // "TMA2"
constexpr uint32_t kTicketMagic = 0x32544D54;   // "TMT2"
constexpr size_t kTicketBytes = 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4;
// The bytes a group and a receiver take at least: counts are checked
// against them before anything is allocated.
constexpr size_t kGroupBytes = 8 + 8 + 8 + 4;
constexpr size_t kReceiverBytes = 8 + 8;
constexpr size_t kOutcomeBytes = 8 + 4 + 2;

void PutStatus(ByteWriter& out, const Status& status) {
  out.Put(static_cast<uint32_t>(status.code()));
  const std::string_view message =
      std::string_view(status.message()).substr(0, kMaxMulticastMessageBytes);
  out.Put(static_cast<uint16_t>(message.size()));
  out.PutText(message);
}

Status GetStatus(ByteReader& in) {
  const auto code = in.Get<uint32_t>();
  const auto message_bytes = in.Get<uint16_t>();
  const std::string_view message = in.GetText(message_bytes);
  return StatusFromWire(code, message, "the multicast relay failed without a reason");
}

}  // namespace

std::vector<std::byte> EncodeMulticastRequest(const MulticastRequest& header,
                                              std::span<const MulticastGroup> groups) {
  ByteWriter out;
  out.Put(kRequestMagic);
  out.Put(header.id);
  out.Put(header.source.raw());
  out.Put(header.reply_to.raw());
  out.Put(header.tag);
  out.Put(static_cast<uint32_t>(groups.size()));
  for (const MulticastGroup& group : groups) {
    out.Put(group.relay.raw());
    out.Put(group.nonce);
    out.Put(group.secret);
    out.Put(static_cast<uint32_t>(group.receivers.size()));
    for (const NumberedReceiver& receiver : group.receivers) {
      out.Put(receiver.thread.raw());
      out.Put(receiver.seq);
    }
  }
  out.Put(header.wait_ms);
  out.Put(static_cast<uint64_t>(header.payload.size()));
  out.bytes().reserve(out.bytes().size() + header.payload.size());
  out.PutBytes(header.payload);
  return std::move(out.bytes());
}

Result<MulticastRequest> DecodeMulticastRequest(std::span<const std::byte> bytes, uint64_t& id,
                                                Gid& reply_to) {
  ByteReader in(bytes);
  const auto magic = in.Get<uint32_t>();
  if (!in.ok() || magic != kRequestMagic) {
    return InvalidArgument("not a multicast request (no marker)");
  }
  MulticastRequest request;
  request.id = in.Get<uint64_t>();
  request.source = Gid::FromRaw(in.Get<uint64_t>());
  request.reply_to = Gid::FromRaw(in.Get<uint64_t>());
  request.tag = in.Get<Tag>();
  const auto groups = in.Get<uint32_t>();
  if (!in.ok()) return InvalidArgument("a multicast request is cut short");
  id = request.id;
  if (!request.source.is_thread() || !request.reply_to.is_thread() ||
      request.reply_to.process() != request.source.process()) {
    return InvalidArgument(fmt::format(
        "a multicast request from {} answered to {}: both must be threads of one process",
        request.source.ToString(), request.reply_to.ToString()));
  }
  reply_to = request.reply_to;
  if (groups == 0 || groups > in.remaining() / kGroupBytes) {
    return InvalidArgument(
        fmt::format("a multicast request says {} groups in {} bytes", groups, in.remaining()));
  }
  request.groups.resize(groups);
  for (MulticastGroup& group : request.groups) {
    group.relay = Gid::FromRaw(in.Get<uint64_t>());
    group.nonce = in.Get<uint64_t>();
    group.secret = in.Get<uint64_t>();
    const auto receivers = in.Get<uint32_t>();
    if (!in.ok() || !group.relay.is_process() || receivers == 0 ||
        receivers > in.remaining() / kReceiverBytes) {
      return InvalidArgument(
          fmt::format("a multicast request's group of relay {} says {} receivers in {} bytes",
                      group.relay.ToString(), receivers, in.remaining()));
    }
    group.receivers.resize(receivers);
    for (NumberedReceiver& receiver : group.receivers) {
      receiver.thread = Gid::FromRaw(in.Get<uint64_t>());
      receiver.seq = in.Get<uint64_t>();
      if (!receiver.thread.is_thread() || receiver.thread.host() != group.relay.host()) {
        return InvalidArgument(fmt::format(
            "a multicast request names receiver {} in the group of {} (another host, or not a "
            "thread)",
            receiver.thread.ToString(), group.relay.ToString()));
      }
    }
  }
  request.wait_ms = in.Get<uint32_t>();
  const auto payload_bytes = in.Get<uint64_t>();
  if (!in.ok() || in.remaining() != payload_bytes) {
    return InvalidArgument(fmt::format("a multicast request says {} payload bytes, but {} follow",
                                       payload_bytes, in.remaining()));
  }
  request.payload = in.GetBytes(payload_bytes);
  return request;
}

MulticastTicket TicketOf(const MulticastRequest& request) {
  return MulticastTicket{.id = request.id,
                         .source = request.source,
                         .nonce = request.groups.empty() ? 0 : request.groups.front().nonce,
                         .secret = request.groups.empty() ? 0 : request.groups.front().secret,
                         .tag = request.tag,
                         .payload_bytes = request.payload.size(),
                         .wait_ms = request.wait_ms};
}

bool IsMulticastTicket(std::span<const std::byte> bytes) {
  ByteReader in(bytes);
  const auto magic = in.Get<uint32_t>();
  return in.ok() && magic == kTicketMagic;
}

std::vector<std::byte> EncodeMulticastTicket(const MulticastTicket& ticket) {
  ByteWriter out;
  out.Put(kTicketMagic);
  out.Put(ticket.id);
  out.Put(ticket.source.raw());
  out.Put(ticket.nonce);
  out.Put(ticket.secret);
  out.Put(ticket.tag);
  out.Put(ticket.payload_bytes);
  out.Put(ticket.wait_ms);
  return std::move(out.bytes());
}

Result<MulticastTicket> DecodeMulticastTicket(std::span<const std::byte> bytes) {
  if (!IsMulticastTicket(bytes)) return InvalidArgument("not a multicast ticket (no marker)");
  if (bytes.size() != kTicketBytes) {
    return InvalidArgument(
        fmt::format("a multicast ticket of {} bytes (one is {})", bytes.size(), kTicketBytes));
  }
  ByteReader in(bytes);
  in.Get<uint32_t>();
  MulticastTicket ticket;
  ticket.id = in.Get<uint64_t>();
  ticket.source = Gid::FromRaw(in.Get<uint64_t>());
  ticket.nonce = in.Get<uint64_t>();
  ticket.secret = in.Get<uint64_t>();
  ticket.tag = in.Get<Tag>();
  ticket.payload_bytes = in.Get<uint64_t>();
  ticket.wait_ms = in.Get<uint32_t>();
  if (!ticket.source.is_thread()) {
    return InvalidArgument(
        fmt::format("a multicast ticket for {}: not a thread", ticket.source.ToString()));
  }
  return ticket;
}

std::vector<std::byte> EncodeMulticastReply(const MulticastReply& reply) {
  ByteWriter out;
  out.Put(kReplyMagic);
  out.Put(reply.id);
  out.Put(reply.relay.raw());
  out.Put(reply.secret);
  PutStatus(out, reply.status);
  out.Put(static_cast<uint32_t>(reply.receivers.size()));
  for (const MulticastReceiverOutcome& receiver : reply.receivers) {
    out.Put(receiver.thread.raw());
    PutStatus(out, receiver.status);
  }
  return std::move(out.bytes());
}

Result<MulticastReply> DecodeMulticastReply(std::span<const std::byte> bytes) {
  ByteReader in(bytes);
  const auto magic = in.Get<uint32_t>();
  MulticastReply reply;
  reply.id = in.Get<uint64_t>();
  reply.relay = Gid::FromRaw(in.Get<uint64_t>());
  reply.secret = in.Get<uint64_t>();
  reply.status = GetStatus(in);
  const auto receivers = in.Get<uint32_t>();
  if (!in.ok() || magic != kReplyMagic || !reply.relay.is_process() ||
      receivers > in.remaining() / kOutcomeBytes) {
    return InvalidArgument(fmt::format("a malformed multicast reply ({} bytes)", bytes.size()));
  }
  reply.receivers.resize(receivers);
  for (MulticastReceiverOutcome& receiver : reply.receivers) {
    receiver.thread = Gid::FromRaw(in.Get<uint64_t>());
    receiver.status = GetStatus(in);
  }
  if (!in.ok() || in.remaining() != 0) {
    return InvalidArgument(fmt::format("a malformed multicast reply ({} bytes)", bytes.size()));
  }
  return reply;
}

}  // namespace tocl::runtime
