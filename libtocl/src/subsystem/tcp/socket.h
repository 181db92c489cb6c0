// The small pieces of POSIX sockets the tcp subsystem is built from: an
// owned fd, the one helper that turns errno into a Status, and socket
// addresses in their text form ("127.0.0.1:7400", "[::1]:7400").
//
// Threading: Fd is owned by one thread at a time (or guarded by its owner's
// mutex); SocketAddress is a value type.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/posix.h"
#include "tocl/status.h"

namespace tocl::subsystem::tcp {

// An IPv4 or IPv6 socket address.
class SocketAddress {
 public:
  // "IP:PORT" with a dotted IPv4 address or a bracketed IPv6 literal
  // ("[::1]:7400"); the port is 1..65535. InvalidArgument says what is wrong.
  static Result<SocketAddress> Parse(std::string_view text);
  // A bare IP ("127.0.0.1", "::1", "0.0.0.0") and a port (0: any).
  static Result<SocketAddress> FromIp(std::string_view ip, uint16_t port);
  // What accept() or getsockname() filled in.
  static SocketAddress FromSockaddr(const sockaddr_storage& storage, socklen_t length);

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const { return length_; }
  int family() const { return storage_.ss_family; }
  uint16_t port() const;

  // "127.0.0.1:7400" or "[::1]:7400".
  std::string ToString() const;

 private:
  sockaddr_storage storage_{};
  socklen_t length_ = 0;
};

// Socket options every tcp socket gets.
Status SetNoDelay(int fd);

// A non-blocking stream socket listening on `ip`, any free port (tcp's
// listener, via's sockets provider). `*bound` is what it is reachable at,
// "IP:PORT". InvalidArgument for a bad IP; the failing call's Status else.
Result<Fd> ListenAnyPort(std::string_view ip, int backlog, std::string* bound);

}  // namespace tocl::subsystem::tcp
