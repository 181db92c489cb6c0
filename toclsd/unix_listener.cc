#include "unix_listener.h"

#include <fmt/format.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tocl::daemon {
namespace {

// How long accepting pauses when the daemon is out of descriptors (the
// pending connection waits in the backlog meanwhile). The listening socket
// stays readable all that time, so it is not polled then: the pause is a
// wait for Stop only.
constexpr int kOutOfDescriptorsPauseMs = 100;

}  // namespace

Result<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path,
                                                           directory::AcceptTimes& accept_times) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return InvalidArgument(
        fmt::format("socket path {} is longer than the {} bytes unix sockets allow", path,
                    sizeof(address.sun_path) - 1));
  }
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  Fd socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!socket.valid()) return ErrnoStatus("socket(AF_UNIX)", errno);
  if (::bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return ErrnoStatus(fmt::format("bind unix:{}", path), errno);
  }
  if (::listen(socket.get(), SOMAXCONN) != 0) {
    return ErrnoStatus(fmt::format("listen on unix:{}", path), errno);
  }
  Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus("eventfd", errno);
  return std::unique_ptr<UnixListener>(
      new UnixListener(std::move(socket), std::move(wake), accept_times));
}

UnixListener::~UnixListener() {
  Stop();
}

void UnixListener::Serve(grpc::Server& server) {
  thread_ = std::thread([this, &server] { AcceptLoop(server); });
}

void UnixListener::Stop() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) < 0 && errno != EAGAIN) {
    spdlog::error("waking the unix socket's accept thread: {}", std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
}

void UnixListener::AcceptLoop(grpc::Server& server) {
  for (;;) {
    pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("the unix socket stops accepting: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    // Non-blocking, as gRPC's endpoints are; gRPC owns the descriptor from
    // the hand-over on and closes it when the connection's last call is
    // gone (caller.h relies on that).
    const int connection = ::accept4(socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (connection < 0) {
      if (!AfterAcceptError(errno)) return;
      continue;
    }
    if (failed_accepts_ > 0) {
      spdlog::info("the unix socket accepts again, after {} failed attempts", failed_accepts_);
      failed_accepts_ = 0;
    }
    // Before gRPC has it: no call on it can be made before its time is.
    accept_times_.Accepted(connection);
    grpc::AddInsecureChannelFromFd(&server, connection);
  }
}

bool UnixListener::AfterAcceptError(int error) {
  if (error != EMFILE && error != ENFILE && error != ENOBUFS && error != ENOMEM) {
    return true;  // EAGAIN, ECONNABORTED, EINTR: the next poll tells
  }
  if (failed_accepts_++ == 0) {
    spdlog::warn(
        "the unix socket cannot accept: {}; connections wait until descriptors are free "
        "(raise LimitNOFILE= in toclsd's unit); retrying every {} ms",
        std::strerror(error), kOutOfDescriptorsPauseMs);
  }
  return !StopRequested(kOutOfDescriptorsPauseMs);
}

bool UnixListener::StopRequested(int timeout_ms) const {
  pollfd wake = {wake_.get(), POLLIN, 0};
  // An error (EINTR) only cuts the pause short: the accept loop goes on.
  return ::poll(&wake, 1, timeout_ms) > 0;
}

}  // namespace tocl::daemon
