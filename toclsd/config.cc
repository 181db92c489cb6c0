#include "config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "security_config.h"
#include "spawn_config.h"
#include "tocl/entity.h"
#include "tocl/gid.h"
#include "tocl/log.h"
#include "toml_read.h"

namespace tocl::daemon {
namespace {

// Ten years: anything longer is "for ever", which is 0.
constexpr double kMaxRetainSeconds = 10 * 365 * 86400.0;

// A list of addresses: an array of strings, or one string.
Status ReadAddresses(const toml::table& table, std::string_view key, std::string_view source,
                     std::vector<std::string>& out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return Status::Ok();
  if (std::optional<std::string> one = node->value_exact<std::string>()) {
    out = {*one};
    return Status::Ok();
  }
  const toml::array* array = node->as_array();
  if (array == nullptr) {
    return InvalidArgument(fmt::format("{}: '{}' has the wrong type (an array of \"HOST:PORT\")",
                                       Where(*node, source), key));
  }
  std::vector<std::string> addresses;
  for (const toml::node& element : *array) {
    std::optional<std::string> address = element.value_exact<std::string>();
    if (!address) {
      return InvalidArgument(fmt::format("{}: '{}' holds something that is not a string",
                                         Where(element, source), key));
    }
    addresses.push_back(*address);
  }
  out = std::move(addresses);
  return Status::Ok();
}

// [attributes]: a table of strings, added to (or replacing) those set so far.
Status ReadAttributes(const toml::table& table, std::string_view source,
                      std::map<std::string, std::string>& attributes) {
  const toml::node* node = table.get("attributes");
  if (node == nullptr) return Status::Ok();
  const toml::table* entries = node->as_table();
  if (entries == nullptr) {
    return InvalidArgument(
        fmt::format("{}: 'attributes' must be a table ([attributes] with key = \"value\" lines)",
                    Where(*node, source)));
  }
  for (const auto& [key, value] : *entries) {
    std::optional<std::string> text = value.value_exact<std::string>();
    if (!text) {
      return InvalidArgument(
          fmt::format("{}: attribute '{}' must be a string", Where(value, source), key.str()));
    }
    attributes[std::string(key.str())] = *text;
  }
  return Status::Ok();
}

}  // namespace

Status ValidateHostAttributes(const std::map<std::string, std::string>& attributes) {
  // The host entity also carries `networks`.
  if (attributes.size() + 1 > kMaxAttributesPerEntity) {
    return InvalidArgument(fmt::format("{} host attributes (at most {})", attributes.size(),
                                       kMaxAttributesPerEntity - 1));
  }
  for (const auto& [key, value] : attributes) {
    if (key == "networks") {
      return InvalidArgument("attribute 'networks' is the networks setting; set it with networks");
    }
    TOCL_RETURN_IF_ERROR(ValidateAttribute(key, value).WithContext("host attribute"));
  }
  return Status::Ok();
}

Status ParseAttributeFlag(std::string_view flag, std::map<std::string, std::string>& attributes) {
  const size_t equals = flag.find('=');
  if (equals == std::string_view::npos || equals == 0) {
    return InvalidArgument(fmt::format("--attribute '{}' is not KEY=VALUE", flag));
  }
  attributes[std::string(flag.substr(0, equals))] = std::string(flag.substr(equals + 1));
  return Status::Ok();
}

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
std::string DaemonConfig::node_key_path() const {
  return state_dir + "/node-key";
}
std::string DaemonConfig::listen_address_path() const {
  return state_dir + "/listen-address";
}
std::chrono::milliseconds DaemonConfig::grace_period() const {
  return std::chrono::milliseconds(static_cast<int64_t>(grace_period_seconds * 1000));
}
std::chrono::microseconds DaemonConfig::retain_exited() const {
  return std::chrono::microseconds(static_cast<int64_t>(retain_exited_seconds * 1e6));
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
  // In the order the error message lists them.
  static const std::vector<std::string_view> kKnown = {
      "state_dir", "socket", "listen", "log_level", "host_name", "grace_period_seconds",
      "cache_kib", "host_id", "networks", "credentials",
      // Cluster.
      "seed", "join", "advertise", "heartbeat_interval_seconds", "down_after_seconds",
      "join_timeout_seconds", "change_log_keep",
      // Retention.
      "retain_exited_seconds",
      // Spawn.
      "attributes", "spawn", "socket_group", "admin_group"};
  for (const auto& [key, node] : table) {
    if (std::find(kKnown.begin(), kKnown.end(), key.str()) == kKnown.end()) {
      return InvalidArgument(fmt::format("{}: unknown setting '{}' (known: {})",
                                         Where(node, source), key.str(), fmt::join(kKnown, ", ")));
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
  TOCL_RETURN_IF_ERROR(Read(table, "credentials", source, loaded.credentials));
  TOCL_RETURN_IF_ERROR(ReadAttributes(table, source, loaded.attributes));
  TOCL_RETURN_IF_ERROR(ReadSpawnSettings(table, source, loaded));
  TOCL_RETURN_IF_ERROR(Read(table, "seed", source, loaded.seed));
  TOCL_RETURN_IF_ERROR(ReadAddresses(table, "join", source, loaded.join));
  TOCL_RETURN_IF_ERROR(Read(table, "advertise", source, loaded.advertise));
  TOCL_RETURN_IF_ERROR(
      Read(table, "heartbeat_interval_seconds", source, loaded.heartbeat_interval_seconds));
  TOCL_RETURN_IF_ERROR(Read(table, "down_after_seconds", source, loaded.down_after_seconds));
  TOCL_RETURN_IF_ERROR(Read(table, "join_timeout_seconds", source, loaded.join_timeout_seconds));
  TOCL_RETURN_IF_ERROR(Read(table, "change_log_keep", source, loaded.change_log_keep));
  TOCL_RETURN_IF_ERROR(Read(table, "retain_exited_seconds", source, loaded.retain_exited_seconds));
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

Status FinishClusterConfig(DaemonConfig& config) {
  // Written so that NaN fails too.
  auto within = [](double value, double low, double high) { return value >= low && value <= high; };
  if (!within(config.heartbeat_interval_seconds, 0.01, 60)) {
    return InvalidArgument(fmt::format("heartbeat_interval_seconds {} is outside 0.01..60",
                                       config.heartbeat_interval_seconds));
  }
  if (!within(config.down_after_seconds, 2 * config.heartbeat_interval_seconds, 3600)) {
    return InvalidArgument(
        fmt::format("down_after_seconds {} is outside {}..3600 (at least two heartbeat intervals)",
                    config.down_after_seconds, 2 * config.heartbeat_interval_seconds));
  }
  if (!within(config.join_timeout_seconds, 0, 86400)) {
    return InvalidArgument(
        fmt::format("join_timeout_seconds {} is outside 0..86400", config.join_timeout_seconds));
  }
  if (config.change_log_keep < 1) {
    return InvalidArgument(
        fmt::format("change_log_keep {} is less than 1", config.change_log_keep));
  }
  std::vector<std::string> join;
  for (const std::string& entry : config.join) {
    // "--join a,b" and repeated --join both work; an empty entry adds
    // nothing. (Split by hand: clang 14, which builds the fuzz targets,
    // cannot compile std::views::split with libstdc++ 12.)
    if (entry.empty()) continue;
    for (size_t start = 0, comma = 0; comma < entry.size(); start = comma + 1) {
      comma = std::min(entry.find(',', start), entry.size());
      std::string address = entry.substr(start, comma - start);
      if (address.empty())
        return InvalidArgument(fmt::format("join: an empty address in '{}'", entry));
      if (address.find(':') == std::string::npos) {
        return InvalidArgument(fmt::format("join: '{}' is not HOST:PORT", address));
      }
      join.push_back(std::move(address));
    }
  }
  config.join = std::move(join);
  if (config.seed && !config.join.empty()) {
    return InvalidArgument(
        "seed and join exclude each other: the seed starts the cluster, the others join it");
  }
  if (config.in_cluster() && config.listen == "none") {
    return InvalidArgument(fmt::format(
        "a daemon in a cluster must listen on TCP (other daemons call it): --listen none cannot "
        "be used with {}",
        config.seed ? "--seed" : "--join"));
  }
  if (!config.advertise.empty() && config.advertise.find(':') == std::string::npos) {
    return InvalidArgument(fmt::format("advertise '{}' is not HOST:PORT", config.advertise));
  }
  return Status::Ok();
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
  if (!(config.retain_exited_seconds >= 0 && config.retain_exited_seconds <= kMaxRetainSeconds)) {
    return InvalidArgument(
        fmt::format("retain_exited_seconds {} is outside 0..{} (0: keep exited entities for ever)",
                    config.retain_exited_seconds, kMaxRetainSeconds));
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
  TOCL_RETURN_IF_ERROR(ValidateHostAttributes(config.attributes));
  TOCL_RETURN_IF_ERROR(FinishSpawnConfig(config, ::geteuid() == 0));
  TOCL_RETURN_IF_ERROR(FinishClusterConfig(config));
  TOCL_RETURN_IF_ERROR(FinishSecurityConfig(config));
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
  table.insert("credentials", config.credentials);
  if (!config.attributes.empty()) {
    toml::table attributes;
    for (const auto& [key, value] : config.attributes) attributes.insert(key, value);
    table.insert("attributes", std::move(attributes));
  }
  PrintSpawnSettings(config, table);
  table.insert("seed", config.seed);
  toml::array join;
  for (const std::string& address : config.join) join.push_back(address);
  table.insert("join", std::move(join));
  table.insert("advertise", config.advertise);
  table.insert("heartbeat_interval_seconds", config.heartbeat_interval_seconds);
  table.insert("down_after_seconds", config.down_after_seconds);
  table.insert("join_timeout_seconds", config.join_timeout_seconds);
  table.insert("change_log_keep", config.change_log_keep);
  table.insert("retain_exited_seconds", config.retain_exited_seconds);
  // Basic strings only ("..." with escapes). toml++ 3.3 writes a value with
  // a newline as a literal string with the raw newline, which TOML forbids,
  // or as a multi-line string, where a newline right after the opening
  // quotes is dropped on reading: the printed file would not load, or load
  // as another value.
  constexpr toml::format_flags kFlags = toml::toml_formatter::default_flags &
                                        ~toml::format_flags::allow_literal_strings &
                                        ~toml::format_flags::allow_multi_line_strings;
  std::stringstream out;
  out << toml::toml_formatter(table, kFlags) << "\n";
  return out.str();
}

}  // namespace tocl::daemon
