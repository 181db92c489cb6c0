#include "subsystem/tcp/tcp_subsystem.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <utility>

#include "buffers/size_class.h"
#include "core/logger.h"
#include "subsystem/tcp/inbound_connection.h"
#include "subsystem/tcp/outbound_connection.h"

namespace tocl::subsystem::tcp {

namespace {

constexpr int kListenBacklog = 128;
// Connections accepted per readiness event of the listener.
constexpr int kMaxAcceptsPerEvent = 32;

}  // namespace

// What the runtime holds: a handle on a connection the subsystem owns, so
// that dropping it never frees memory the current epoll batch may name.
class TcpSubsystem::TcpRoute final : public subsystem::Route {
 public:
  TcpRoute(TcpSubsystem& owner, OutboundConnection* connection)
      : owner_(owner), connection_(connection) {}
  ~TcpRoute() override { owner_.Release(connection_); }
  TcpRoute(const TcpRoute&) = delete;
  TcpRoute& operator=(const TcpRoute&) = delete;

  Status Post(detail::BufferSlot* slot) override { return connection_->Post(slot); }
  Status PostCopy(const wire::Header& /*header*/, std::span<const std::byte> /*payload*/) override {
    return Status(StatusCode::kUnimplemented, "tcp sends pool buffers only");
  }
  bool Drained() const override { return connection_->Drained(); }
  bool Broken() const override { return connection_->Broken(); }
  bool Down() const override { return connection_->Down(); }
  void Abandon(std::string_view why) override { connection_->Shutdown(why); }
  std::vector<buffers::SlotRef> TakeUnacknowledged() override {
    std::vector<buffers::SlotRef> frames;
    for (detail::BufferSlot* slot : connection_->Take()) frames.emplace_back(slot);
    return frames;
  }

 private:
  TcpSubsystem& owner_;
  OutboundConnection* connection_;  // owned by owner_
};

Result<std::unique_ptr<TcpSubsystem>> TcpSubsystem::Open(const TcpOptions& options,
                                                         subsystem::Reactor& reactor,
                                                         subsystem::Sink& sink,
                                                         buffers::PoolBudget& budget) {
  if (!options.self_process.is_process()) {
    return InvalidArgument(
        fmt::format("tcp: {} is not a process id", options.self_process.ToString()));
  }
  if (options.num_classes == 0 || options.num_classes > buffers::kMaxClasses) {
    return InvalidArgument(fmt::format("tcp: {} size classes (1..{} allowed)", options.num_classes,
                                       buffers::kMaxClasses));
  }
  if (options.handshake_timeout.count() <= 0) {
    return InvalidArgument("tcp: the handshake timeout must be positive");
  }
  if (options.max_handshaking == 0) {
    return InvalidArgument("tcp: max_handshaking must be at least 1");
  }
  if (options.unreachable_timeout.count() <= 0) {
    return InvalidArgument("tcp: the unreachable timeout must be positive");
  }
  std::unique_ptr<TcpSubsystem> tcp(new TcpSubsystem(options, reactor, sink, budget));
  TOCL_RETURN_IF_ERROR(tcp->Listen());
  Log().debug("tocl tcp: {} listens on {}", options.self_process.ToString(), tcp->address_);
  return tcp;
}

TcpSubsystem::TcpSubsystem(const TcpOptions& options, subsystem::Reactor& reactor,
                           subsystem::Sink& sink, buffers::PoolBudget& budget)
    : options_(options),
      pool_(Network::kTcp, options.num_classes, slab_memory_, budget),
      context_(options.self_process, options.key, reactor, sink, pool_,
               wire::Limits{.max_payload = static_cast<uint32_t>(
                                buffers::ClassBytes(options.num_classes - 1) - wire::kHeaderBytes)},
               options.max_queued_bytes_per_route, options.handshake_timeout,
               options.unreachable_timeout) {
  context_.reverse_acknowledged = [this](const wire::Header& header) {
    OnReverseAcknowledged(header);
  };
}

TcpSubsystem::~TcpSubsystem() {
  if (!closed_) Close();
  FreeReleasedOutbound();
  // Every Route handle must be gone by now: each points at its connection.
  assert(outbound_.empty() && "a tcp Route outlived its TcpSubsystem");
}

Status TcpSubsystem::Listen() {
  auto listener = ListenAnyPort(options_.bind_address, kListenBacklog, &address_);
  if (!listener.ok()) return listener.status().WithContext("tcp");
  listen_fd_ = std::move(*listener);
  const int fd = listen_fd_.get();
  return context_.reactor.Add(fd, EPOLLIN, &listener_);
}

void TcpSubsystem::Listener::OnReady(uint32_t /*events*/) {
  owner_.AcceptSome();
}

void TcpSubsystem::AcceptSome() {
  if (closed_ || !accepting_) return;  // a late event of the current batch
  for (int i = 0; i < kMaxAcceptsPerEvent; ++i) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        // Level-triggered, the listener would wake the poller again at once:
        // leave the epoll set until Housekeeping.
        Log().warn("tocl tcp: not accepting connections for a while: {}",
                   ErrnoStatus("accept4", error).message());
        context_.reactor.Remove(listen_fd_.get());
        accepting_ = false;
      } else {
        Log().warn("tocl tcp: {}", ErrnoStatus("accept4", error).message());
      }
      return;
    }
    Fd owned(fd);
    const std::string peer_address = SocketAddress::FromSockaddr(peer, length).ToString();
    if (Status status = SetNoDelay(fd); !status.ok()) {
      Log().debug("tocl tcp: connection from {}: {}", peer_address, status.message());
    }
    MakeRoomForHandshake();
    auto connection = std::make_unique<InboundConnection>(context_, std::move(owned), peer_address);
    if (Status status = connection->Start(); !status.ok()) {
      connection->Close(status.message());
      continue;
    }
    TcpTraffic::Add(context_.traffic.connections_accepted, 1);
    inbound_.push_back(std::move(connection));
  }
}

