#include "subsystem/via/sockets/sockets_vi.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "subsystem/via/sockets/sockets_provider.h"

namespace tocl::subsystem::via {

namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;
// Sends gathered per sendmsg (two iovecs each).
constexpr size_t kMaxSendsPerWrite = 32;
// Reads per readiness event; level-triggered epoll comes back for the rest.
constexpr int kMaxReadsPerEvent = 16;
// The largest message a VI carries: the largest class we accept (1 MiB).
constexpr uint32_t kMaxMessageBytes = 1u << 20;

// A connect that failed: nobody listens (refused), or the way is lost.
Status ConnectFailed(const std::string& peer, int error) {
  std::string message =
      fmt::format("cannot connect to {}: {}", peer, ErrnoStatus("connect", error).message());
  return error == ECONNREFUSED ? NotFound(std::move(message)) : Unavailable(std::move(message));
}

uint32_t Load32(const std::byte* at) {
  uint32_t value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}

}  // namespace

SocketsVi::SocketsVi(SocketsProvider& owner, void* context) : owner_(owner), context_(context) {}

SocketsVi::~SocketsVi() {
  owner_.Forget(this);
  std::lock_guard lock(mu_);
  if (registered_) owner_.reactor().Remove(fd_.get());
  // Descriptors still here were never reported: the handler destroys a VI
  // only after OnClosed, or one that never connected and never got any.
}

Status SocketsVi::ConnectRequest(std::string_view address, const ConnectData& data) {
  auto peer = tcp::SocketAddress::Parse(address);
  if (!peer.ok()) return peer.status().WithContext("via address");
  std::lock_guard lock(mu_);
  if (state_ != State::kIdle) return FailedPrecondition("the VI is already connecting");
  const int fd = socket(peer->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  fd_ = Fd(fd);
  peer_ = fmt::format("{} at {}", data.peer.ToString(), peer->ToString());
  TOCL_RETURN_IF_ERROR(tcp::SetNoDelay(fd));
  TOCL_ASSIGN_OR_RETURN(handshake_, security::ConnectorHandshake::Start(owner_.options().key, "via",
                                                                        data.process, data.peer));
  request_.resize(ConnectData::kBytes + handshake_->nonce().size());
  data.Encode(request_.data());
  std::memcpy(request_.data() + ConnectData::kBytes, handshake_->nonce().data(),
              handshake_->nonce().size());
  state_ = State::kConnecting;
  if (connect(fd, peer->get(), peer->length()) != 0 && errno != EINPROGRESS && errno != EINTR) {
    BreakLocked(ConnectFailed(peer_, errno));
    return Status::Ok();  // OnClosed says so
  }
  TOCL_RETURN_IF_ERROR(owner_.reactor().Add(fd, kReadEvents | EPOLLOUT, this));
  registered_ = true;
  want_write_ = true;
  return Status::Ok();
}

Status SocketsVi::Adopt(Fd fd, std::string peer_address) {
  std::lock_guard lock(mu_);
  if (state_ != State::kIdle) return FailedPrecondition("the VI is already connected");
  fd_ = std::move(fd);
  peer_ = std::move(peer_address);
  state_ = State::kConnected;
  TOCL_RETURN_IF_ERROR(owner_.reactor().Add(fd_.get(), kReadEvents, this));
  registered_ = true;
  return Status::Ok();
}

Status SocketsVi::PostRecv(const Descriptor& descriptor) {
  std::lock_guard lock(mu_);
  if (state_ == State::kBroken || state_ == State::kFinished) return Unavailable(why_.message());
  receives_.push_back(descriptor);
  return Status::Ok();
}

Status SocketsVi::PostSend(const Descriptor& descriptor, bool* done_now) {
  *done_now = false;
  std::vector<detail::BufferSlot*> done;
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kConnected) {
      if (state_ == State::kBroken || state_ == State::kFinished) {
        return Unavailable(why_.message());
      }
      return FailedPrecondition("the VI is not connected yet");
    }
    PendingSend send{descriptor, {}, 0};
    std::memcpy(send.header.data(), &descriptor.length, 4);
    std::memcpy(send.header.data() + 4, &descriptor.immediate, 4);
    const bool was_empty = sends_.empty();
    sends_.push_back(send);
    if (was_empty) {
      FlushLocked(done);
      // Written whole at once: the caller completes it, no callback.
      if (!done.empty() && done.back() == descriptor.slot) {
        done.pop_back();
        *done_now = true;
      }
    }
  }
  ReportSendDone(done);
  return Status::Ok();
}

