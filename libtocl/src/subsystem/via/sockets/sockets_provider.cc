#include "subsystem/via/sockets/sockets_provider.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/logger.h"
#include "security/handshake.h"
#include "subsystem/via/sockets/sockets_vi.h"

namespace tocl::subsystem::via {

namespace {

constexpr int kListenBacklog = 128;
// Requests read at once; more wait in the kernel's backlog.
constexpr size_t kMaxIncoming = 64;

// Writes all of `bytes` on a non-blocking socket, waiting for room up to
// `deadline` (the connection manager's replies are a few dozen bytes).
Status WriteAll(int fd, std::span<const std::byte> bytes,
                std::chrono::steady_clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoStatus("send", errno);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return DeadlineExceeded("the peer does not read its reply");
    pollfd p{fd, POLLOUT, 0};
    (void)poll(&p, 1, static_cast<int>(left.count()));
  }
  return Status::Ok();
}

// A refusal: [u32 1][u32 n][n bytes of reason] (sockets_vi.h).
void WriteReject(int fd, std::string_view reason, const std::string& peer_address) {
  const uint32_t length =
      static_cast<uint32_t>(std::min<size_t>(reason.size(), SocketsVi::kMaxReasonBytes));
  std::vector<std::byte> bytes(8 + length);
  const uint32_t rejected = 1;
  std::memcpy(bytes.data(), &rejected, 4);
  std::memcpy(bytes.data() + 4, &length, 4);
  std::memcpy(bytes.data() + 8, reason.data(), length);
  if (Status status =
          WriteAll(fd, bytes, std::chrono::steady_clock::now() + SocketsProvider::kRequestTimeout);
      !status.ok()) {
    Log().debug("tocl via: reject {}: {}", peer_address, status.message());
  }
}

class SocketsRequest final : public PendingRequest {
 public:
  SocketsRequest(Fd fd, ConnectData data, std::string peer_address)
      : fd_(std::move(fd)), data_(data), peer_address_(std::move(peer_address)) {}
  const ConnectData& data() const override { return data_; }
  const std::string& peer_address() const override { return peer_address_; }
  Fd& fd() { return fd_; }

 private:
  Fd fd_;
  ConnectData data_;
  std::string peer_address_;
};

}  // namespace

// A connection accepted, its request and handshake not read whole yet:
// [ConnectData][nonce], then (after our answer) [proof]. The ConnectData's
// magic and version are read first: a request of another version is
// refused at once, with the reason, however long it is.
struct SocketsProvider::Incoming {
  static constexpr size_t kRequestBytes = ConnectData::kBytes + sizeof(security::Nonce);
  Fd fd;
  std::string peer_address;
  std::chrono::steady_clock::time_point deadline;
  std::byte bytes[kRequestBytes + sizeof(security::Mac)];
  size_t filled = 0;
  size_t want = ConnectData::kHeaderBytes;  // bytes to read before the next step
  ConnectData data;
  std::optional<security::AcceptorHandshake> handshake;  // once answered
};

Result<std::unique_ptr<Provider>> OpenSocketsProvider(const ProviderOptions& options,
                                                      Reactor& reactor,
                                                      CompletionHandler& handler) {
  auto provider = std::make_unique<SocketsProvider>(options, reactor, handler);
  TOCL_RETURN_IF_ERROR(provider->Listen());
  return std::unique_ptr<Provider>(std::move(provider));
}

SocketsProvider::SocketsProvider(const ProviderOptions& options, Reactor& reactor,
                                 CompletionHandler& handler)
    : options_(options), reactor_(reactor), handler_(handler) {}

SocketsProvider::~SocketsProvider() {
  std::lock_guard lock(mu_);
  // Every VI must be gone by now (the subsystem destroys them first).
  if (!vis_.empty()) Log().error("tocl via: {} sockets VIs outlived their provider", vis_.size());
}

Status SocketsProvider::Listen() {
  auto listener = tcp::ListenAnyPort(options_.bind_ip, kListenBacklog, &address_);
  if (!listener.ok()) return listener.status().WithContext("via");
  listen_fd_ = std::move(*listener);
  const int event = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event < 0) return ErrnoStatus("eventfd", errno);
  interrupt_fd_ = Fd(event);
  return Status::Ok();
}

