#include "config.h"

#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include "tocl/entity.h"
#include "tocl/gid.h"
#include "tocl/log.h"

namespace tocl::daemon {
namespace {

std::string Where(const toml::node& node, std::string_view source) {
  const toml::source_region& region = node.source();
  return fmt::format("{}:{}", source, region.begin.line);
}

template <typename T>
Status Read(const toml::table& table, std::string_view key, std::string_view source, T& out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return Status::Ok();
  // value_exact: no silent conversions (a boolean is not a cache size); a
  // floating-point setting also takes a whole number.
  std::optional<T> value;
  if constexpr (std::is_floating_point_v<T>) {
    value = node->is_integer() ? std::optional<T>(static_cast<T>(*node->value_exact<int64_t>()))
                               : node->value_exact<T>();
  } else {
    value = node->value_exact<T>();
  }
  if (!value) {
    return InvalidArgument(fmt::format("{}: '{}' has the wrong type", Where(*node, source), key));
  }
  out = *value;
  return Status::Ok();
}

}  // namespace

Status ValidateNetworks(std::string_view networks) {
  // The runtime parses the list; the daemon only keeps text that any
  // reader of the host's attribute can print.
  if (networks.find_first_not_of(' ') == std::string_view::npos) {
    return InvalidArgument("networks is empty (\"auto\" picks them)");
  }
  if (networks.size() > kMaxAttributeValueBytes) {
    return InvalidArgument(
        fmt::format("networks is {} bytes (at most {})", networks.size(), kMaxAttributeValueBytes));
  }
  for (size_t i = 0; i < networks.size(); ++i) {
    if (networks[i] < 0x20 || networks[i] > 0x7e) {
      return InvalidArgument(fmt::format("networks: byte {} (0x{:02x}) is not printable ASCII", i,
                                         static_cast<unsigned char>(networks[i])));
    }
  }
  return Status::Ok();
}

std::string DaemonConfig::socket_path() const {
  return socket.empty() ? state_dir + "/toclsd.sock" : socket;
}
std::string DaemonConfig::database_path() const {
  return state_dir + "/directory.db";
}
std::string DaemonConfig::lock_path() const {
  return state_dir + "/toclsd.lock";
}
std::chrono::milliseconds DaemonConfig::grace_period() const {
  return std::chrono::milliseconds(static_cast<int64_t>(grace_period_seconds * 1000));
}

Status LoadConfigText(std::string_view text, std::string_view source, DaemonConfig& config) {
  // Debian's toml++ is built with exceptions: parse errors are caught here
  // and become a Status naming the line and column.
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    return InvalidArgument(fmt::format("{}:{}:{}: {}", source, error.source().begin.line,
                                       error.source().begin.column, error.description()));
  }
  static const std::set<std::string_view> kKnown = {
      "state_dir", "socket",  "listen",  "log_level", "host_name", "grace_period_seconds",
      "cache_kib", "host_id", "networks"};
  for (const auto& [key, node] : table) {
    if (!kKnown.contains(key.str())) {
      return InvalidArgument(
          fmt::format("{}: unknown setting '{}' (known: state_dir, socket, "
                      "listen, log_level, host_name, grace_period_seconds, "
                      "cache_kib, host_id, networks)",
                      Where(node, source), key.str()));
    }
  }
  // Read into a copy: a file with an error changes nothing.
  DaemonConfig loaded = config;
  TOCL_RETURN_IF_ERROR(Read(table, "state_dir", source, loaded.state_dir));
  TOCL_RETURN_IF_ERROR(Read(table, "socket", source, loaded.socket));
  TOCL_RETURN_IF_ERROR(Read(table, "listen", source, loaded.listen));
  TOCL_RETURN_IF_ERROR(Read(table, "log_level", source, loaded.log_level));
  TOCL_RETURN_IF_ERROR(Read(table, "host_name", source, loaded.host_name));
  TOCL_RETURN_IF_ERROR(Read(table, "cache_kib", source, loaded.cache_kib));
  TOCL_RETURN_IF_ERROR(Read(table, "grace_period_seconds", source, loaded.grace_period_seconds));
  if (table.contains("host_id")) {
    int64_t host_id = 0;
    TOCL_RETURN_IF_ERROR(Read(table, "host_id", source, host_id));
    loaded.host_id = host_id;
  }
  TOCL_RETURN_IF_ERROR(Read(table, "networks", source, loaded.networks));
  config = std::move(loaded);
  return Status::Ok();
}

Status LoadConfigFile(const std::string& path, DaemonConfig& config) {
  std::ifstream file(path);
  if (!file) return NotFound(fmt::format("cannot read config file {}", path));
  std::stringstream text;
  text << file.rdbuf();
  return LoadConfigText(text.str(), path, config);
}

Status FinishConfig(DaemonConfig& config) {
  if (config.state_dir.empty()) return InvalidArgument("state_dir is empty");
  if (config.host_name.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
      return FailedPrecondition("cannot read the hostname; set host_name");
    }
    config.host_name = name;
  }
  TOCL_RETURN_IF_ERROR(ValidateName("host", config.host_name));
  // Written so that NaN fails too.
  if (!(config.grace_period_seconds >= 0 && config.grace_period_seconds <= 86400)) {
    return InvalidArgument(
        fmt::format("grace_period_seconds {} is outside 0..86400", config.grace_period_seconds));
  }
  if (config.cache_kib < 256 || config.cache_kib > (int64_t{1} << 22)) {
    return InvalidArgument(fmt::format("cache_kib {} is outside 256..4194304", config.cache_kib));
  }
  if (config.listen.empty()) return InvalidArgument("listen is empty (use \"none\" to disable)");
  if (config.host_id && (*config.host_id < 1 || *config.host_id > Gid::kMaxHost)) {
    return InvalidArgument(
        fmt::format("host_id {} is outside 1..{}", *config.host_id, Gid::kMaxHost));
  }
  TOCL_RETURN_IF_ERROR(ValidateNetworks(config.networks));
  // Checked here so that a typo fails before anything is opened.
  TOCL_RETURN_IF_ERROR(SetLogLevel(config.log_level));
  return Status::Ok();
}

std::string ConfigToToml(const DaemonConfig& config) {
  toml::table table{
      {"state_dir", config.state_dir}, {"socket", config.socket_path()},
      {"listen", config.listen},       {"log_level", config.log_level},
      {"host_name", config.host_name}, {"grace_period_seconds", config.grace_period_seconds},
      {"cache_kib", config.cache_kib}, {"networks", config.networks},
  };
  // TOML has no null: an unset host id is left out.
  if (config.host_id) table.insert("host_id", *config.host_id);
  std::stringstream out;
  out << table << "\n";
  return out.str();
}

}  // namespace tocl::daemon
