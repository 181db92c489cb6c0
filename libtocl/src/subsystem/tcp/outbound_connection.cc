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

namespace tocl::subsystem::tcp {

namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;
constexpr size_t kInitialRingEntries = 64;

}  // namespace

void OutboundConnection::FrameRing::push_back(Entry entry) {
  if (count_ == capacity_) {
    const size_t capacity = capacity_ == 0 ? kInitialRingEntries : capacity_ * 2;
    auto entries = std::make_unique<Entry[]>(capacity);
    for (size_t i = 0; i < count_; ++i) entries[i] = (*this)[i];
    entries_ = std::move(entries);
    capacity_ = capacity;
    head_ = 0;
  }
  entries_[(head_ + count_) & (capacity_ - 1)] = entry;
  ++count_;
}

void OutboundConnection::FrameRing::pop_front() {
  head_ = (head_ + 1) & (capacity_ - 1);
  --count_;
}

OutboundConnection::OutboundConnection(ConnectionContext& context, Gid peer_process,
                                       const SocketAddress& address)
    : context_(context),
      peer_process_(peer_process),
      address_(address),
      description_(fmt::format("{} at {}", peer_process.ToString(), address_.ToString())) {}

OutboundConnection::~OutboundConnection() {
  Shutdown("the route is gone");
}

