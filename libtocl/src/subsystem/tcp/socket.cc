#include "subsystem/tcp/socket.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace tocl::subsystem::tcp {

Result<SocketAddress> SocketAddress::FromIp(std::string_view ip, uint16_t port) {
  // inet_pton wants a NUL-terminated string; an address is short.
  if (ip.empty() || ip.size() >= INET6_ADDRSTRLEN) {
    return InvalidArgument(fmt::format("'{}' is not an IP address", ip));
  }
  char text[INET6_ADDRSTRLEN] = {};
  std::memcpy(text, ip.data(), ip.size());
  SocketAddress address;
  if (ip.find(':') == std::string_view::npos) {
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = htons(port);
    if (inet_pton(AF_INET, text, &v4.sin_addr) != 1) {
      return InvalidArgument(fmt::format("'{}' is not an IPv4 address", ip));
    }
    std::memcpy(&address.storage_, &v4, sizeof(v4));
    address.length_ = sizeof(v4);
  } else {
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(port);
    if (inet_pton(AF_INET6, text, &v6.sin6_addr) != 1) {
      return InvalidArgument(fmt::format("'{}' is not an IPv6 address", ip));
    }
    std::memcpy(&address.storage_, &v6, sizeof(v6));
    address.length_ = sizeof(v6);
  }
  return address;
}

Result<SocketAddress> SocketAddress::Parse(std::string_view text) {
  std::string_view ip;
  std::string_view port_text;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgument(fmt::format("'{}' is not [IPv6]:PORT", text));
    }
    ip = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument(fmt::format("'{}' has no port (IP:PORT)", text));
    }
    ip = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (ip.find(':') != std::string_view::npos) {
      return InvalidArgument(
          fmt::format("'{}': an IPv6 address goes in brackets, [IP]:PORT", text));
    }
  }
  unsigned port = 0;
  const auto [end, error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      port == 0 || port > 65535 || (port_text.size() > 1 && port_text[0] == '0')) {
    return InvalidArgument(fmt::format("'{}' has no valid port (1..65535)", text));
  }
  return FromIp(ip, static_cast<uint16_t>(port));
}

SocketAddress SocketAddress::FromSockaddr(const sockaddr_storage& storage, socklen_t length) {
  SocketAddress address;
  address.storage_ = storage;
  address.length_ = length;
  return address;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) {
    sockaddr_in v4;
    std::memcpy(&v4, &storage_, sizeof(v4));
    return ntohs(v4.sin_port);
  }
  if (family() == AF_INET6) {
    sockaddr_in6 v6;
    std::memcpy(&v6, &storage_, sizeof(v6));
    return ntohs(v6.sin6_port);
  }
  return 0;
}

std::string SocketAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    sockaddr_in v4;
    std::memcpy(&v4, &storage_, sizeof(v4));
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return fmt::format("{}:{}", text, ntohs(v4.sin_port));
  }
  if (family() == AF_INET6) {
    sockaddr_in6 v6;
    std::memcpy(&v6, &storage_, sizeof(v6));
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    return fmt::format("[{}]:{}", text, ntohs(v6.sin6_port));
  }
  return fmt::format("(address family {})", family());
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoStatus("setsockopt TCP_NODELAY", errno);
  }
  return Status::Ok();
}

Result<Fd> ListenAnyPort(std::string_view ip, int backlog, std::string* bound) {
  auto bind_address = SocketAddress::FromIp(ip, 0);
  if (!bind_address.ok()) return bind_address.status().WithContext("bind address");
  const int raw = socket(bind_address->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (raw < 0) return ErrnoStatus("listener socket", errno);
  Fd fd(raw);
  int one = 1;
  if (setsockopt(raw, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return ErrnoStatus("setsockopt SO_REUSEADDR", errno);
  }
  if (bind(raw, bind_address->get(), bind_address->length()) != 0) {
    return ErrnoStatus(fmt::format("bind {}", bind_address->ToString()), errno);
  }
  if (listen(raw, backlog) != 0) return ErrnoStatus("listen", errno);
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(raw, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return ErrnoStatus("getsockname", errno);
  }
  *bound = SocketAddress::FromSockaddr(address, length).ToString();
  return fd;
}

}  // namespace tocl::subsystem::tcp