Result<std::unique_ptr<ProviderVi>> SocketsProvider::CreateVi(void* context,
                                                              PendingRequest* /*request*/) {
  auto vi = std::make_unique<SocketsVi>(*this, context);
  std::lock_guard lock(mu_);
  if (closed_) return FailedPrecondition("the via network is closed");
  vis_.push_back(vi.get());
  return std::unique_ptr<ProviderVi>(std::move(vi));
}

void SocketsProvider::Forget(SocketsVi* vi) {
  std::lock_guard lock(mu_);
  std::erase(vis_, vi);
  std::erase(to_finish_, vi);
}

void SocketsProvider::ScheduleFinish(SocketsVi* vi) {
  {
    std::lock_guard lock(mu_);
    if (std::find(to_finish_.begin(), to_finish_.end(), vi) == to_finish_.end()) {
      to_finish_.push_back(vi);
    }
  }
  reactor_.Wake();
}

int SocketsProvider::Poll() {
  std::vector<SocketsVi*> finish;
  {
    std::lock_guard lock(mu_);
    if (to_finish_.empty()) return 0;
    finish.swap(to_finish_);
  }
  // The handler may destroy a VI only after OnClosed, which Finish reports
  // last: each pointer here is still alive when its turn comes.
  for (SocketsVi* vi : finish) vi->Finish();
  return static_cast<int>(finish.size());
}

bool SocketsProvider::PrepareToSleep() {
  std::lock_guard lock(mu_);
  return to_finish_.empty();
}

void SocketsProvider::InterruptWait() {
  const uint64_t one = 1;
  if (interrupt_fd_.valid()) (void)!write(interrupt_fd_.get(), &one, sizeof(one));
}

void SocketsProvider::AcceptIncoming() {
  while (incoming_.size() < kMaxIncoming) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        Log().warn("tocl via: {}", ErrnoStatus("accept4", errno).message());
      }
      return;
    }
    auto incoming = std::make_unique<Incoming>();
    incoming->fd = Fd(fd);
    incoming->peer_address = tcp::SocketAddress::FromSockaddr(peer, length).ToString();
    incoming->deadline = std::chrono::steady_clock::now() + kRequestTimeout;
    (void)tcp::SetNoDelay(fd);
    incoming_.push_back(std::move(incoming));
  }
}

Status SocketsProvider::AnswerHandshake(Incoming& in) {
  security::Nonce nonce;
  std::memcpy(nonce.data(), in.bytes + ConnectData::kBytes, nonce.size());
  TOCL_ASSIGN_OR_RETURN(
      in.handshake, security::AcceptorHandshake::Start(options_.key, "via", options_.self_process,
                                                       in.data.process, nonce));
  std::byte answer[4 + sizeof(security::Nonce) + sizeof(security::Mac)] = {};  // verdict 0
  std::memcpy(answer + 4, in.handshake->nonce().data(), sizeof(security::Nonce));
  std::memcpy(answer + 4 + sizeof(security::Nonce), in.handshake->mac().data(),
              sizeof(security::Mac));
  // A fresh socket's buffer takes 68 bytes at once.
  const ssize_t n = send(in.fd.get(), answer, sizeof(answer), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(sizeof(answer))) {
    return n < 0 ? ErrnoStatus("send the handshake answer", errno)
                 : Unavailable("the handshake answer did not fit the socket buffer");
  }
  in.want = sizeof(in.bytes);
  return Status::Ok();
}

