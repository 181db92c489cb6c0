#include "spawn_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "spawn/allow_list.h"
#include "spawn/run_as.h"
#include "toml_read.h"

namespace tocl::daemon {
namespace {

constexpr std::string_view kSpawnKeys[] = {"allow", "run_as", "run_as_group", "log_max_bytes"};
// A cap below this would keep too little of a log to read, and the cap is
// kept in whole file-system blocks.
constexpr int64_t kMinLogMaxBytes = int64_t{64} << 10;

Status ReadAllow(const toml::table& spawn, std::string_view source, std::vector<std::string>& out) {
  const toml::node* node = spawn.get("allow");
  if (node == nullptr) return Status::Ok();
  const toml::array* array = node->as_array();
  if (array == nullptr) {
    return InvalidArgument(fmt::format(
        "{}: 'spawn.allow' has the wrong type (an array of globs, e.g. [\"/usr/bin/*\"])",
        Where(*node, source)));
  }
  std::vector<std::string> globs;
  for (const toml::node& element : *array) {
    std::optional<std::string> glob = element.value_exact<std::string>();
    if (!glob) {
      return InvalidArgument(fmt::format("{}: 'spawn.allow' holds something that is not a string",
                                         Where(element, source)));
    }
    // Checked here as well as in FinishSpawnConfig: here the error has a line.
    if (Status valid = spawn::ValidateAllowGlob(*glob); !valid.ok()) {
      return InvalidArgument(fmt::format("{}: {}", Where(element, source), valid.message()));
    }
    globs.push_back(*glob);
  }
  out = std::move(globs);
  return Status::Ok();
}

}  // namespace

Status ReadSpawnSettings(const toml::table& root, std::string_view source, DaemonConfig& config) {
  TOCL_RETURN_IF_ERROR(
      Read(root, "socket_group", source, config.socket_group, "socket_group", " (a string)"));
  TOCL_RETURN_IF_ERROR(
      Read(root, "admin_group", source, config.admin_group, "admin_group", " (a string)"));
  const toml::node* node = root.get("spawn");
  if (node == nullptr) return Status::Ok();
  const toml::table* spawn = node->as_table();
  if (spawn == nullptr) {
    return InvalidArgument(
        fmt::format("{}: 'spawn' must be a table ([spawn] with allow = [...], run_as = \"user\")",
                    Where(*node, source)));
  }
  for (const auto& [key, value] : *spawn) {
    if (std::find(std::begin(kSpawnKeys), std::end(kSpawnKeys), key.str()) ==
        std::end(kSpawnKeys)) {
      return InvalidArgument(fmt::format("{}: unknown setting 'spawn.{}' (known in [spawn]: {})",
                                         Where(value, source), key.str(),
                                         fmt::join(kSpawnKeys, ", ")));
    }
  }
  TOCL_RETURN_IF_ERROR(ReadAllow(*spawn, source, config.spawn_allow));
  TOCL_RETURN_IF_ERROR(
      Read(*spawn, "run_as", source, config.spawn_run_as, "spawn.run_as", " (a string)"));
  TOCL_RETURN_IF_ERROR(Read(*spawn, "run_as_group", source, config.spawn_run_as_group,
                            "spawn.run_as_group", " (a string)"));
  TOCL_RETURN_IF_ERROR(Read(*spawn, "log_max_bytes", source, config.spawn_log_max_bytes,
                            "spawn.log_max_bytes", " (an integer, bytes)"));
  return Status::Ok();
}

Status FinishSpawnConfig(const DaemonConfig& config, bool daemon_is_root) {
  if (config.spawn_log_max_bytes != 0 && config.spawn_log_max_bytes < kMinLogMaxBytes) {
    return InvalidArgument(fmt::format("spawn log_max_bytes {} is below {} (64 KiB; 0: no cap)",
                                       config.spawn_log_max_bytes, kMinLogMaxBytes));
  }
  for (const std::string& glob : config.spawn_allow) {
    TOCL_RETURN_IF_ERROR(spawn::ValidateAllowGlob(glob));
  }
  if (!config.admin_group.empty()) {
    TOCL_RETURN_IF_ERROR(spawn::ResolveGroup(config.admin_group, "admin_group").status());
  }
  std::optional<gid_t> socket_gid;
  if (!config.socket_group.empty()) {
    TOCL_ASSIGN_OR_RETURN(socket_gid, spawn::ResolveGroup(config.socket_group, "socket_group"));
  }
  if (config.spawn_run_as.empty()) {
    if (!config.spawn_run_as_group.empty()) {
      return InvalidArgument(fmt::format(
          "spawn run_as_group '{}' is set without run_as (the user the programs run as)",
          config.spawn_run_as_group));
    }
    return Status::Ok();
  }
  // Checked even when it will not be used: a typo fails now, not on the
  // day the daemon runs as root.
  TOCL_ASSIGN_OR_RETURN(spawn::RunAs identity,
                        spawn::ResolveRunAs(config.spawn_run_as, config.spawn_run_as_group));
  if (!daemon_is_root || identity.uid == 0) return Status::Ok();
  // The programs enroll through the unix socket, which only the daemon's
  // user (root) and socket_group can use.
  if (!socket_gid) {
    return InvalidArgument(fmt::format(
        "spawn run_as '{}' needs socket_group: the unix socket is root's alone (0600), so the "
        "programs could not enroll; set socket_group to a group '{}' is in",
        config.spawn_run_as, config.spawn_run_as));
  }
  if (!spawn::InGroup(identity, *socket_gid)) {
    return InvalidArgument(fmt::format(
        "spawn run_as '{}' is not in socket_group '{}' (gid {}), so the programs could not "
        "reach the unix socket to enroll; add the user to the group or choose another",
        config.spawn_run_as, config.socket_group, *socket_gid));
  }
  return Status::Ok();
}

void PrintSpawnSettings(const DaemonConfig& config, toml::table& out) {
  out.insert("socket_group", config.socket_group);
  out.insert("admin_group", config.admin_group);
  toml::array allow;
  for (const std::string& glob : config.spawn_allow) allow.push_back(glob);
  toml::table spawn{{"allow", std::move(allow)},
                    {"run_as", config.spawn_run_as},
                    {"run_as_group", config.spawn_run_as_group},
                    {"log_max_bytes", config.spawn_log_max_bytes}};
  out.insert("spawn", std::move(spawn));
}

}  // namespace tocl::daemon
