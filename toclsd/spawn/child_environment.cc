#include "spawn/child_environment.h"

#include <fmt/format.h>

#include <array>
#include <set>
#include <string_view>

namespace tocl::daemon::spawn {
namespace {

constexpr size_t kMaxEnvEntries = 1024;
constexpr std::array<std::string_view, 4> kDaemonKeys = {"TOCL_DAEMON", "TOCL_PROCESS_GID",
                                                         "TOCL_SPAWN_TOKEN", "TOCL_PARENT"};

std::string_view KeyOf(std::string_view entry) {
  return entry.substr(0, entry.find('='));
}

bool ValidKey(std::string_view key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  for (char c : key) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char byte : bytes) hex += fmt::format("{:02x}", byte);
  return hex;
}

Status ValidateEnvEntries(const google::protobuf::RepeatedPtrField<std::string>& entries) {
  if (static_cast<size_t>(entries.size()) > kMaxEnvEntries) {
    return InvalidArgument(
        fmt::format("{} env entries (at most {})", entries.size(), kMaxEnvEntries));
  }
  std::set<std::string_view> keys;
  for (int i = 0; i < entries.size(); ++i) {
    std::string_view entry = entries[i];
    if (entry.find('\0') != std::string_view::npos) {
      return InvalidArgument(fmt::format("env[{}] contains a NUL byte", i));
    }
    if (entry.find('=') == std::string_view::npos) {
      return InvalidArgument(fmt::format("env[{}] '{}' is not KEY=VALUE", i, entry));
    }
    std::string_view key = KeyOf(entry);
    if (!ValidKey(key)) {
      return InvalidArgument(fmt::format(
          "env[{}]: '{}' is not a variable name (letters, digits and _, not first a digit)", i,
          key));
    }
    for (std::string_view reserved : kDaemonKeys) {
      if (key == reserved) {
        return InvalidArgument(
            fmt::format("env[{}]: {} is set by the daemon for the process it spawns", i, key));
      }
    }
    if (!keys.insert(key).second) {
      return InvalidArgument(fmt::format("env[{}]: {} is given twice", i, key));
    }
  }
  return Status::Ok();
}

std::vector<std::string> ChildEnvironment(
    const char* const* inherited, const SpawnIdentity& identity,
    const google::protobuf::RepeatedPtrField<std::string>& entries) {
  std::set<std::string_view> replaced;
  for (const std::string& entry : entries) replaced.insert(KeyOf(entry));
  std::vector<std::string> env;
  for (const char* const* variable = inherited; variable != nullptr && *variable != nullptr;
       ++variable) {
    std::string_view entry = *variable;
    if (entry.starts_with("TOCL_") || replaced.contains(KeyOf(entry))) continue;
    env.emplace_back(entry);
  }
  env.push_back("TOCL_DAEMON=" + identity.daemon);
  env.push_back("TOCL_PROCESS_GID=" + identity.gid.ToString());
  env.push_back("TOCL_SPAWN_TOKEN=" + HexEncode(identity.token));
  env.push_back("TOCL_PARENT=" +
                (identity.parent.raw() == 0 ? std::string() : identity.parent.ToString()));
  for (const std::string& entry : entries) env.push_back(entry);
  return env;
}

}  // namespace tocl::daemon::spawn
