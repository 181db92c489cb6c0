#include "cluster/listen_address.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace tocl::daemon::cluster {
namespace {

struct HostPort {
  std::string host;  // without brackets
  std::string port;
};

Result<HostPort> Split(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) {
    return InvalidArgument(fmt::format("listen address '{}' is not HOST:PORT", address));
  }
  HostPort parts{std::string(address.substr(0, colon)), std::string(address.substr(colon + 1))};
  if (parts.host.size() >= 2 && parts.host.front() == '[' && parts.host.back() == ']') {
    parts.host = parts.host.substr(1, parts.host.size() - 2);
  }
  return parts;
}

}  // namespace

bool IsWildcardAddress(std::string_view address) {
  Result<HostPort> parts = Split(address);
  if (!parts.ok()) return false;
  return parts->host.empty() || parts->host == "0.0.0.0" || parts->host == "::";
}

Result<ListenAddress> ListenAddress::Reserve(std::string_view listen) {
  TOCL_ASSIGN_OR_RETURN(HostPort parts, Split(listen));
  ListenAddress reserved;
  if (parts.port != "0") {
    reserved.address_ = std::string(listen);
    return reserved;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(parts.host.empty() ? nullptr : parts.host.c_str(), "0", &hints, &found);
  if (rc != 0) {
    return InvalidArgument(fmt::format("listen address '{}': {}", listen, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("socket for {}: {}", listen, std::strerror(errno)));
  reserved.fd_ = fd;
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
      ::bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    return Unavailable(fmt::format("cannot bind {}: {}", listen, std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return Unavailable(fmt::format("getsockname for {}: {}", listen, std::strerror(errno)));
  }
  char port[NI_MAXSERV] = {};
  rc = ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), length, nullptr, 0, port, sizeof(port),
                     NI_NUMERICSERV);
  if (rc != 0) return Unavailable(fmt::format("port of {}: {}", listen, ::gai_strerror(rc)));
  std::string host = std::string(listen.substr(0, listen.rfind(':')));
  reserved.address_ = fmt::format("{}:{}", host, port);
  return reserved;
}

ListenAddress::ListenAddress(ListenAddress&& other) noexcept
    : address_(std::move(other.address_)), fd_(std::exchange(other.fd_, -1)) {}

ListenAddress& ListenAddress::operator=(ListenAddress&& other) noexcept {
  if (this != &other) {
    Release();
    address_ = std::move(other.address_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ListenAddress::~ListenAddress() {
  Release();
}

void ListenAddress::Release() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

Status WriteListenAddressFile(const std::string& path, std::string_view address) {
  std::error_code error;
  if (address.empty()) {
    std::filesystem::remove(path, error);
    return Status::Ok();
  }
  const std::string temporary = path + ".new";
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << address << "\n";
    if (!file.flush()) return Unavailable(fmt::format("cannot write {}", temporary));
  }
  std::filesystem::rename(temporary, path, error);
  if (error) return Unavailable(fmt::format("cannot write {}: {}", path, error.message()));
  return Status::Ok();
}

}  // namespace tocl::daemon::cluster