void TcpSubsystem::MakeRoomForHandshake() {
  InboundConnection* oldest = nullptr;
  size_t handshaking = 0;
  for (auto& connection : inbound_) {
    if (connection->closed() || connection->authenticated()) continue;
    ++handshaking;
    if (oldest == nullptr || connection->accepted_at() < oldest->accepted_at()) {
      oldest = connection.get();
    }
  }
  if (handshaking >= options_.max_handshaking) {
    oldest->Close(
        fmt::format("closed to make room: {} connections were in their handshake", handshaking));
  }
}

bool TcpSubsystem::Reaches(Gid /*peer_process*/, std::string_view address) const {
  return SocketAddress::Parse(address).ok();
}

Result<std::unique_ptr<subsystem::Route>> TcpSubsystem::Connect(Gid peer_process,
                                                                std::string_view address) {
  if (!peer_process.is_process()) {
    return InvalidArgument(fmt::format("tcp: {} is not a process id", peer_process.ToString()));
  }
  auto peer_address = SocketAddress::Parse(address);
  if (!peer_address.ok()) {
    return peer_address.status().WithContext(
        fmt::format("tcp address of {}", peer_process.ToString()));
  }
  std::lock_guard lock(mu_);
  if (closing_) return FailedPrecondition("the tcp subsystem is closed");
  auto connection = std::make_unique<OutboundConnection>(context_, peer_process, *peer_address);
  // Under mu_: Close cannot come between creating the socket and
  // registering the connection.
  if (Status status = connection->Start(); !status.ok()) {
    return status.WithContext(fmt::format("tcp connection to {} at {}", peer_process.ToString(),
                                          connection->address().ToString()));
  }
  OutboundConnection* raw = connection.get();
  by_stream_.emplace(raw->stream_id(), raw);
  outbound_.push_back(std::move(connection));
  return std::unique_ptr<subsystem::Route>(std::make_unique<TcpRoute>(*this, raw));
}

void TcpSubsystem::Release(OutboundConnection* connection) {
  std::lock_guard lock(mu_);
  connection->Shutdown("the route was dropped");
  released_.push_back(connection);
  has_released_.store(true, std::memory_order_release);
}

int TcpSubsystem::Poll() {
  if (context_.inbound_changed) {
    context_.inbound_changed = false;
    ResumePaused();
    FreeClosedInbound();
    // Look again at the next Poll.
    if (paused_ > 0) context_.inbound_changed = true;
  }
  if (has_released_.load(std::memory_order_acquire)) FreeReleasedOutbound();
  // Not while the poller asks epoll anyway (WantsReactorEachRound).
  if (inbound_.size() <= kDirectReadConnections &&
      context_.waiting.load(std::memory_order_relaxed) == 0) {
    // What their reactor handler does; closed and paused ones do nothing.
    for (auto& connection : inbound_) connection->OnReady(EPOLLIN);
  }
  // Owed acknowledgements, and connections down, are looked at every 64th
  // Poll: a clock read each round would cost more than a shm round.
  if ((context_.reports_pending > 0 || context_.down.load(std::memory_order_relaxed) > 0) &&
      (++report_rounds_ & 63) == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (context_.reports_pending > 0) {
      for (auto& connection : inbound_) connection->ReportIfDue(now);
    }
    if (context_.down.load(std::memory_order_relaxed) > 0) TickOutbound(now);
  }
  if (context_.route_went_down.load(std::memory_order_acquire)) ReportRoutesDown();
  return std::exchange(context_.delivered, 0);
}

void TcpSubsystem::OnReverseAcknowledged(const wire::Header& header) {
  OutboundConnection* connection = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = by_stream_.find(header.seq);
    if (it == by_stream_.end()) return;  // a stream we gave up since
    connection = it->second;
  }
  // Outside mu_: only this (the polling) thread frees connections.
  if (connection->peer_process() == Gid::FromRaw(header.source)) {
    connection->OnReverseAcknowledged(header);
  }
}

