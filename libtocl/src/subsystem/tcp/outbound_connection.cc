#include "subsystem/tcp/outbound_connection.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "buffers/buffer_pool.h"
#include "buffers/size_class.h"
#include "core/logger.h"
#include "subsystem/reconnect_backoff.h"

namespace tocl::subsystem::tcp {

namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;

}  // namespace

OutboundConnection::OutboundConnection(ConnectionContext& context, Gid peer_process,
                                       const SocketAddress& address)
    : context_(context),
      peer_process_(peer_process),
      address_(address),
      description_(fmt::format("{} at {}", peer_process.ToString(), address_.ToString())),
      stream_id_(NewStreamId()),
      reverse_(context.reverse_acks.For(peer_process)) {}

OutboundConnection::~OutboundConnection() {
  Shutdown("the route is gone");
}

Status OutboundConnection::Start() {
  std::lock_guard lock(mu_);
  return ConnectLocked();
}

Status OutboundConnection::ConnectLocked() {
  auto handshake = security::ConnectorHandshake::Start(context_.key, "tcp", context_.self_process,
                                                       peer_process_);
  if (!handshake.ok()) return handshake.status();
  handshake_ = std::move(*handshake);
  SetHelloLocked();
  in_filled_ = 0;
  const int fd = socket(address_.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  fd_ = Fd(fd);
  if (Status status = SetNoDelay(fd); !status.ok()) {
    Log().debug("tocl tcp: connection to {}: {}", description_, status.message());
  }
  handshake_started_ = Clock::now();
  if (connect(fd, address_.get(), address_.length()) == 0) {
    state_ = State::kHandshaking;
  } else if (errno == EINPROGRESS || errno == EINTR) {
    // EINTR: the connection goes on asynchronously, as for EINPROGRESS.
    state_ = State::kConnecting;
  } else {
    const int error = errno;
    LoseLocked(fmt::format("cannot connect to {}: {}", description_,
                           ErrnoStatus("connect", error).message()),
               error == ECONNREFUSED ? Loss::kNobodyThere : Loss::kTransient);
    return Status::Ok();
  }
  if (Status status = context_.reactor.Add(fd, kReadEvents | EPOLLOUT, this); !status.ok()) {
    fd_.Close();
    return status;
  }
  SetWantWriteLocked(true);
  if (state_ == State::kHandshaking) FlushLocked();
  return Status::Ok();
}

void OutboundConnection::ReconnectLocked() {
  if (Status status = ConnectLocked(); !status.ok()) {
    LoseLocked(fmt::format("cannot connect to {}: {}", description_, status.message()));
  }
}

void OutboundConnection::SetHelloLocked() {
  const wire::Header header =
      wire::HandshakeHeader(wire::FrameKind::kHello, context_.self_process, peer_process_);
  wire::EncodeHeader(header, preamble_.data());
  std::memcpy(preamble_.data() + wire::kHeaderBytes, handshake_->nonce().data(), header.length);
  preamble_bytes_ = wire::kHeaderBytes + header.length;
  preamble_written_ = 0;
}

Status OutboundConnection::Post(detail::BufferSlot* slot) {
  std::lock_guard lock(mu_);
  if (state_ == State::kBroken) return Unavailable(broken_reason_);
  const size_t bytes = wire::kHeaderBytes + slot->header().length;
  if (bytes > buffers::ClassBytes(slot->class_index)) {
    return InvalidArgument(fmt::format("a frame of {} bytes in a buffer of {}", bytes,
                                       buffers::ClassBytes(slot->class_index)));
  }
  // An empty window takes any frame, so that one bigger than the limit
  // still goes.
  if (!window_.empty() && window_.bytes() + bytes > context_.max_queued_bytes_per_route) {
    ReadAcknowledgementsLocked();
    if (state_ == State::kBroken) return Unavailable(broken_reason_);
    if (!window_.empty() && window_.bytes() + bytes > context_.max_queued_bytes_per_route) {
      // Short enough for the small-string buffer: no allocation while full.
      return Status(StatusCode::kTryAgain, "send window full");
    }
  }
  slot->set_state(BufferState::kInFlight);
  const bool nothing_ahead = window_.AllWritten();
  window_.Push({slot, bytes});
  if (state_ == State::kConnected) {
    // Otherwise EPOLLOUT will write it, after what is ahead.
    if (nothing_ahead) FlushLocked();
  } else if (state_ == State::kDown && next_attempt_ == Clock::time_point::max()) {
    // Down with nothing to send until now: the clock starts.
    down_since_ = Clock::now();
    attempts_ = 0;
    ReconnectLocked();
  }
  return Status::Ok();
}

bool OutboundConnection::Drained() const {
  std::lock_guard lock(mu_);
  return window_.empty();
}

bool OutboundConnection::Broken() const {
  std::lock_guard lock(mu_);
  return state_ == State::kBroken;
}

bool OutboundConnection::Down() const {
  std::lock_guard lock(mu_);
  return state_ == State::kDown;
}

std::vector<detail::BufferSlot*> OutboundConnection::Take() {
  std::lock_guard lock(mu_);
  std::vector<detail::BufferSlot*> slots;
  // Only while no socket carries frames of the stream (a frame half
  // written would leave the peer's stream torn) and our kResume has not
  // been written with the window's base (the peer would count from it).
  if (state_ != State::kDown && state_ != State::kConnecting && state_ != State::kHandshaking) {
    return slots;
  }
  for (const SendWindow::Entry& entry : window_.Take()) slots.push_back(entry.slot);
  if (state_ == State::kDown) next_attempt_ = Clock::time_point::max();  // nothing to send now
  return slots;
}

bool OutboundConnection::TakeWentDown() {
  std::lock_guard lock(mu_);
  return std::exchange(went_down_, false);
}

void OutboundConnection::OnReady(uint32_t events) {
  std::lock_guard lock(mu_);
  // Down or broken already: a late event of the current epoll batch.
  if (!fd_.valid()) return;
  if (state_ == State::kConnecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    // A socket of this connection that was replaced may have left an
    // event in the current batch: a connect in progress is not done.
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof(peer);
    if (getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 &&
        errno == ENOTCONN && (events & (EPOLLERR | EPOLLHUP)) == 0) {
      return;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    if (error != 0) {
      LoseLocked(fmt::format("cannot connect to {}: {}", description_,
                             ErrnoStatus("connect", error).message()),
                 error == ECONNREFUSED ? Loss::kNobodyThere : Loss::kTransient);
      return;
    }
    state_ = State::kHandshaking;
    handshake_started_ = Clock::now();
    events |= EPOLLOUT;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != 0) {
    ReadLocked();
    if (!fd_.valid()) return;
  }
  if ((events & EPOLLOUT) != 0) FlushLocked();
}

void OutboundConnection::ReadAcknowledgementsLocked() {
  if (fd_.valid() && (state_ == State::kConnected || state_ == State::kResuming)) ReadLocked();
}

void OutboundConnection::ReadLocked() {
  for (;;) {
    const bool answering = state_ == State::kHandshaking;
    // During the handshake, exactly the answer; then whole kReceived
    // headers.
    const ssize_t n =
        answering
            ? recv(fd_.get(), in_.data() + in_filled_, kAnswerBytes - in_filled_, MSG_DONTWAIT)
            : recv(fd_.get(), in_.data() + in_filled_, in_.size() - in_filled_, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n == 0) {
      LoseLocked(fmt::format("connection to {} lost: {}", description_,
                             answering ? "closed by the peer during the handshake (it may not "
                                         "hold this cluster's secret; see its log)"
                                       : "closed by the peer"),
                 answering ? Loss::kNobodyThere : Loss::kTransient);
      return;
    }
    if (n < 0) {
      LoseLocked(fmt::format("connection to {} lost: {}", description_,
                             ErrnoStatus("recv", errno).message()));
      return;
    }
    in_filled_ += static_cast<size_t>(n);
    if (answering) {
      if (in_filled_ < kAnswerBytes) continue;
      OnAnswerLocked();
      in_filled_ = 0;
      if (!fd_.valid()) return;
      continue;
    }
    size_t used = 0;
    while (in_filled_ - used >= wire::kHeaderBytes) {
      auto header = wire::DecodeHeader(
          std::span<const std::byte>(in_.data() + used, wire::kHeaderBytes), context_.limits);
      if (!header.ok() || header->kind != wire::FrameKind::kReceived) {
        BreakLocked(fmt::format("connection to {}: {}", description_,
                                header.ok() ? std::string("the peer sent a frame that is not an "
                                                          "acknowledgement")
                                            : header.status().message()),
                    /*warn=*/true);
        return;
      }
      OnReceivedLocked(*header);
      if (!fd_.valid()) return;
      used += wire::kHeaderBytes;
    }
    std::memmove(in_.data(), in_.data() + used, in_filled_ - used);
    in_filled_ -= used;
  }
}

void OutboundConnection::OnAnswerLocked() {
  auto header =
      wire::DecodeHeader(std::span<const std::byte>(in_.data(), kAnswerBytes), context_.limits);
  std::string error;
  if (!header.ok()) {
    error = header.status().message();
  } else if (header->kind != wire::FrameKind::kAuth) {
    error = "its first frame is not a handshake answer";
  } else if (Gid::FromRaw(header->source) != peer_process_ ||
             Gid::FromRaw(header->destination) != context_.self_process) {
    error = fmt::format("it answered as {} to {}", Gid::FromRaw(header->source).ToString(),
                        Gid::FromRaw(header->destination).ToString());
  } else {
    security::Nonce nonce;
    security::Mac mac;
    std::memcpy(nonce.data(), in_.data() + wire::kHeaderBytes, nonce.size());
    std::memcpy(mac.data(), in_.data() + wire::kHeaderBytes + nonce.size(), mac.size());
    auto proof = handshake_->Answer(nonce, mac);
    if (proof.ok()) {
      handshake_.reset();
      wire::EncodeHeader(
          wire::HandshakeHeader(wire::FrameKind::kProof, context_.self_process, peer_process_),
          preamble_.data());
      std::memcpy(preamble_.data() + wire::kHeaderBytes, proof->data(), proof->size());
      wire::EncodeHeader(wire::StreamHeader(wire::FrameKind::kResume, context_.self_process,
                                            peer_process_, stream_id_, window_.base()),
                         preamble_.data() + wire::kHeaderBytes + proof->size());
      preamble_bytes_ = kPreambleBytes;
      preamble_written_ = 0;
      state_ = State::kResuming;
      FlushLocked();
      return;
    }
    error = proof.status().message();
  }
  // The peer is not who we meant, or not of this cluster: no use trying again.
  BreakLocked(fmt::format("connection to {}: {}", description_, error), /*warn=*/true);
}

uint64_t OutboundConnection::PeerMayHaveLocked() const {
  // The peer cannot have more than was ever written whole; once this
  // socket resumed, no more than it wrote whole (the peer closed the old
  // one's inbound side at the resume). Past that, Acknowledge would cut
  // the frame being written.
  const uint64_t most =
      state_ == State::kConnected ? window_.base() + window_.unwritten() : window_.sent_end();
  return std::min(most, window_.end());
}

void OutboundConnection::OnReceivedLocked(const wire::Header& header) {
  const bool resuming = state_ == State::kResuming;
  if (Gid::FromRaw(header.source) != peer_process_ ||
      Gid::FromRaw(header.destination) != context_.self_process || header.seq != stream_id_ ||
      header.offset > std::max(PeerMayHaveLocked(), window_.base())) {
    BreakAcknowledgedLocked(header);
    return;
  }
  // A count the peer's own frames to us carried may have come first
  // (reverse_acks.h): one behind the window acknowledges nothing more.
  const uint64_t count = std::max(header.offset, window_.base());
  window_.Acknowledge(count);
  if (!resuming) {
    SetWantWriteLocked(want_write_);  // the window may no longer wait for more
    return;
  }
  // Writing resumes at `count`: everything after it is written again.
  const bool was_down = resumed_once_ && counted_down_;
  window_.Rewind();
  state_ = State::kConnected;
  resumed_once_ = true;
  if (was_down) {
    Log().warn(
        "tocl tcp: connection to {} restored after {} ms; {} frames sent again", description_,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - down_since_).count(),
        window_.size());
  }
  SetDownLocked(false);
  attempts_ = 0;
  next_attempt_ = Clock::time_point::max();
  FlushLocked();
}

void OutboundConnection::OnReverseAcknowledged(const wire::Header& header) {
  std::lock_guard lock(mu_);
  if (header.seq != stream_id_ || state_ == State::kBroken) return;
  if (header.offset <= window_.base()) return;
  if (header.offset > PeerMayHaveLocked()) {
    BreakAcknowledgedLocked(header);
    return;
  }
  window_.Acknowledge(header.offset);
  SetWantWriteLocked(want_write_);  // the window may no longer wait for more
}

void OutboundConnection::BreakAcknowledgedLocked(const wire::Header& header) {
  BreakLocked(fmt::format("connection to {}: an acknowledgement of frames [{}, {}) of stream "
                          "{:#x} while frames [{}, {}) of stream {:#x} are held",
                          description_, window_.base(), header.offset, header.seq, window_.base(),
                          window_.end(), stream_id_),
              /*warn=*/true);
}

void OutboundConnection::FlushLocked() {
  for (;;) {
    const bool preamble = preamble_written_ < preamble_bytes_;
    const bool frames = state_ == State::kConnected && !window_.AllWritten();
    // What we owe the peer rides in front of our frames, at a frame's
    // start: in front of the rest of one the socket took only part of, it
    // would land inside that frame's payload.
    if (frames && window_.head_written() == 0 && ack_written_ == ack_out_.size() &&
        reverse_->Take(&ack_stream_, &ack_count_)) {
      wire::EncodeHeader(wire::StreamHeader(wire::FrameKind::kReceived, context_.self_process,
                                            peer_process_, ack_stream_, ack_count_),
                         ack_out_.data());
      ack_written_ = 0;
    }
    const bool ack = frames && ack_written_ < ack_out_.size();
    if (!fd_.valid() || (!preamble && !frames) ||
        (state_ != State::kConnected && state_ != State::kHandshaking &&
         state_ != State::kResuming)) {
      break;
    }
    iovec iov[kMaxFramesPerWrite + 2];
    size_t count = 0;
    size_t total = 0;
    if (preamble) {
      iov[count++] = {preamble_.data() + preamble_written_, preamble_bytes_ - preamble_written_};
      total += preamble_bytes_ - preamble_written_;
    }
    if (ack) {
      iov[count++] = {ack_out_.data() + ack_written_, ack_out_.size() - ack_written_};
      total += ack_out_.size() - ack_written_;
    }
    if (frames) {
      const size_t first = window_.unwritten();
      const size_t n = std::min(window_.size() - first, kMaxFramesPerWrite);
      for (size_t i = 0; i < n; ++i) {
        const SendWindow::Entry& entry = window_[first + i];
        const size_t skip = i == 0 ? window_.head_written() : 0;
        iov[count++] = {entry.slot->bytes + skip, entry.bytes - skip};
        total += entry.bytes - skip;
      }
    }
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    const ssize_t written = sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      LoseLocked(fmt::format("connection to {} lost: {}", description_,
                             ErrnoStatus("sendmsg", errno).message()));
      return;
    }
    size_t rest = static_cast<size_t>(written);
    TcpTraffic::Add(context_.traffic.bytes_sent, rest);
    if (preamble) {
      const size_t n = std::min(rest, preamble_bytes_ - preamble_written_);
      preamble_written_ += n;
      rest -= n;
    }
    if (ack) {
      const size_t n = std::min(rest, ack_out_.size() - ack_written_);
      ack_written_ += n;
      rest -= n;
      if (ack_written_ == ack_out_.size()) {
        reverse_->Carried(ack_stream_, ack_count_);
        TcpTraffic::Add(context_.traffic.acknowledgements_carried, 1);
      }
    }
    if (rest > 0) TcpTraffic::Add(context_.traffic.frames_sent, window_.Written(rest));
    if (static_cast<size_t>(written) < total) break;  // the socket buffer is full
  }
  UpdateInterestLocked();
}

