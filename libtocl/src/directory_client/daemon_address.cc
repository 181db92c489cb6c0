#include "directory_client/daemon_address.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>

namespace tocl::client {
namespace {

constexpr std::string_view kForms = "unix:/path, /path or host:port";

Status Malformed(std::string_view address, std::string_view why) {
  return InvalidArgument(
      fmt::format("daemon address '{}': {} (expected {})", address, why, kForms));
}

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

bool IsIpv6(std::string_view text) {
  in6_addr ignored;
  return ::inet_pton(AF_INET6, std::string(text).c_str(), &ignored) == 1;
}

}  // namespace

Result<std::string> DaemonTarget(std::string_view address) {
  if (address.empty()) return InvalidArgument("empty daemon address");
  if (address.starts_with("unix:")) {
    std::string_view path = address.substr(5);
    if (path.starts_with("//")) path = path.substr(2);
    if (path.empty()) return Malformed(address, "the unix socket has no path");
    return std::string(address);
  }
  if (address.starts_with("/") || address.starts_with("./") || address.starts_with("../")) {
    return fmt::format("unix:{}", address);
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return Malformed(address, "no port");
  const std::string_view host = address.substr(0, colon);
  const std::string_view port_text = address.substr(colon + 1);
  uint32_t port = 0;
  const auto [end, error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      port == 0 || port > 65535) {
    return Malformed(address,
                     fmt::format("the port '{}' is not a number from 1 to 65535", port_text));
  }
  if (host.empty()) return Malformed(address, "no host");
  if (host.starts_with("[") && host.ends_with("]")) {
    if (!IsIpv6(host.substr(1, host.size() - 2))) {
      return Malformed(address, fmt::format("{} is not an IPv6 address", host));
    }
    return std::string(address);
  }
  if (host.find(':') != std::string_view::npos) {
    // gRPC would take "::1:7390" as an address without a port.
    return Malformed(
        address, IsIpv6(host)
                     ? fmt::format("write an IPv6 address in brackets: [{}]:{}", host, port_text)
                     : fmt::format("'{}' is not a host", host));
  }
  if (!std::all_of(host.begin(), host.end(), IsHostNameChar)) {
    return Malformed(address, fmt::format("'{}' is not a host name or address", host));
  }
  return std::string(address);
}

}  // namespace tocl::client
