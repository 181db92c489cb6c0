#include "support/daemon_connection.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace tocl::cli {
namespace {

constexpr std::string_view kUnixScheme = "unix:";

// The file system path of a "unix:" address ("unix:///p" and "unix:/p" both
// name /p).
std::string SocketPath(std::string_view address) {
  std::string_view path = address.substr(kUnixScheme.size());
  if (path.starts_with("//")) path.remove_prefix(2);
  return std::string(path);
}

// Why nobody can answer at `path`, or "" when a socket is there.
std::string MissingSocketReason(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT) return fmt::format("no socket at {} (is toclsd running?)", path);
    return fmt::format("stat {}: {}", path, std::strerror(error));
  }
  if (!S_ISSOCK(info.st_mode)) return fmt::format("{} is not a socket", path);
  return {};
}

}  // namespace

std::string NormalizeDaemonAddress(std::string_view address) {
  if (address.starts_with(kUnixScheme)) return std::string(address);
  const bool is_path =
      address.find('/') != std::string_view::npos || address.find(':') == std::string_view::npos;
  if (is_path) return fmt::format("{}{}", kUnixScheme, address);
  return std::string(address);
}

Result<std::unique_ptr<DirectoryClient>> ConnectToDaemon(std::string_view address,
                                                         std::chrono::milliseconds timeout) {
  if (address.empty()) return InvalidArgument("the daemon address is empty");
  const std::string target = NormalizeDaemonAddress(address);
  if (target.starts_with(kUnixScheme)) {
    const std::string reason = MissingSocketReason(SocketPath(target));
    if (!reason.empty()) {
      return Unavailable(fmt::format("cannot reach the daemon at {}: {}", target, reason));
    }
  }
  auto client = DirectoryClient::Connect(target, timeout);
  if (!client.ok()) {
    // Over TCP the library says why (a TLS handshake that failed, what
    // credentials to give) better than a timeout does.
    if (client.status().code() != StatusCode::kUnavailable || !target.starts_with(kUnixScheme)) {
      return client.status();
    }
    return Unavailable(fmt::format("cannot reach the daemon at {}: no answer within {} ms", target,
                                   timeout.count()));
  }
  return client;
}

}  // namespace tocl::cli