void OutboundConnection::UpdateInterestLocked() {
  if (!fd_.valid()) return;
  const bool want = state_ == State::kConnecting || preamble_written_ < preamble_bytes_ ||
                    (state_ == State::kConnected && !window_.AllWritten());
  if (want != want_write_) {
    if (Status status =
            context_.reactor.Modify(fd_.get(), kReadEvents | (want ? EPOLLOUT : 0u), this);
        !status.ok()) {
      LoseLocked(fmt::format("connection to {} lost: {}", description_, status.message()));
      return;
    }
  }
  SetWantWriteLocked(want);
}

void OutboundConnection::SetWantWriteLocked(bool want) {
  want_write_ = want;
  // Until it is connected it waits for the connect, the handshake answer
  // or the resume; a connected one whose window is full waits for
  // acknowledgements.
  const bool waits = fd_.valid() && (want || state_ != State::kConnected ||
                                     window_.bytes() >= context_.max_queued_bytes_per_route / 2);
  if (waits == counted_waiting_) return;
  counted_waiting_ = waits;
  context_.waiting.fetch_add(waits ? 1 : -1, std::memory_order_relaxed);
}

OutboundConnection::Clock::time_point OutboundConnection::Tick(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (SettingUp() && now - handshake_started_ >= context_.handshake_timeout) {
    LoseLocked(fmt::format("connection to {}: no answer to our hello within {} ms (is it a "
                           "tocl process of this cluster?)",
                           description_, context_.handshake_timeout.count()),
               Loss::kNobodyThere);
  }
  if (SettingUp()) return handshake_started_ + context_.handshake_timeout;
  if (state_ != State::kDown) return Clock::time_point::max();
  if (window_.empty()) return Clock::time_point::max();
  if (now - down_since_ >= context_.unreachable_timeout) {
    BreakLocked(fmt::format("{}; not restored within {} ms (unreachable_timeout)", broken_reason_,
                            context_.unreachable_timeout.count()),
                /*warn=*/true);
    return Clock::time_point::max();
  }
  if (now >= next_attempt_) ReconnectLocked();
  return state_ == State::kDown ? next_attempt_ : handshake_started_ + context_.handshake_timeout;
}