Status OutboundConnection::Start() {
  std::lock_guard lock(mu_);
  TOCL_ASSIGN_OR_RETURN(handshake_, security::ConnectorHandshake::Start(
                                        context_.key, "tcp", context_.self_process, peer_process_));
  SetPreambleLocked(wire::FrameKind::kHello, handshake_->nonce().data());
  const int fd = socket(address_.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  fd_ = Fd(fd);
  TOCL_RETURN_IF_ERROR(SetNoDelay(fd));
  if (connect(fd, address_.get(), address_.length()) == 0) {
    state_ = State::kHandshaking;
    handshake_started_ = std::chrono::steady_clock::now();
  } else if (errno == EINPROGRESS || errno == EINTR) {
    // EINTR: the connection goes on asynchronously, as for EINPROGRESS.
    state_ = State::kConnecting;
  } else {
    BreakLocked(fmt::format("cannot connect to {}: {}", description_,
                            ErrnoStatus("connect", errno).message()),
                /*warn=*/true);
    return Status::Ok();
  }
  TOCL_RETURN_IF_ERROR(context_.reactor.Add(fd, kReadEvents | EPOLLOUT, this));
  SetWantWriteLocked(true);
  if (state_ == State::kHandshaking) FlushLocked();
  return Status::Ok();
}

void OutboundConnection::SetPreambleLocked(wire::FrameKind kind, const std::byte* payload) {
  const wire::Header header = wire::HandshakeHeader(kind, context_.self_process, peer_process_);
  wire::EncodeHeader(header, preamble_.data());
  std::memcpy(preamble_.data() + wire::kHeaderBytes, payload, header.length);
  preamble_written_ = 0;
}

void OutboundConnection::CheckHandshakeDeadline(std::chrono::steady_clock::time_point now,
                                                std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  if (state_ != State::kHandshaking || now - handshake_started_ < timeout) return;
  BreakLocked(fmt::format("connection to {}: no answer to our hello within {} ms (is it a tocl "
                          "process of this cluster?)",
                          description_, timeout.count()),
              /*warn=*/true);
}

Status OutboundConnection::Post(detail::BufferSlot* slot) {
  std::lock_guard lock(mu_);
  if (state_ == State::kBroken) return Unavailable(broken_reason_);
  const size_t bytes = wire::kHeaderBytes + slot->header().length;
  if (bytes > buffers::ClassBytes(slot->class_index)) {
    return InvalidArgument(fmt::format("a frame of {} bytes in a buffer of {}", bytes,
                                       buffers::ClassBytes(slot->class_index)));
  }
  // An empty queue takes any frame, so that one bigger than the limit still goes.
  if (!queue_.empty() && queued_bytes_ + bytes > context_.max_queued_bytes_per_route) {
    // Short enough for the small-string buffer: no allocation while full.
    return Status(StatusCode::kTryAgain, "send queue full");
  }
  slot->set_state(BufferState::kInFlight);
  const bool was_empty = queue_.empty();
  queue_.push_back({slot, bytes});
  queued_bytes_ += bytes;
  // Otherwise EPOLLOUT (or the connect) will write it, after what is ahead.
  if (was_empty && state_ == State::kConnected) FlushLocked();
  return Status::Ok();
}

bool OutboundConnection::Drained() const {
  std::lock_guard lock(mu_);
  return queue_.empty();
}

bool OutboundConnection::Broken() const {
  std::lock_guard lock(mu_);
  return state_ == State::kBroken;
}

void OutboundConnection::OnReady(uint32_t events) {
  std::lock_guard lock(mu_);
  // Broken already: a late event of the current epoll batch.
  if (state_ == State::kBroken) return;
  if (state_ == State::kConnecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    if (error != 0) {
      BreakLocked(fmt::format("cannot connect to {}: {}", description_,
                              ErrnoStatus("connect", error).message()),
                  /*warn=*/true);
      return;
    }
    state_ = State::kHandshaking;
    handshake_started_ = std::chrono::steady_clock::now();
    events |= EPOLLOUT;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != 0) {
    CheckPeerLocked();
    if (state_ == State::kBroken) return;
  }
  if ((events & EPOLLOUT) != 0) FlushLocked();
}

void OutboundConnection::CheckPeerLocked() {
  std::byte scratch[256];
  for (;;) {
    const bool answering = state_ == State::kHandshaking;
    // During the handshake, exactly the answer: whatever follows it is
    // read (and refused) as data on a send-only connection.
    const ssize_t n = answering ? recv(fd_.get(), answer_.data() + answer_filled_,
                                       answer_.size() - answer_filled_, MSG_DONTWAIT)
                                : recv(fd_.get(), scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (answering && n > 0) {
      answer_filled_ += static_cast<size_t>(n);
      if (answer_filled_ < answer_.size()) continue;
      OnAnswerLocked();
      if (state_ == State::kBroken) return;
      continue;
    }
    if (answering && n == 0) {
      BreakLocked(fmt::format("connection to {} lost: closed by the peer during the handshake "
                              "(it may not hold this cluster's secret; see its log)",
                              description_),
                  /*warn=*/true);
    } else if (n == 0) {
      // A peer that closes with nothing of ours queued has most likely just
      // exited: worth a warning only when frames are lost with it.
      BreakLocked(fmt::format("connection to {} lost: closed by the peer", description_),
                  /*warn=*/!queue_.empty());
    } else if (n > 0) {
      BreakLocked(fmt::format("connection to {} lost: the peer sent data on a send-only "
                              "connection",
                              description_),
                  /*warn=*/true);
    } else {
      BreakLocked(fmt::format("connection to {} lost: {}", description_,
                              ErrnoStatus("recv", errno).message()),
                  /*warn=*/true);
    }
    return;
  }
}

void OutboundConnection::OnAnswerLocked() {
  auto header = wire::DecodeHeader(answer_, context_.limits);
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
    std::memcpy(nonce.data(), answer_.data() + wire::kHeaderBytes, nonce.size());
    std::memcpy(mac.data(), answer_.data() + wire::kHeaderBytes + nonce.size(), mac.size());
    auto proof = handshake_->Answer(nonce, mac);
    if (proof.ok()) {
      SetPreambleLocked(wire::FrameKind::kProof, proof->data());
      handshake_.reset();
      state_ = State::kConnected;
      FlushLocked();
      return;
    }
    error = proof.status().message();
  }
  BreakLocked(fmt::format("connection to {}: {}", description_, error), /*warn=*/true);
}

void OutboundConnection::FlushLocked() {
  for (;;) {
    const bool preamble = preamble_written_ < preamble_.size();
    if (state_ != State::kConnected && !(state_ == State::kHandshaking && preamble)) break;
    iovec iov[kMaxFramesPerWrite + 1];
    size_t count = 0;
    size_t total = 0;
    if (preamble) {
      iov[count++] = {preamble_.data() + preamble_written_, preamble_.size() - preamble_written_};
      total += preamble_.size() - preamble_written_;
    }
    const size_t frames =
        state_ == State::kConnected ? std::min(queue_.size(), kMaxFramesPerWrite) : 0;
    for (size_t i = 0; i < frames; ++i) {
      const Entry& entry = queue_[i];
      const size_t skip = i == 0 ? head_written_ : 0;
      iov[count++] = {entry.slot->bytes + skip, entry.bytes - skip};
      total += entry.bytes - skip;
    }
    if (count == 0) break;
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    const ssize_t written = sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      BreakLocked(fmt::format("connection to {} lost: {}", description_,
                              ErrnoStatus("sendmsg", errno).message()),
                  /*warn=*/true);
      return;
    }
    ConsumeLocked(static_cast<size_t>(written));
    if (static_cast<size_t>(written) < total) break;  // the socket buffer is full
  }
  UpdateInterestLocked();
}