void SocketsVi::ReportSendDone(std::vector<detail::BufferSlot*>& done) {
  for (detail::BufferSlot* slot : done) owner_.handler().OnSendDone(context_, slot, Status::Ok());
  done.clear();
}

void SocketsVi::FlushLocked(std::vector<detail::BufferSlot*>& done) {
  while (state_ == State::kConnected && !sends_.empty()) {
    iovec iov[2 * kMaxSendsPerWrite];
    size_t count = 0;
    size_t total = 0;
    const size_t sends = std::min(sends_.size(), kMaxSendsPerWrite);
    for (size_t i = 0; i < sends; ++i) {
      PendingSend& send = sends_[i];
      size_t skip = send.written;
      if (skip < kPacketHeaderBytes) {
        iov[count++] = {send.header.data() + skip, kPacketHeaderBytes - skip};
        total += kPacketHeaderBytes - skip;
        skip = 0;
      } else {
        skip -= kPacketHeaderBytes;
      }
      if (send.descriptor.length > skip) {
        iov[count++] = {send.descriptor.slot->bytes + skip, send.descriptor.length - skip};
        total += send.descriptor.length - skip;
      }
    }
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    const ssize_t written = sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      BreakLocked(Unavailable(fmt::format("connection to {} lost: {}", peer_,
                                          ErrnoStatus("sendmsg", errno).message())));
      return;
    }
    size_t left = static_cast<size_t>(written);
    while (left > 0) {
      PendingSend& send = sends_.front();
      const size_t rest = kPacketHeaderBytes + send.descriptor.length - send.written;
      if (left < rest) {
        send.written += left;
        break;
      }
      left -= rest;
      done.push_back(send.descriptor.slot);
      sends_.pop_front();
    }
    if (static_cast<size_t>(written) < total) break;  // the socket buffer is full
  }
  UpdateInterestLocked();
}

void SocketsVi::UpdateInterestLocked() {
  if (!registered_ || state_ == State::kBroken || state_ == State::kFinished) return;
  const bool want = state_ == State::kConnecting || !request_.empty() || !sends_.empty();
  if (want == want_write_) return;
  if (Status status =
          owner_.reactor().Modify(fd_.get(), kReadEvents | (want ? EPOLLOUT : 0u), this);
      !status.ok()) {
    BreakLocked(status);
    return;
  }
  want_write_ = want;
}

void SocketsVi::OnReady(uint32_t events) {
  std::vector<detail::BufferSlot*> done;
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kBroken || state_ == State::kFinished || !fd_.valid()) return;
    if (state_ == State::kConnecting) {
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      int error = 0;
      socklen_t length = sizeof(error);
      if (getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
      if (error != 0) {
        BreakLocked(ConnectFailed(peer_, error));
        return;
      }
      state_ = State::kAwaitReply;
    }
    if (!request_.empty() && (events & EPOLLOUT) != 0) {
      const ssize_t n = send(fd_.get(), request_.data(), request_.size(), MSG_NOSIGNAL);
      if (n > 0) {
        request_.erase(request_.begin(), request_.begin() + n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        BreakLocked(Unavailable(
            fmt::format("connection to {} lost: {}", peer_, ErrnoStatus("send", errno).message())));
        return;
      }
      UpdateInterestLocked();
    }
    if (state_ == State::kConnected && (events & EPOLLOUT) != 0) FlushLocked(done);
  }
  ReportSendDone(done);
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != 0) ReadSome();
}