void OutboundConnection::LoseLocked(std::string reason, Loss loss) {
  if (state_ == State::kBroken) return;
  CloseSocketLocked();
  if (!resumed_once_ && loss == Loss::kNobodyThere) {
    // Never got as far as the peer's resume answer, and no tocl process of
    // this cluster answers there.
    BreakLocked(std::move(reason), /*warn=*/true);
    return;
  }
  const auto now = Clock::now();
  if (state_ == State::kConnected || !counted_down_) {
    // The first loss since the stream was last resumed.
    down_since_ = now;
    attempts_ = 0;
    if (!window_.empty()) {
      Log().warn("tocl tcp: {}; connecting again, {} frames wait", reason, window_.size());
    } else {
      Log().debug("tocl tcp: {}", reason);
    }
    TcpTraffic::Add(context_.traffic.connections_lost, 1);
  } else {
    Log().debug("tocl tcp: attempt {} failed: {}", attempts_, reason);
  }
  state_ = State::kDown;
  broken_reason_ = std::move(reason);
  window_.Rewind();
  if (!window_.empty()) {
    // The runtime may move the frames to another network (Take).
    went_down_ = true;
    context_.route_went_down.store(true, std::memory_order_release);
  }
  SetDownLocked(true);
  // With nothing to send, the next Post connects (a peer on its way out
  // is not called back).
  next_attempt_ = window_.empty() ? Clock::time_point::max() : now + Backoff(attempts_);
  ++attempts_;
  if (next_attempt_ <= now) ReconnectLocked();
}