void OutboundConnection::ConsumeLocked(size_t written) {
  TcpTraffic::Add(context_.traffic.bytes_sent, written);
  if (preamble_written_ < preamble_.size()) {
    const size_t n = std::min(written, preamble_.size() - preamble_written_);
    preamble_written_ += n;
    written -= n;
  }
  while (written > 0) {
    Entry& entry = queue_.front();
    const size_t rest = entry.bytes - head_written_;
    if (written < rest) {
      head_written_ += written;
      return;
    }
    written -= rest;
    head_written_ = 0;
    queued_bytes_ -= entry.bytes;
    detail::BufferSlot* slot = entry.slot;
    queue_.pop_front();
    TcpTraffic::Add(context_.traffic.frames_sent, 1);
    slot->set_state(BufferState::kSent);
    slot->pool->Unref(slot);
  }
}

void OutboundConnection::UpdateInterestLocked() {
  if (state_ == State::kBroken) return;
  const bool want = state_ == State::kConnecting || preamble_written_ < preamble_.size() ||
                    (state_ == State::kConnected && !queue_.empty());
  if (want != want_write_) {
    if (Status status =
            context_.reactor.Modify(fd_.get(), kReadEvents | (want ? EPOLLOUT : 0u), this);
        !status.ok()) {
      BreakLocked(fmt::format("connection to {} lost: {}", description_, status.message()),
                  /*warn=*/true);
      return;
    }
  }
  SetWantWriteLocked(want);
}

void OutboundConnection::SetWantWriteLocked(bool want) {
  want_write_ = want;
  // Until it is connected it waits for the connect or the handshake answer.
  const bool waits = state_ != State::kBroken && (want || state_ != State::kConnected);
  if (waits == counted_waiting_) return;
  counted_waiting_ = waits;
  context_.waiting.fetch_add(waits ? 1 : -1, std::memory_order_relaxed);
}

void OutboundConnection::Shutdown(std::string_view why) {
  std::lock_guard lock(mu_);
  BreakLocked(fmt::format("connection to {} closed: {}", description_, why), /*warn=*/false);
}

void OutboundConnection::BreakLocked(std::string reason, bool warn) {
  if (state_ == State::kBroken) return;
  state_ = State::kBroken;
  if (fd_.valid()) {
    context_.reactor.Remove(fd_.get());
    fd_.Close();
  }
  SetWantWriteLocked(false);
  const size_t failed = queue_.size();
  while (!queue_.empty()) {
    detail::BufferSlot* slot = queue_.front().slot;
    queue_.pop_front();
    slot->set_state(BufferState::kFailed);
    slot->pool->Unref(slot);
  }
  queued_bytes_ = 0;
  head_written_ = 0;
  TcpTraffic::Add(context_.traffic.routes_broken, 1);
  if (warn) {
    Log().warn("tocl tcp: {} ({} queued frames failed)", reason, failed);
  } else {
    Log().debug("tocl tcp: {} ({} queued frames failed)", reason, failed);
  }
  broken_reason_ = std::move(reason);
}

}  // namespace tocl::subsystem::tcp
