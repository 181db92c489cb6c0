// The [spawn] table and socket_group: reading, checking, printing; and the
// allow list's glob semantics.
#include <catch2/catch.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "config_loading.h"
#include "spawn/allow_list.h"
#include "spawn/run_as.h"

namespace tocl::daemon {
namespace {

std::string FinishError(const DaemonConfig& config, bool root) {
  Status status = FinishSpawnConfig(config, root);
  REQUIRE_FALSE(status.ok());
  return status.message();
}

TEST_CASE("the spawn settings are read from a [spawn] table and socket_group", "[config][spawn]") {
  DaemonConfig config = MustLoad(
      "socket_group = \"nogroup\"\n"
      "[spawn]\n"
      "allow = [\"/usr/bin/*\", \"/opt/app/bin/server\"]\n"
      "run_as = \"nobody\"\n"
      "run_as_group = \"nogroup\"\n");
  CHECK(config.spawn_allow == std::vector<std::string>{"/usr/bin/*", "/opt/app/bin/server"});
  CHECK(config.spawn_run_as == "nobody");
  CHECK(config.spawn_run_as_group == "nogroup");
  CHECK(config.socket_group == "nogroup");

  DaemonConfig defaults = MustLoad("");
  CHECK(defaults.spawn_allow.empty());
  CHECK(defaults.spawn_run_as.empty());
  CHECK(defaults.socket_group.empty());
}

TEST_CASE("bad [spawn] values are errors naming the key and line", "[config][spawn]") {
  CHECK_THAT(LoadError("[spawn]\nallow = \"/usr/bin/*\"\n"),
             Catch::Contains("test.toml:2: 'spawn.allow' has the wrong type (an array of globs"));
  CHECK_THAT(LoadError("[spawn]\nallow = [\"/usr/bin/*\", 3]\n"),
             Catch::Contains("test.toml:2: 'spawn.allow' holds something that is not a string"));
  CHECK_THAT(LoadError("[spawn]\nrun_as = 0\n"),
             Catch::Contains("test.toml:2: 'spawn.run_as' has the wrong type"));
  CHECK_THAT(LoadError("[spawn]\n\nalow = []\n"),
             Catch::Contains("test.toml:3: unknown setting 'spawn.alow' (known in [spawn]: "
                             "allow, run_as, run_as_group, log_max_bytes)"));
  CHECK_THAT(LoadError("spawn = 1\n"), Catch::Contains("test.toml:1: 'spawn' must be a table"));
  CHECK_THAT(LoadError("socket_group = 65534\n"),
             Catch::Contains("test.toml:1: 'socket_group' has the wrong type"));
  // The globs are checked as they are read, with their line.
  CHECK_THAT(LoadError("[spawn]\nallow = [\n  \"/usr/bin/*\",\n  \"bin/*\",\n]\n"),
             Catch::Contains("test.toml:4: spawn allow 'bin/*' is not an absolute path"));
  CHECK_THAT(LoadError("[spawn]\nallow = [\"\"]\n"),
             Catch::Contains("test.toml:2: spawn allow: an empty entry"));
}

TEST_CASE("the spawn log cap is read from [spawn], 0 turns it off, and tiny caps are refused",
          "[config][spawn]") {
  CHECK(MustLoad("").spawn_log_max_bytes == 16 << 20);
  CHECK(MustLoad("[spawn]\nlog_max_bytes = 1048576\n").spawn_log_max_bytes == 1 << 20);
  CHECK_THAT(LoadError("[spawn]\nlog_max_bytes = \"1M\"\n"),
             Catch::Contains("test.toml:2: 'spawn.log_max_bytes' has the wrong type (an integer"));
  DaemonConfig config;
  config.spawn_log_max_bytes = 0;
  CHECK(FinishSpawnConfig(config, false).message() == "");
  config.spawn_log_max_bytes = 65536;
  CHECK(FinishSpawnConfig(config, false).message() == "");
  config.spawn_log_max_bytes = 4096;
  CHECK_THAT(FinishError(config, false),
             Catch::StartsWith("spawn log_max_bytes 4096 is below 65536"));
  config.spawn_log_max_bytes = -1;
  CHECK_THAT(FinishError(config, false), Catch::StartsWith("spawn log_max_bytes -1 is below"));
}

TEST_CASE("allow globs must be absolute, normal paths naming files", "[config][spawn]") {
  CHECK(spawn::ValidateAllowGlob("/usr/bin/*").ok());
  CHECK(spawn::ValidateAllowGlob("/opt/app/bin/server").ok());
  CHECK(spawn::ValidateAllowGlob("/opt/*/bin/worker-[0-9]").ok());
  CHECK_THAT(spawn::ValidateAllowGlob("").message(), Catch::Contains("an empty entry"));
  CHECK_THAT(spawn::ValidateAllowGlob("*").message(),
             Catch::Contains("spawn allow '*' is not an absolute path"));
  CHECK_THAT(spawn::ValidateAllowGlob("usr/bin/*").message(),
             Catch::Contains("is not an absolute path"));
  CHECK_THAT(spawn::ValidateAllowGlob("/usr/bin/").message(),
             Catch::Contains("spawn allow '/usr/bin/' ends with '/'"));
  CHECK_THAT(spawn::ValidateAllowGlob("/usr//bin/*").message(),
             Catch::Contains("has an empty path component"));
  CHECK_THAT(spawn::ValidateAllowGlob("/usr/bin/../sbin/*").message(),
             Catch::Contains("has a '..' component"));
  CHECK_THAT(spawn::ValidateAllowGlob("/usr/./bin/*").message(),
             Catch::Contains("has a '.' component"));
  CHECK_THAT(spawn::ValidateAllowGlob(std::string_view("/usr/\0x", 7)).message(),
             Catch::Contains("NUL byte"));
}

TEST_CASE("a glob's '*' stays within one directory", "[config][spawn]") {
  const spawn::AllowList allow({"/usr/bin/*", "/opt/app/bin/server", "/srv/*/bin/w?rker"});
  CHECK(allow.Allows("/usr/bin/true"));
  CHECK(allow.Allows("/usr/bin/.hidden"));
  CHECK_FALSE(allow.Allows("/usr/bin/x/y"));
  CHECK_FALSE(allow.Allows("/usr/binary"));
  CHECK_FALSE(allow.Allows("/usr/bin"));
  CHECK(allow.Allows("/opt/app/bin/server"));
  CHECK_FALSE(allow.Allows("/opt/app/bin/server2"));
  CHECK(allow.Allows("/srv/a/bin/worker"));
  CHECK(allow.Allows("/srv/b/bin/warker"));
  CHECK_FALSE(allow.Allows("/srv/a/b/bin/worker"));
  CHECK(spawn::AllowList().empty());
  CHECK_FALSE(spawn::AllowList().Allows("/usr/bin/true"));
}

TEST_CASE("FinishSpawnConfig checks globs from flags, users and groups", "[config][spawn]") {
  DaemonConfig config;
  config.spawn_allow = {"/usr/bin/*", "relative"};
  CHECK_THAT(FinishError(config, false), Catch::Contains("spawn allow 'relative'"));

  config = {};
  config.spawn_run_as = "tocl-no-such-user";
  CHECK_THAT(FinishError(config, false),
             Catch::Contains("spawn run_as: no user 'tocl-no-such-user' on this host"));
  config.spawn_run_as = "nobody";
  config.spawn_run_as_group = "tocl-no-such-group";
  CHECK_THAT(FinishError(config, false),
             Catch::Contains("spawn run_as_group: no group 'tocl-no-such-group' on this host"));

  config = {};
  config.socket_group = "tocl-no-such-group";
  CHECK_THAT(FinishError(config, false),
             Catch::Contains("socket_group: no group 'tocl-no-such-group' on this host"));

  config = {};
  config.spawn_run_as_group = "nogroup";
  CHECK_THAT(FinishError(config, false), Catch::Contains("set without run_as"));
}

TEST_CASE("a root daemon's run_as user must be in socket_group to enroll", "[config][spawn]") {
  DaemonConfig config;
  config.spawn_allow = {"/usr/bin/*"};
  config.spawn_run_as = "nobody";
  // Not root: run_as is not used, so no group is needed.
  CHECK(FinishSpawnConfig(config, false).ok());
  CHECK_THAT(FinishError(config, true),
             Catch::Contains("spawn run_as 'nobody' needs socket_group: the unix socket is "
                             "root's alone"));
  config.socket_group = "root";
  CHECK_THAT(FinishError(config, true),
             Catch::Contains("spawn run_as 'nobody' is not in socket_group 'root' (gid 0)"));
  config.socket_group = "nogroup";
  CHECK(FinishSpawnConfig(config, true).ok());
  // run_as root needs no group: it is the daemon's own user.
  config.spawn_run_as = "root";
  config.socket_group.clear();
  CHECK(FinishSpawnConfig(config, true).ok());
}

TEST_CASE("run_as resolves the user's ids and groups", "[config][spawn]") {
  // Debian's nobody:nogroup.
  Result<spawn::RunAs> nobody = spawn::ResolveRunAs("nobody", "");
  INFO(nobody.status().ToString());
  REQUIRE(nobody.ok());
  CHECK(nobody->uid == 65534);
  CHECK(nobody->gid == 65534);
  CHECK(spawn::InGroup(*nobody, 65534));
  CHECK_FALSE(spawn::InGroup(*nobody, 0));
  CHECK_THAT(nobody->Describe(), Catch::StartsWith("nobody (uid 65534, gid 65534"));

  Result<spawn::RunAs> other_group = spawn::ResolveRunAs("nobody", "root");
  REQUIRE(other_group.ok());
  CHECK(other_group->gid == 0);
  CHECK(spawn::InGroup(*other_group, 0));

  Result<gid_t> nogroup = spawn::ResolveGroup("nogroup", "socket_group");
  REQUIRE(nogroup.ok());
  CHECK(*nogroup == 65534);
  CHECK_THAT(spawn::ResolveGroup("", "socket_group").status().message(),
             Catch::Contains("socket_group is empty"));
}

TEST_CASE("the spawn settings survive printing and loading", "[config][spawn]") {
  DaemonConfig config;
  config.host_name = "node-a";
  config.spawn_allow = {"/usr/bin/*", "/opt/app/bin/server"};
  config.spawn_run_as = "nobody";
  config.spawn_run_as_group = "nogroup";
  config.socket_group = "nogroup";
  const std::string printed = ConfigToToml(config);
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("[spawn]"));
  DaemonConfig loaded = MustLoad(printed);
  CHECK(loaded.spawn_allow == config.spawn_allow);
  CHECK(loaded.spawn_run_as == "nobody");
  CHECK(loaded.spawn_run_as_group == "nogroup");
  CHECK(loaded.socket_group == "nogroup");

  // The defaults print as an empty list, which loads back as none.
  DaemonConfig defaults;
  defaults.host_name = "node-a";
  DaemonConfig reloaded = MustLoad(ConfigToToml(defaults));
  CHECK(reloaded.spawn_allow.empty());
  CHECK(reloaded.spawn_run_as.empty());
}

}  // namespace
}  // namespace tocl::daemon