void OutboundConnection::CloseSocketLocked() {
  if (fd_.valid()) {
    context_.reactor.Remove(fd_.get());
    fd_.Close();
  }
  SetWantWriteLocked(false);
  handshake_.reset();
  preamble_bytes_ = preamble_written_ = 0;
  // A count half written is lost with the socket: the peer's stream to us
  // is still owed it (its connection's timer or sleep sends it).
  ack_written_ = ack_out_.size();
  in_filled_ = 0;
}

void OutboundConnection::SetDownLocked(bool down) {
  if (down == counted_down_) return;
  counted_down_ = down;
  context_.down.fetch_add(down ? 1 : -1, std::memory_order_relaxed);
}

void OutboundConnection::Shutdown(std::string_view why) {
  std::lock_guard lock(mu_);
  BreakLocked(fmt::format("connection to {} closed: {}", description_, why), /*warn=*/false);
}

void OutboundConnection::BreakLocked(std::string reason, bool warn) {
  if (state_ == State::kBroken) return;
  CloseSocketLocked();
  state_ = State::kBroken;
  SetDownLocked(false);
  const size_t failed = window_.size();
  window_.Fail();
  TcpTraffic::Add(context_.traffic.routes_broken, 1);
  if (warn) {
    Log().warn("tocl tcp: {} ({} queued frames failed)", reason, failed);
  } else {
    Log().debug("tocl tcp: {} ({} queued frames failed)", reason, failed);
  }
  broken_reason_ = std::move(reason);
}

}  // namespace tocl::subsystem::tcp