std::unique_ptr<PendingRequest> SocketsProvider::ReadIncoming() {
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < incoming_.size();) {
    Incoming& in = *incoming_[i];
    bool drop = false;
    bool ready = false;
    std::string why;
    std::string refusal;  // told to the requester before it is dropped
    // Until the socket has nothing more or a step is not complete.
    while (!drop && !ready) {
      const ssize_t n = recv(in.fd.get(), in.bytes + in.filled, in.want - in.filled, 0);
      if (n > 0) {
        in.filled += static_cast<size_t>(n);
      } else if (n == 0) {
        drop = true;
        why = in.handshake ? "closed during the handshake" : "closed before its request";
        break;
      } else {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          drop = true;
          why = ErrnoStatus("recv", errno).message();
        }
        break;
      }
      if (in.filled < in.want) break;
      if (in.want == ConnectData::kHeaderBytes) {
        if (Status header = ConnectData::CheckHeader({in.bytes, in.filled}); !header.ok()) {
          drop = true;
          why = header.message();
          // Another version: the requester learns why, and stops.
          if (header.code() == StatusCode::kFailedPrecondition) refusal = why;
        } else {
          in.want = Incoming::kRequestBytes;
        }
      } else if (!in.handshake) {
        auto data = ConnectData::Decode(std::span<const std::byte>(in.bytes, ConnectData::kBytes),
                                        options_.num_classes);
        if (!data.ok()) {
          drop = true;
          why = data.status().message();
        } else {
          in.data = *data;
          // A request meant for another process (a stale address) goes to
          // the connection manager at once, to be rejected with the reason;
          // no handshake is owed for a refusal.
          ready = in.data.peer != options_.self_process;
          if (!ready) {
            if (Status status = AnswerHandshake(in); !status.ok()) {
              drop = true;
              why = status.message();
            }
          }
        }
      } else {
        security::Mac proof;
        std::memcpy(proof.data(), in.bytes + Incoming::kRequestBytes, proof.size());
        if (Status status = in.handshake->CheckProof(proof); !status.ok()) {
          drop = true;
          why = status.message();
        } else {
          ready = true;
        }
      }
    }
    if (ready) {
      auto request =
          std::make_unique<SocketsRequest>(std::move(in.fd), in.data, std::move(in.peer_address));
      incoming_.erase(incoming_.begin() + static_cast<std::ptrdiff_t>(i));
      return request;
    }
    if (!drop && now >= in.deadline) {
      drop = true;
      why = fmt::format("no request and handshake within {} s", kRequestTimeout.count());
    }
    if (drop) {
      if (!refusal.empty()) {
        WriteReject(in.fd.get(), refusal, in.peer_address);
        Log().warn("tocl via: connection from {} refused: {}", in.peer_address, why);
      } else {
        Log().warn("tocl via: connection from {} dropped: {}", in.peer_address, why);
      }
      incoming_.erase(incoming_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  return nullptr;
}

Result<std::unique_ptr<PendingRequest>> SocketsProvider::ConnectWait(
    std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return Status(StatusCode::kCancelled, "the via network is closed");
    }
    if (auto request = ReadIncoming()) return request;
    std::vector<pollfd> fds;
    fds.push_back({interrupt_fd_.get(), POLLIN, 0});
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    auto wake = deadline;
    for (auto& in : incoming_) {
      fds.push_back({in->fd.get(), POLLIN, 0});
      wake = std::min(wake, in->deadline);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return DeadlineExceeded("no connection request");
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    const int ready = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0)));
    if (ready < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (fds[0].revents != 0) {
      uint64_t value;
      (void)!read(interrupt_fd_.get(), &value, sizeof(value));
      return Status(StatusCode::kCancelled, "the connection manager was interrupted");
    }
    if (fds[1].revents != 0) AcceptIncoming();
  }
}

Status SocketsProvider::ConnectAccept(PendingRequest& request, ProviderVi& vi,
                                      const ConnectData& reply) {
  auto& sockets_request = static_cast<SocketsRequest&>(request);
  std::byte bytes[4 + ConnectData::kBytes] = {};
  reply.Encode(bytes + 4);  // status 0: accepted
  TOCL_RETURN_IF_ERROR(WriteAll(sockets_request.fd().get(), bytes,
                                std::chrono::steady_clock::now() + kRequestTimeout)
                           .WithContext(fmt::format("accept {}", request.peer_address())));
  return static_cast<SocketsVi&>(vi).Adopt(std::move(sockets_request.fd()), request.peer_address());
}

void SocketsProvider::ConnectReject(PendingRequest& request, std::string_view reason) {
  auto& sockets_request = static_cast<SocketsRequest&>(request);
  WriteReject(sockets_request.fd().get(), reason, request.peer_address());
  sockets_request.fd().Close();
}

void SocketsProvider::Close() {
  std::vector<SocketsVi*> vis;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    vis = vis_;
  }
  listen_fd_.Close();
  incoming_.clear();
  for (SocketsVi* vi : vis) vi->Break(Unavailable("the via network is closed"));
  Poll();
}

}  // namespace tocl::subsystem::via