void SocketsVi::ReadSome() {
  if (!staging_) staging_ = std::make_unique<std::byte[]>(kStagingBytes);
  for (int reads = 0; reads < kMaxReadsPerEvent; ++reads) {
    int fd;
    {
      std::lock_guard lock(mu_);
      if (state_ != State::kConnected && state_ != State::kAwaitReply) return;
      fd = fd_.get();  // closed only by this thread (Finish)
    }
    if (direct_ != nullptr) {
      const size_t want = direct_length_ - direct_filled_;
      const ssize_t n = recv(fd, direct_->bytes + direct_filled_, want, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        Break(Unavailable(n == 0 ? fmt::format("{} closed the VI inside a message", peer_)
                                 : ErrnoStatus("recv", errno).message()));
        return;
      }
      direct_filled_ += static_cast<size_t>(n);
      if (direct_filled_ == direct_length_ && !CompleteDirect()) return;
      continue;
    }
    if (begin_ == end_) {
      begin_ = end_ = 0;
    } else if (begin_ > 0) {
      std::memmove(staging_.get(), staging_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    const size_t room = kStagingBytes - end_;
    const ssize_t n = recv(fd, staging_.get() + end_, room, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      std::string why;
      bool answered;
      {
        std::lock_guard lock(mu_);
        answered = state_ == State::kConnected;
      }
      if (n < 0) {
        why = fmt::format("connection to {} lost: {}", peer_, ErrnoStatus("recv", errno).message());
      } else if (end_ != begin_) {
        why = fmt::format("{} closed the VI inside a message", peer_);
      } else {
        why = fmt::format("{} closed the VI", peer_);
      }
      // Before its answer: no tocl process of this cluster and version
      // there (one that cannot read the request closes the connection).
      Break(answered ? Unavailable(why)
                     : NotFound(fmt::format("{} before it answered the request", why)));
      return;
    }
    end_ += static_cast<size_t>(n);
    bool awaiting_reply;
    {
      std::lock_guard lock(mu_);
      awaiting_reply = state_ == State::kAwaitReply;
    }
    if (awaiting_reply && !TakeReply()) continue;
    if (!TakeMessages()) return;
    if (static_cast<size_t>(n) < room) return;  // drained
  }
}

bool SocketsVi::TakeAnswer(const std::byte* answer) {
  security::Nonce nonce;
  security::Mac mac;
  std::memcpy(nonce.data(), answer, nonce.size());
  std::memcpy(mac.data(), answer + nonce.size(), mac.size());
  std::lock_guard lock(mu_);
  if (state_ != State::kAwaitReply) return false;
  auto proof = handshake_->Answer(nonce, mac);
  if (!proof.ok()) {
    BreakLocked(PermissionDenied(fmt::format("{}: {}", peer_, proof.status().message())));
    return false;
  }
  handshake_.reset();
  request_.assign(proof->begin(), proof->end());
  UpdateInterestLocked();
  return state_ == State::kAwaitReply;
}

bool SocketsVi::TakeReply() {
  const size_t staged = end_ - begin_;
  if (staged < 4) return false;
  const std::byte* at = staging_.get() + begin_;
  const uint32_t verdict = Load32(at);
  bool answer_due;
  {
    std::lock_guard lock(mu_);
    answer_due = handshake_.has_value();
  }
  if (verdict == 0 && answer_due) {
    constexpr size_t kAnswerBytes = 4 + sizeof(security::Nonce) + sizeof(security::Mac);
    if (staged < kAnswerBytes) return false;
    if (!TakeAnswer(at + 4)) return false;
    begin_ += kAnswerBytes;
    return TakeReply();  // the verdict may be staged already
  }
  if (verdict == 0) {
    if (staged < 4 + ConnectData::kBytes) return false;
    auto data = ConnectData::Decode(std::span<const std::byte>(at + 4, ConnectData::kBytes),
                                    owner_.options().num_classes);
    if (!data.ok()) {
      // Another version (FailedPrecondition) or malformed (InvalidArgument).
      Break(Status(data.status().code(),
                   fmt::format("{} accepted with bad data: {}", peer_, data.status().message())));
      return false;
    }
    begin_ += 4 + ConnectData::kBytes;
    {
      std::lock_guard lock(mu_);
      if (state_ != State::kAwaitReply) return false;
      state_ = State::kConnected;
    }
    owner_.handler().OnConnected(context_, *data);
    return true;
  }
  if (staged < 8) return false;
  const uint32_t length = Load32(at + 4);
  if (verdict != 1 || length > kMaxReasonBytes) {
    Break(
        InvalidArgument(fmt::format("{} sent a malformed reply to the connection request", peer_)));
    return false;
  }
  if (staged < 8 + length) return false;
  Break(FailedPrecondition(
      fmt::format("{} rejected the connection: {}", peer_,
                  std::string_view(reinterpret_cast<const char*>(at + 8), length))));
  return false;
}

detail::BufferSlot* SocketsVi::TakeDescriptor(uint32_t length, uint32_t* capacity) {
  std::lock_guard lock(mu_);
  if (state_ != State::kConnected) return nullptr;  // broken by a handler call
  if (receives_.empty()) {
    BreakLocked(InvalidArgument(fmt::format(
        "a message of {} bytes from {} found no receive descriptor posted (VIA: the VI breaks)",
        length, peer_)));
    return nullptr;
  }
  const Descriptor head = receives_.front();
  if (length > head.length) {
    // VIA completes the head descriptor with a length error and breaks the
    // VI; Finish reports it (first in the FIFO) with this status.
    BreakLocked(InvalidArgument(fmt::format(
        "a message of {} bytes from {} is larger than the posted receive buffer of {} bytes "
        "(VIA length error: the VI breaks)",
        length, peer_, head.length)));
    return nullptr;
  }
  receives_.pop_front();
  *capacity = head.length;
  return head.slot;
}

bool SocketsVi::TakeMessages() {
  while (end_ - begin_ >= kPacketHeaderBytes) {
    const std::byte* at = staging_.get() + begin_;
    const uint32_t length = Load32(at);
    const uint32_t immediate = Load32(at + 4);
    if (length > kMaxMessageBytes) {
      Break(InvalidArgument(fmt::format("{} sent a message of {} bytes (at most {})", peer_, length,
                                        kMaxMessageBytes)));
      return false;
    }
    const size_t staged = end_ - begin_ - kPacketHeaderBytes;
    // Wait for a small message to be staged whole before taking its descriptor.
    if (staged < length && length <= kDirectReadBytes) return true;
    uint32_t capacity = 0;
    detail::BufferSlot* slot = TakeDescriptor(length, &capacity);
    if (slot == nullptr) return false;
    begin_ += kPacketHeaderBytes;
    if (staged >= length) {
      std::memcpy(slot->bytes, staging_.get() + begin_, length);
      begin_ += length;
      owner_.handler().OnRecvDone(context_, slot, length, immediate, Status::Ok());
      continue;
    }
    std::memcpy(slot->bytes, staging_.get() + begin_, staged);
    begin_ = end_ = 0;
    direct_ = slot;
    direct_filled_ = staged;
    direct_length_ = length;
    direct_immediate_ = immediate;
    return true;
  }
  return true;
}

bool SocketsVi::CompleteDirect() {
  detail::BufferSlot* slot = std::exchange(direct_, nullptr);
  owner_.handler().OnRecvDone(context_, slot, static_cast<uint32_t>(direct_length_),
                              direct_immediate_, Status::Ok());
  std::lock_guard lock(mu_);
  return state_ == State::kConnected;
}

void SocketsVi::Disconnect(std::string_view why) {
  Break(Unavailable(std::string(why)));
}

void SocketsVi::Break(Status why) {
  std::lock_guard lock(mu_);
  BreakLocked(std::move(why));
}

void SocketsVi::BreakLocked(Status why) {
  if (state_ == State::kBroken || state_ == State::kFinished) return;
  state_ = State::kBroken;
  why_ = std::move(why);
  // Wakes the poller's reads with an end of stream; the fd itself is closed
  // by Finish, on the polling thread.
  if (fd_.valid()) (void)shutdown(fd_.get(), SHUT_RDWR);
  owner_.ScheduleFinish(this);
}

void SocketsVi::Finish() {
  std::deque<PendingSend> sends;
  std::deque<Descriptor> receives;
  Status why;
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kFinished) return;
    state_ = State::kFinished;
    if (registered_) {
      owner_.reactor().Remove(fd_.get());
      registered_ = false;
    }
    fd_.Close();
    sends.swap(sends_);
    receives.swap(receives_);
    why = why_;
  }
  for (PendingSend& send : sends) owner_.handler().OnSendDone(context_, send.descriptor.slot, why);
  if (direct_ != nullptr) {
    owner_.handler().OnRecvDone(context_, std::exchange(direct_, nullptr), 0, 0, why);
  }
  for (Descriptor& receive : receives)
    owner_.handler().OnRecvDone(context_, receive.slot, 0, 0, why);
  staging_.reset();
  begin_ = end_ = 0;
  owner_.handler().OnClosed(context_, why);
}

}  // namespace tocl::subsystem::via
