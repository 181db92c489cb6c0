#include "security_config.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace tocl::daemon {
namespace {

// The host of "HOST:PORT" without brackets ("" when there is no ':').
std::string HostOf(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return {};
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::string(host);
}

Status CheckLoopback(std::string_view setting, std::string_view address) {
  if (IsLoopbackAddress(address)) return Status::Ok();
  return InvalidArgument(fmt::format(
      "{} {} is not a loopback address, and a daemon without credentials is reachable from this "
      "host only (whoever reached its port could spawn processes): use 127.0.0.1:PORT, or make "
      "cluster credentials with `tocl keygen` and set credentials = \"DIR\" (--credentials DIR; "
      "README 'Security')",
      setting, address));
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  std::string host = HostOf(address);
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Status FinishSecurityConfig(const DaemonConfig& config) {
  if (!config.credentials.empty()) return Status::Ok();
  if (config.listen != "none") TOCL_RETURN_IF_ERROR(CheckLoopback("listen", config.listen));
  if (!config.advertise.empty()) {
    TOCL_RETURN_IF_ERROR(CheckLoopback("advertise", config.advertise));
  }
  for (const std::string& address : config.join) {
    TOCL_RETURN_IF_ERROR(CheckLoopback("join", address));
  }
  return Status::Ok();
}

Result<std::optional<security::Credentials>> LoadDaemonCredentials(const DaemonConfig& config) {
  if (config.credentials.empty()) {
    spdlog::warn(
        "no credentials configured (--credentials): gRPC listens on loopback only and processes' "
        "networks stay on loopback; see README 'Security'");
    return std::optional<security::Credentials>();
  }
  Result<security::Credentials> loaded = security::LoadCredentials(config.credentials);
  if (!loaded.ok()) return loaded.status().WithContext("credentials");
  spdlog::info("credentials {}: host '{}', gRPC over TCP is mutual TLS", loaded->directory,
               loaded->host);
  return std::optional<security::Credentials>(std::move(*loaded));
}

}  // namespace tocl::daemon
