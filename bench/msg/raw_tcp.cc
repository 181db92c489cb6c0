#include "raw_tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "payload_buffer.h"
#include "spin.h"
#include "timing.h"

namespace tocl::bench::msg {
namespace {

Status Errno(std::string_view operation) {
  return Unavailable(fmt::format("{}: {}", operation, std::strerror(errno)));
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return Errno("setsockopt TCP_NODELAY");
  }
  // A blocked call gives up after this long instead of hanging on a dead peer.
  timeval timeout{static_cast<time_t>(kSpinTimeout.count()), 0};
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout) != 0) {
    return Errno("setsockopt SO_RCVTIMEO/SO_SNDTIMEO");
  }
  return Status::Ok();
}

Status SetPolling(int fd, bool polling) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return Errno("fcntl F_GETFL");
  flags = polling ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return Errno("fcntl F_SETFL");
  return Status::Ok();
}

// Sends all `size` bytes; on a non-blocking socket spins while it is full.
bool SendAll(int fd, const std::byte* data, size_t size) {
  SpinLimit limit;
  while (size > 0) {
    ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
    if (sent > 0) {
      data += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno == EAGAIN && !limit.Expired()) continue;
    return false;
  }
  return true;
}

// Receives exactly `size` bytes. Blocking sockets wait in recv(MSG_WAITALL);
// non-blocking ones call recv() again and again (the polling baseline).
bool RecvAll(int fd, std::byte* data, size_t size, bool polling) {
  const int flags = polling ? 0 : MSG_WAITALL;
  SpinLimit limit;
  while (size > 0) {
    ssize_t got = ::recv(fd, data, size, flags);
    if (got > 0) {
      data += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return false;  // the other side closed
    if (errno == EINTR) continue;
    if (errno != EAGAIN || !polling) return false;  // blocking: SO_RCVTIMEO ran out
    if (limit.Expired()) return false;
  }
  return true;
}

}  // namespace

Result<std::pair<Fd, Fd>> ConnectedLoopbackPair() {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return Errno("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  socklen_t length = sizeof address;
  if (::bind(listener.get(), raw, sizeof address) != 0) return Errno("bind 127.0.0.1:0");
  if (::listen(listener.get(), 1) != 0) return Errno("listen");
  if (::getsockname(listener.get(), raw, &length) != 0) return Errno("getsockname");
  Fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!client.valid()) return Errno("socket");
  if (::connect(client.get(), raw, sizeof address) != 0) return Errno("connect 127.0.0.1");
  Fd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!server.valid()) return Errno("accept");
  TOCL_RETURN_IF_ERROR(SetNoDelay(client.get()));
  TOCL_RETURN_IF_ERROR(SetNoDelay(server.get()));
  return std::pair<Fd, Fd>(std::move(client), std::move(server));
}

Status RawTcpPingPong(Role role, int fd, bool polling, const RunSpec& spec, LatencyResult* out) {
  TOCL_RETURN_IF_ERROR(SetPolling(fd, polling));
  const size_t size = spec.size;
  PayloadBuffer buffer(size);
  const char* name = polling ? "raw tcp polling ping-pong" : "raw tcp ping-pong";
  if (role == Role::kInitiator) {
    PayloadBuffer reply(size);
    bool wrong_echo = false;
    auto round_trip = [&](uint64_t i) {
      StoreStamp(buffer.data(), i);
      if (!SendAll(fd, buffer.data(), size) || !RecvAll(fd, reply.data(), size, polling)) {
        return false;
      }
      wrong_echo = LoadStamp(reply.data()) != i;
      return !wrong_echo;
    };
    uint64_t next = 1;
    bool ok = TimeRoundTrips(round_trip, spec, next, *out);
    StoreStamp(buffer.data(), kStopStamp);
    bool stopped = SendAll(fd, buffer.data(), size);
    if (wrong_echo) return DataLoss(fmt::format("{}: a reply carried the wrong round", name));
    if (!ok || !stopped) return DeadlineExceeded(fmt::format("{}: {}", name, std::strerror(errno)));
    return Status::Ok();
  }
  for (;;) {
    if (!RecvAll(fd, buffer.data(), size, polling)) {
      return DeadlineExceeded(fmt::format("{}: receive: {}", name, std::strerror(errno)));
    }
    if (LoadStamp(buffer.data()) == kStopStamp) return Status::Ok();
    if (!SendAll(fd, buffer.data(), size)) {
      return DeadlineExceeded(fmt::format("{}: send: {}", name, std::strerror(errno)));
    }
  }
}

Status RawTcpStream(Role role, int fd, const RunSpec& spec, StreamResult* out) {
  TOCL_RETURN_IF_ERROR(SetPolling(fd, false));
  PayloadBuffer buffer(spec.size);
  std::byte ack{1};
  if (role == Role::kInitiator) {
    auto send = [&](StreamMark mark) {
      StoreStamp(buffer.data(), static_cast<uint64_t>(mark));
      return SendAll(fd, buffer.data(), spec.size);
    };
    auto wait_ack = [&] { return RecvAll(fd, &ack, 1, false); };
    if (!TimeStream(send, wait_ack, spec, nullptr, *out)) {
      return DeadlineExceeded(fmt::format("raw tcp stream: {}", std::strerror(errno)));
    }
    return Status::Ok();
  }
  for (;;) {
    if (!RecvAll(fd, buffer.data(), spec.size, false)) {
      return DeadlineExceeded(fmt::format("raw tcp stream: receive: {}", std::strerror(errno)));
    }
    auto mark = static_cast<StreamMark>(LoadStamp(buffer.data()));
    if (mark == StreamMark::kData) continue;
    if (!SendAll(fd, &ack, 1)) {
      return DeadlineExceeded(fmt::format("raw tcp stream: ack: {}", std::strerror(errno)));
    }
    if (mark == StreamMark::kLast) return Status::Ok();
  }
}

}  // namespace tocl::bench::msg