std::chrono::steady_clock::time_point TcpSubsystem::TickOutbound(
    std::chrono::steady_clock::time_point now) {
  auto next = std::chrono::steady_clock::time_point::max();
  std::lock_guard lock(mu_);
  for (auto& connection : outbound_) next = std::min(next, connection->Tick(now));
  return next;
}

void TcpSubsystem::ReportRoutesDown() {
  context_.route_went_down.store(false, std::memory_order_relaxed);
  std::vector<Gid> down;
  {
    std::lock_guard lock(mu_);
    for (auto& connection : outbound_) {
      if (connection->TakeWentDown()) down.push_back(connection->peer_process());
    }
  }
  // Outside mu_: the runtime takes its queue's lock and calls the route.
  for (Gid peer : down) context_.sink.OnRouteDown(peer);
}

std::chrono::steady_clock::time_point TcpSubsystem::WakeBy() {
  if (context_.down.load(std::memory_order_relaxed) == 0) {
    return std::chrono::steady_clock::time_point::max();
  }
  return TickOutbound(std::chrono::steady_clock::now());
}

bool TcpSubsystem::WantsReactorEachRound() const {
  return inbound_.size() > kDirectReadConnections ||
         context_.waiting.load(std::memory_order_relaxed) > 0;
}

bool TcpSubsystem::PrepareToSleep() {
  // A sender's window waits for them: a sleeping process runs no timer.
  if (context_.reports_pending > 0) {
    for (auto& connection : inbound_) {
      connection->ReportIfDue(std::chrono::steady_clock::time_point::max());
    }
  }
  if (paused_ == 0 || context_.sink.Congested()) return true;
  return !ResumePaused() && context_.delivered == 0;
}

bool TcpSubsystem::ResumePaused() {
  bool resumed = false;
  paused_ = 0;
  for (auto& connection : inbound_) {
    if (!connection->paused()) continue;
    if (connection->TryResume()) {
      resumed = true;
    } else {
      ++paused_;
    }
  }
  return resumed;
}

void TcpSubsystem::Housekeeping() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& connection : inbound_) {
    if (!connection->closed() && !connection->authenticated() &&
        now - connection->accepted_at() >= options_.handshake_timeout) {
      connection->Close(
          fmt::format("no finished handshake within {} ms", options_.handshake_timeout.count()));
    }
  }
  TickOutbound(now);
  FreeClosedInbound();
  // Forgotten once their senders have given them up.
  context_.streams.Expire(now, 2 * options_.unreachable_timeout);
  FreeReleasedOutbound();
  context_.reverse_acks.Expire();
  if (!accepting_ && !closed_) {
    if (context_.reactor.Add(listen_fd_.get(), EPOLLIN, &listener_).ok()) accepting_ = true;
  }
}

bool TcpSubsystem::DrainFrom(Gid process) {
  // A connection it opened may still wait to be accepted, its hello unread.
  AcceptSome();
  bool ended = true;
  for (auto& connection : inbound_) {
    if (connection->closed()) continue;
    const Gid peer = connection->peer_process();
    if (!peer.is_null() && peer != process) continue;
    // Paused, the sink congested: the caller's sink is not (subsystem.h).
    // At the pool's cap it stays paused.
    if (connection->paused() && !connection->TryResume()) {
      ended = false;
      continue;
    }
    // Reads until the socket has nothing more (or a budget of reads).
    connection->OnReady(EPOLLIN);
    if (!connection->closed() && connection->peer_process() == process) ended = false;
  }
  return ended;
}

void TcpSubsystem::FreeClosedInbound() {
  std::erase_if(inbound_, [](const std::unique_ptr<InboundConnection>& connection) {
    return connection->closed();
  });
}

void TcpSubsystem::FreeReleasedOutbound() {
  std::vector<std::unique_ptr<OutboundConnection>> freed;
  {
    std::lock_guard lock(mu_);
    has_released_.store(false, std::memory_order_relaxed);
    if (released_.empty()) return;
    for (OutboundConnection* connection : released_) {
      auto it = std::find_if(outbound_.begin(), outbound_.end(),
                             [&](const auto& owned) { return owned.get() == connection; });
      if (it == outbound_.end()) continue;
      by_stream_.erase(connection->stream_id());
      freed.push_back(std::move(*it));
      outbound_.erase(it);
    }
    released_.clear();
  }
  // `freed` goes here, outside mu_.
}

size_t TcpSubsystem::inbound_connections() const {
  return static_cast<size_t>(
      std::count_if(inbound_.begin(), inbound_.end(),
                    [](const auto& connection) { return !connection->closed(); }));
}

void TcpSubsystem::Close() {
  if (closed_) return;
  closed_ = true;
  if (listen_fd_.valid()) {
    if (accepting_) context_.reactor.Remove(listen_fd_.get());
    listen_fd_.Close();
  }
  for (auto& connection : inbound_) connection->Close("");
  inbound_.clear();
  std::lock_guard lock(mu_);
  closing_ = true;
  for (auto& connection : outbound_) connection->Shutdown("the tcp subsystem is closed");
}

}  // namespace tocl::subsystem::tcp
