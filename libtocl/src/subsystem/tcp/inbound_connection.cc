#include "subsystem/tcp/inbound_connection.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <utility>

#include "buffers/size_class.h"
#include "core/logger.h"

namespace tocl::subsystem::tcp {

namespace {

// Reads per readiness event: level-triggered epoll calls again for the
// rest, and other connections get their turn meanwhile.
constexpr int kMaxReadsPerEvent = 16;

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;

static_assert(sizeof(security::Nonce) == wire::kHandshakeNonceBytes &&
              sizeof(security::Mac) == wire::kHandshakeMacBytes);

}  // namespace

InboundConnection::InboundConnection(ConnectionContext& context, Fd fd, std::string peer_address)
    : context_(context),
      fd_(std::move(fd)),
      peer_address_(std::move(peer_address)),
      accepted_at_(std::chrono::steady_clock::now()),
      staging_(std::make_unique<std::byte[]>(kStagingBytes)) {}

InboundConnection::~InboundConnection() {
  Close("");
}

Status InboundConnection::Start() {
  return context_.reactor.Add(fd_.get(), kReadEvents, this);
}

void InboundConnection::OnReady(uint32_t /*events*/) {
  // A closed or paused connection may still be named by the rest of the
  // current epoll batch. EPOLLERR and EPOLLHUP show up as a failing or
  // empty recv() below.
  if (closed() || paused_) return;
  ReadSome();
  NoteReceived();
}

void InboundConnection::ReadSome() {
  for (int reads = 0; reads < kMaxReadsPerEvent; ++reads) {
    if (direct_ != nullptr) {
      if (ReadDirect() == Progress::kClosed) return;
      if (direct_ != nullptr) return;  // the socket has nothing more for now
      continue;
    }
    // Keep the unconsumed tail (less than one stageable frame) at the front.
    if (begin_ == end_) {
      begin_ = end_ = 0;
    } else if (begin_ > 0) {
      std::memmove(staging_.get(), staging_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    // Never full here: a whole frame at the front was delivered (or paused
    // us), a partial one is smaller than kDirectReadBytes.
    const size_t room = kStagingBytes - end_;
    assert(room > 0);
    const ssize_t n = recv(fd_.get(), staging_.get() + end_, room, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      OnReadEnd(n, errno);
      return;
    }
    TcpTraffic::Add(context_.traffic.bytes_received, static_cast<uint64_t>(n));
    end_ += static_cast<size_t>(n);
    switch (DeliverStaged()) {
      case Progress::kClosed:
        return;
      case Progress::kBlocked:
        Pause();
        return;
      case Progress::kMore:
        break;
    }
    if (static_cast<size_t>(n) < room) return;  // the socket is drained
  }
}

InboundConnection::Progress InboundConnection::ReadDirect() {
  while (direct_ != nullptr) {
    const size_t want = direct_bytes_ - direct_filled_;
    const ssize_t n = recv(fd_.get(), direct_->bytes + direct_filled_, want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Progress::kMore;
    if (n <= 0) {
      OnReadEnd(n, errno);
      return Progress::kClosed;
    }
    TcpTraffic::Add(context_.traffic.bytes_received, static_cast<uint64_t>(n));
    direct_filled_ += static_cast<size_t>(n);
    if (direct_filled_ == direct_bytes_) {
      detail::BufferSlot* slot = std::exchange(direct_, nullptr);
      return Deliver(slot) ? Progress::kMore : Progress::kClosed;
    }
    if (static_cast<size_t>(n) < want) return Progress::kMore;  // drained
  }
  return Progress::kMore;
}

InboundConnection::Progress InboundConnection::DeliverStaged() {
  while (end_ - begin_ >= wire::kHeaderBytes) {
    const size_t staged = end_ - begin_;
    std::byte* at = staging_.get() + begin_;
    auto header = wire::DecodeHeader(std::span<const std::byte>(at, staged), context_.limits);
    if (!header.ok()) {
      Close(header.status().message());
      return Progress::kClosed;
    }
    if (!Admit(*header)) return Progress::kClosed;
    const size_t frame_bytes = wire::kHeaderBytes + header->length;
    if (!authenticated_) {
      if (staged < frame_bytes) return Progress::kMore;  // a few dozen bytes: staged whole
      if (!OnHandshake(*header, at + wire::kHeaderBytes)) return Progress::kClosed;
      begin_ += frame_bytes;
      continue;
    }
    if (stream_ == nullptr) {  // the resume (Admit let nothing else through)
      if (!OnResume(*header)) return Progress::kClosed;
      begin_ += frame_bytes;
      continue;
    }
    if (header->kind == wire::FrameKind::kReceived) {  // header only, not counted
      begin_ += frame_bytes;
      context_.reverse_acknowledged(*header);
      continue;
    }
    if (staged < frame_bytes && frame_bytes <= kDirectReadBytes) return Progress::kMore;
    if (context_.sink.Congested()) return Progress::kBlocked;
    detail::BufferSlot* slot = context_.pool.TryGet(buffers::ClassFor(header->length));
    if (slot == nullptr) return Progress::kBlocked;
    if (staged >= frame_bytes) {
      std::memcpy(slot->bytes, at, frame_bytes);
      begin_ += frame_bytes;
      if (!Deliver(slot)) return Progress::kClosed;
      continue;
    }
    // Too big to stage: the rest goes straight into the buffer.
    std::memcpy(slot->bytes, at, staged);
    direct_ = slot;
    direct_filled_ = staged;
    direct_bytes_ = frame_bytes;
    begin_ = end_ = 0;
    return Progress::kMore;
  }
  return Progress::kMore;
}

bool InboundConnection::Admit(const wire::Header& header) {
  const Gid source = Gid::FromRaw(header.source);
  const Gid destination = Gid::FromRaw(header.destination);
  if (!authenticated_) {
    const wire::FrameKind expected =
        hello_process_.is_null() ? wire::FrameKind::kHello : wire::FrameKind::kProof;
    if (header.kind != expected) {
      Close(expected == wire::FrameKind::kHello ? "a frame before the hello"
                                                : "a frame before the handshake proof");
      return false;
    }
    if (destination != context_.self_process) {
      Close(fmt::format("a handshake for {}, but this is {}", destination.ToString(),
                        context_.self_process.ToString()));
      return false;
    }
    if (!hello_process_.is_null() && source != hello_process_) {
      Close(fmt::format("a proof from {} on the connection of {}", source.ToString(),
                        hello_process_.ToString()));
      return false;
    }
    return true;
  }
  if (wire::HandshakePayloadBytes(header.kind) != 0) {
    Close("a handshake frame after the handshake");
    return false;
  }
  const bool resume = header.kind == wire::FrameKind::kResume;
  // After the resume a kReceived is the peer's count of our own stream to
  // it, riding in front of its frames (reverse_acks.h).
  if (resume != (stream_ == nullptr) ||
      (stream_ == nullptr && header.kind == wire::FrameKind::kReceived)) {
    Close(stream_ == nullptr ? "a frame before the stream's resume"
                             : "a second resume of the stream");
    return false;
  }
  if (!wire::SourceFits(header, hello_process_)) {
    Close(fmt::format("a message from {} on the connection of {}", source.ToString(),
                      hello_process_.ToString()));
    return false;
  }
  if (!wire::DestinationFits(header, context_.self_process)) {
    Close(fmt::format("a message for {}, but this is {}", destination.ToString(),
                      context_.self_process.ToString()));
    return false;
  }
  return true;
}

bool InboundConnection::OnHandshake(const wire::Header& header, const std::byte* payload) {
  const Gid source = Gid::FromRaw(header.source);
  if (header.kind == wire::FrameKind::kHello) {
    security::Nonce connector_nonce;
    std::memcpy(connector_nonce.data(), payload, connector_nonce.size());
    auto handshake = security::AcceptorHandshake::Start(context_.key, "tcp", context_.self_process,
                                                        source, connector_nonce);
    if (!handshake.ok()) {
      Close(handshake.status().message());
      return false;
    }
    hello_process_ = source;
    handshake_ = std::move(*handshake);
    std::array<std::byte,
               wire::kHeaderBytes + wire::kHandshakeNonceBytes + wire::kHandshakeMacBytes>
        answer;
    wire::EncodeHeader(wire::HandshakeHeader(wire::FrameKind::kAuth, context_.self_process, source),
                       answer.data());
    std::memcpy(answer.data() + wire::kHeaderBytes, handshake_->nonce().data(),
                wire::kHandshakeNonceBytes);
    std::memcpy(answer.data() + wire::kHeaderBytes + wire::kHandshakeNonceBytes,
                handshake_->mac().data(), wire::kHandshakeMacBytes);
    const ssize_t n = send(fd_.get(), answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(answer.size())) {
      Close(n < 0 ? ErrnoStatus("send the handshake answer", errno).message()
                  : std::string("the handshake answer did not fit the socket buffer"));
      return false;
    }
    TcpTraffic::Add(context_.traffic.bytes_sent, answer.size());
    return true;
  }
  security::Mac proof;
  std::memcpy(proof.data(), payload, proof.size());
  if (Status status = handshake_->CheckProof(proof); !status.ok()) {
    Close(status.message());
    return false;
  }
  handshake_.reset();
  authenticated_ = true;
  Log().debug("tocl tcp: connection from {} is {}", peer_address_, source.ToString());
  return true;
}

bool InboundConnection::OnResume(const wire::Header& header) {
  InboundConnection* replaced = nullptr;
  stream_ = &context_.streams.Resume(hello_process_, header.seq, header.offset, this, &replaced);
  if (replaced != nullptr) {
    // What it has not read yet is sent again after our answer.
    Log().debug("tocl tcp: {} resumed stream {:#x} on a new connection", hello_process_.ToString(),
                header.seq);
    replaced->Close("");
  }
  reverse_ = context_.reverse_acks.For(hello_process_);
  report_written_ = wire::kHeaderBytes;
  if (!Report(/*always=*/true)) {
    Close("the answer to the stream's resume did not fit the socket buffer");
    return false;
  }
  return true;
}

void InboundConnection::NoteReceived() {
  if (stream_ == nullptr || closed()) return;
  const uint64_t unreported = stream_->received - stream_->reported;
  if (unreported == 0) return;
  if (unreported >= kReportFrames || stream_->unreported_bytes >= kReportBytes) {
    Report();
  } else {
    // Our next frame to the peer may carry it; if none does in time, the
    // timer or the sleep sends it here.
    reverse_->Owe(stream_->id, stream_->received);
    SetReportOwed(true);
  }
}

void InboundConnection::ReportIfDue(std::chrono::steady_clock::time_point now) {
  if (!report_owed_ || closed() || stream_ == nullptr) return;
  if (now != std::chrono::steady_clock::time_point::max()) {
    if (owed_since_ == std::chrono::steady_clock::time_point{}) {
      owed_since_ = now;
      return;
    }
    if (now - owed_since_ < kReportDelay) return;
  }
  Report();
}

bool InboundConnection::Report(bool always) {
  if (report_written_ == report_.size()) {
    if (const uint64_t carried = reverse_->carried(stream_->id); carried > stream_->reported) {
      stream_->reported = std::min(carried, stream_->received);
      stream_->unreported_bytes = 0;
    }
    if (!always && stream_->received == stream_->reported) {
      owed_since_ = {};
      SetReportOwed(false);
      return true;
    }
    reporting_ = stream_->received;
    wire::EncodeHeader(wire::StreamHeader(wire::FrameKind::kReceived, context_.self_process,
                                          hello_process_, stream_->id, reporting_),
                       report_.data());
    report_written_ = 0;
  }
  const ssize_t n = send(fd_.get(), report_.data() + report_written_,
                         report_.size() - report_written_, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n <= 0) {
    // A full socket (the peer reads it when its window fills) or a broken
    // one (the next recv says so): owed still.
    SetReportOwed(true);
    return false;
  }
  TcpTraffic::Add(context_.traffic.bytes_sent, static_cast<uint64_t>(n));
  report_written_ += static_cast<size_t>(n);
  if (report_written_ < report_.size()) {
    SetReportOwed(true);
    return false;
  }
  TcpTraffic::Add(context_.traffic.acknowledgements_written, 1);
  stream_->reported = reporting_;
  stream_->unreported_bytes = 0;
  owed_since_ = {};  // what came since is owed from now
  SetReportOwed(stream_->received != stream_->reported);
  return true;
}

void InboundConnection::SetReportOwed(bool owed) {
  if (owed == report_owed_) return;
  owed_since_ = {};
  report_owed_ = owed;
  context_.reports_pending += owed ? 1 : -1;
}

bool InboundConnection::Deliver(detail::BufferSlot* slot) {
  TcpTraffic::Add(context_.traffic.frames_received, 1);
  ++context_.delivered;
  // Received, whatever the sink makes of it: a frame it refuses is not
  // sent again.
  ++stream_->received;
  stream_->unreported_bytes += wire::kHeaderBytes + slot->header().length;
  if (Status status = context_.sink.OnMessage(hello_process_, buffers::SlotRef(slot));
      !status.ok()) {
    Close(status.message());
    return false;
  }
  return true;
}

void InboundConnection::Pause() {
  // Out of the epoll set rather than registered with no events: epoll
  // reports EPOLLERR and EPOLLHUP regardless of the mask, and a reset peer
  // would make a level-triggered poller spin.
  paused_ = true;
  context_.reactor.Remove(fd_.get());
  context_.inbound_changed = true;
}

bool InboundConnection::TryResume() {
  if (closed() || !paused_) return true;
  if (context_.sink.Congested()) return false;
  const Progress progress = DeliverStaged();
  NoteReceived();
  switch (progress) {
    case Progress::kClosed:
      return true;
    case Progress::kBlocked:
      return false;
    case Progress::kMore:
      break;
  }
  paused_ = false;
  if (Status status = context_.reactor.Add(fd_.get(), kReadEvents, this); !status.ok()) {
    Close(fmt::format("cannot resume reading: {}", status.message()));
  }
  return true;
}

void InboundConnection::OnReadEnd(ssize_t n, int error) {
  std::string why;
  if (n < 0) {
    why = ErrnoStatus("recv", error).message();
  } else if (direct_ != nullptr) {
    why = fmt::format("the stream ended inside a frame ({} of {} bytes)", direct_filled_,
                      direct_bytes_);
  } else if (end_ - begin_ >= wire::kHeaderBytes) {
    wire::Header header;
    std::memcpy(&header, staging_.get() + begin_, sizeof(header));
    why = fmt::format("the stream ended inside a frame ({} of {} bytes)", end_ - begin_,
                      wire::kHeaderBytes + header.length);
  } else if (end_ != begin_) {
    why = fmt::format("the stream ended inside a header ({} of {} bytes)", end_ - begin_,
                      wire::kHeaderBytes);
  }
  if (why.empty() || stream_ != nullptr) {
    // A resumed stream loses nothing with its connection: its sender
    // connects again and sends what we have not acknowledged.
    Log().debug("tocl tcp: {} ({}) closed its connection{}{}", peer_address_,
                hello_process_.ToString(), why.empty() ? "" : ": ", why);
    Close("");
    return;
  }
  Close(why);
}

void InboundConnection::Close(std::string_view reason) {
  if (closed()) return;
  if (!reason.empty()) {
    if (!hello_process_.is_null()) {
      Log().warn("tocl tcp: closing connection from {} ({}): {}", peer_address_,
                 hello_process_.ToString(), reason);
    } else {
      Log().warn("tocl tcp: closing connection from {}: {}", peer_address_, reason);
    }
    TcpTraffic::Add(context_.traffic.connections_rejected, 1);
  }
  if (stream_ != nullptr) {
    // What came is the peer's to know before it connects again.
    if (report_owed_ || stream_->received != stream_->reported) Report();
    SetReportOwed(false);
    context_.streams.Detach(*stream_, this, std::chrono::steady_clock::now());
    stream_ = nullptr;
  }
  if (!paused_) context_.reactor.Remove(fd_.get());
  fd_.Close();
  if (direct_ != nullptr) context_.pool.Unref(std::exchange(direct_, nullptr));
  staging_.reset();
  begin_ = end_ = 0;
  context_.inbound_changed = true;
}

}  // namespace tocl::subsystem::tcp
