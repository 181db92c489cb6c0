#include "config.h"

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config_loading.h"
#include "temp_dir.h"
#include "tocl/log.h"

namespace tocl::daemon {
namespace {

using namespace std::chrono_literals;

using tocl::testing::TempDir;

// A config that FinishConfig accepts, with an explicit host name.
DaemonConfig Finishable() {
  DaemonConfig config;
  config.host_name = "node-a";
  return config;
}

void CheckSameSettings(const DaemonConfig& a, const DaemonConfig& b) {
  CHECK(a.state_dir == b.state_dir);
  CHECK(a.socket == b.socket);
  CHECK(a.listen == b.listen);
  CHECK(a.log_level == b.log_level);
  CHECK(a.host_name == b.host_name);
  CHECK(a.grace_period_seconds == b.grace_period_seconds);
  CHECK(a.cache_kib == b.cache_kib);
  CHECK(a.host_id == b.host_id);
  CHECK(a.networks == b.networks);
}

// FinishConfig sets spdlog's level: put it back for the tests that follow.
struct RestoreLogLevel {
  ~RestoreLogLevel() { (void)SetLogLevel("info"); }
};

TEST_CASE("an empty config keeps every default", "[config]") {
  DaemonConfig config = MustLoad("");
  CHECK(config.state_dir == "/var/lib/tocl");
  CHECK(config.socket.empty());
  CHECK(config.listen == "127.0.0.1:7390");
  CHECK(config.log_level == "info");
  CHECK(config.host_name.empty());
  CHECK(config.grace_period_seconds == 10.0);
  CHECK(config.cache_kib == 8192);
  CHECK_FALSE(config.host_id.has_value());
  CHECK(config.networks == "auto");
  CheckSameSettings(MustLoad("# only a comment\n\n"), DaemonConfig{});
}

TEST_CASE("every setting is read from the config text", "[config]") {
  DaemonConfig config = MustLoad(R"(
state_dir = "/srv/tocl"
socket = "/run/tocl/d.sock"
listen = "0.0.0.0:9000"
log_level = "debug"
host_name = "node-7"
grace_period_seconds = 2.5
cache_kib = 1024
host_id = 7
networks = "shm,tcp:eth0,tcp:eth1"
)");
  CHECK(config.state_dir == "/srv/tocl");
  CHECK(config.socket == "/run/tocl/d.sock");
  CHECK(config.listen == "0.0.0.0:9000");
  CHECK(config.log_level == "debug");
  CHECK(config.host_name == "node-7");
  CHECK(config.grace_period_seconds == 2.5);
  CHECK(config.cache_kib == 1024);
  CHECK(config.host_id == 7);
  CHECK(config.networks == "shm,tcp:eth0,tcp:eth1");
}

TEST_CASE("settings missing from the text keep the value they had", "[config]") {
  DaemonConfig before;
  before.state_dir = "/from/flags";
  before.socket = "/from/flags.sock";
  before.log_level = "warn";
  before.host_name = "flag-host";
  before.grace_period_seconds = 1.25;
  before.cache_kib = 512;
  DaemonConfig after = MustLoad("listen = \"none\"\n", before);
  CHECK(after.listen == "none");
  before.listen = "none";
  CheckSameSettings(after, before);
}

TEST_CASE("the grace period takes whole or fractional seconds", "[config]") {
  CHECK(MustLoad("grace_period_seconds = 3").grace_period_seconds == 3.0);
  CHECK(MustLoad("grace_period_seconds = 0").grace_period_seconds == 0.0);
  CHECK(MustLoad("grace_period_seconds = 0.25").grace_period_seconds == 0.25);
  CHECK(MustLoad("grace_period_seconds = 1e2").grace_period_seconds == 100.0);
  CHECK(MustLoad("grace_period_seconds = -4").grace_period_seconds == -4.0);  // FinishConfig's job
}

TEST_CASE("a value of the wrong type is an error naming the key and its line", "[config]") {
  struct Case {
    std::string key, value;
  };
  for (const Case& c : {
           Case{"state_dir", "5"},
           Case{"socket", "true"},
           Case{"listen", "1.5"},
           Case{"log_level", "[\"info\"]"},
           Case{"host_name", "{ a = 1 }"},
           Case{"host_name", "1979-05-27"},
           Case{"grace_period_seconds", "\"10\""},
           Case{"grace_period_seconds", "true"},
           Case{"grace_period_seconds", "[1]"},
           Case{"cache_kib", "\"big\""},
           Case{"cache_kib", "1.5"},
           Case{"host_id", "\"3\""},
           Case{"host_id", "3.0"},
           Case{"host_id", "true"},
           Case{"networks", "[\"shm\", \"tcp\"]"},
           Case{"networks", "1"},
       }) {
    std::string text = "# toclsd\n\n" + c.key + " = " + c.value + "\n";
    CHECK(LoadError(text) == "test.toml:3: '" + c.key + "' has the wrong type");
  }
}

TEST_CASE("a float is the wrong type for cache_kib, an integer is fine for the grace period",
          "[config]") {
  CHECK(LoadError("cache_kib = 2048.0\n") == "test.toml:1: 'cache_kib' has the wrong type");
  CHECK(MustLoad("grace_period_seconds = 3").grace_period_seconds == 3.0);
}

TEST_CASE("a boolean is the wrong type for cache_kib", "[config]") {
  CHECK(LoadError("cache_kib = true\n") == "test.toml:1: 'cache_kib' has the wrong type");
  CHECK(LoadError("cache_kib = false\n") == "test.toml:1: 'cache_kib' has the wrong type");
}

TEST_CASE("an unknown setting is an error naming it and its line", "[config]") {
  // The list grows with every part of the daemon; its start and a few
  // names are what is checked.
  const std::string known =
      " (known: state_dir, socket, listen, log_level, host_name, grace_period_seconds, "
      "cache_kib, host_id, networks, ";
  const std::string sockt = LoadError("listen = \"none\"\nsockt = \"/x\"\n");
  CHECK_THAT(sockt, Catch::StartsWith("test.toml:2: unknown setting 'sockt'" + known));
  CHECK_THAT(sockt, Catch::Contains("attributes") && Catch::EndsWith(")"));
  CHECK_THAT(LoadError("\n\n\nStateDir = \"/x\"\n"),
             Catch::StartsWith("test.toml:4: unknown setting 'StateDir'" + known));
  CHECK_THAT(LoadError("[daemon]\nlisten = \"none\"\n"),
             Catch::StartsWith("test.toml:1: unknown setting 'daemon'"));
  CHECK_THAT(LoadError("state.dir = \"/x\"\n"), Catch::Contains("unknown setting 'state'"));
}

TEST_CASE("a syntax error gives the line and column", "[config]") {
  // line:column of where the parser stopped, then toml++'s description.
  CHECK_THAT(LoadError("listen = \"a\"\nstate_dir = \n"),
             Catch::StartsWith("test.toml:2:13: ") && Catch::Contains("expected value"));
  CHECK_THAT(LoadError("listen = \"unterminated\n"), Catch::StartsWith("test.toml:1:23: "));
  CHECK_THAT(LoadError("\n\n   = 5\n"), Catch::StartsWith("test.toml:3:4: "));
  CHECK_THAT(LoadError("listen = \"a\"\nlisten = \"b\"\n"),
             Catch::StartsWith("test.toml:2:10: ") && Catch::Contains("'listen'"));
  CHECK_THAT(LoadError("cache_kib = 12x\n"),
             Catch::StartsWith("test.toml:1:15: ") && Catch::Contains("saw 'x'"));
}

TEST_CASE("a failed load leaves the config as it was", "[config]") {
  // STYLE.md: outputs are written only on success.
  DaemonConfig config;
  Status status =
      LoadConfigText("state_dir = \"/changed\"\ncache_kib = \"big\"\n", "test.toml", config);
  REQUIRE_FALSE(status.ok());
  CheckSameSettings(config, DaemonConfig{});
}

TEST_CASE("the socket defaults to one in the state directory", "[config]") {
  DaemonConfig config;
  config.state_dir = "/srv/tocl";
  CHECK(config.socket_path() == "/srv/tocl/toclsd.sock");
  CHECK(config.database_path() == "/srv/tocl/directory.db");
  CHECK(config.lock_path() == "/srv/tocl/toclsd.lock");
  config.socket = "/run/other.sock";
  CHECK(config.socket_path() == "/run/other.sock");
  CHECK(DaemonConfig{}.socket_path() == "/var/lib/tocl/toclsd.sock");
}

TEST_CASE("the grace period converts to milliseconds", "[config]") {
  DaemonConfig config;
  CHECK(config.grace_period() == 10s);
  config.grace_period_seconds = 2.5;
  CHECK(config.grace_period() == 2500ms);
  config.grace_period_seconds = 0;
  CHECK(config.grace_period() == 0ms);
}

TEST_CASE("FinishConfig accepts the defaults with a host name", "[config]") {
  RestoreLogLevel restore;
  DaemonConfig config = Finishable();
  CHECK(FinishConfig(config).ok());
  CHECK(config.host_name == "node-a");
}

TEST_CASE("FinishConfig fills in the machine's hostname", "[config]") {
  RestoreLogLevel restore;
  DaemonConfig config;
  REQUIRE(FinishConfig(config).ok());
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof(name) - 1) == 0);
  CHECK(config.host_name == name);
  CHECK_FALSE(config.host_name.empty());
}

TEST_CASE("FinishConfig accepts every log level name and rejects others", "[config]") {
  RestoreLogLevel restore;
  for (std::string level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    DaemonConfig config = Finishable();
    config.log_level = level;
    INFO("level " << level);
    CHECK(FinishConfig(config).ok());
  }
  for (std::string level : {"loud", "", "INFO", "warning ", "verbose"}) {
    DaemonConfig config = Finishable();
    config.log_level = level;
    INFO("level '" << level << "'");
    Status status = FinishConfig(config);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(status.message(), Catch::Contains("unknown log level '" + level + "'"));
  }
}

TEST_CASE("FinishConfig bounds the grace period to 0..86400 seconds", "[config]") {
  for (double seconds : {0.0, 0.001, 10.0, 86400.0}) {
    DaemonConfig config = Finishable();
    config.grace_period_seconds = seconds;
    INFO("grace " << seconds);
    CHECK(FinishConfig(config).ok());
  }
  for (double seconds : {-1.0, -0.001, 86400.5, std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity()}) {
    DaemonConfig config = Finishable();
    config.grace_period_seconds = seconds;
    INFO("grace " << seconds);
    Status status = FinishConfig(config);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(status.message(), Catch::Contains("grace_period_seconds"));
    CHECK_THAT(status.message(), Catch::Contains("outside 0..86400"));
  }
  DaemonConfig negative = Finishable();
  negative.grace_period_seconds = -1;
  CHECK(FinishConfig(negative).message() == "grace_period_seconds -1 is outside 0..86400");
}

TEST_CASE("FinishConfig rejects a grace period that is not a number", "[config]") {
  // TOML allows `grace_period_seconds = nan`; both range comparisons are
  // false for NaN, so it passes, and grace_period() then converts NaN to an
  // integer (undefined behaviour).
  DaemonConfig config = MustLoad("grace_period_seconds = nan\n", Finishable());
  REQUIRE(std::isnan(config.grace_period_seconds));
  Status status = FinishConfig(config);
  CHECK(status.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("FinishConfig bounds the page cache to 256..4194304 KiB", "[config]") {
  for (int64_t kib : {int64_t{256}, int64_t{8192}, int64_t{4194304}}) {
    DaemonConfig config = Finishable();
    config.cache_kib = kib;
    CHECK(FinishConfig(config).ok());
  }
  for (int64_t kib : {int64_t{255}, int64_t{0}, int64_t{-1}, int64_t{4194305}}) {
    DaemonConfig config = Finishable();
    config.cache_kib = kib;
    Status status = FinishConfig(config);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK(status.message() == "cache_kib " + std::to_string(kib) + " is outside 256..4194304");
  }
}

TEST_CASE("FinishConfig rejects an empty state_dir or listen and a bad host name", "[config]") {
  DaemonConfig config = Finishable();
  config.state_dir = "";
  CHECK(FinishConfig(config) == InvalidArgument("state_dir is empty"));

  config = Finishable();
  config.listen = "";
  CHECK(FinishConfig(config).code() == StatusCode::kInvalidArgument);
  CHECK_THAT(FinishConfig(config).message(), Catch::Contains("listen is empty"));

  config = Finishable();
  config.host_name = "bad\nname";
  CHECK(FinishConfig(config) == InvalidArgument("host name contains a control character"));

  config = Finishable();
  config.host_name = std::string(257, 'h');
  CHECK(FinishConfig(config) == InvalidArgument("host name is 257 bytes long (at most 256)"));
  config.host_name = std::string(256, 'h');
  RestoreLogLevel restore;
  CHECK(FinishConfig(config).ok());
}

TEST_CASE("FinishConfig bounds the host id to 1..65535", "[config]") {
  RestoreLogLevel restore;
  for (int64_t id : {int64_t{0}, int64_t{-1}, int64_t{65536}, int64_t{1} << 40}) {
    DaemonConfig config = Finishable();
    config.host_id = id;
    CHECK(FinishConfig(config) ==
          InvalidArgument("host_id " + std::to_string(id) + " is outside 1..65535"));
  }
  for (int64_t id : {1, 2, 65535}) {
    DaemonConfig config = Finishable();
    config.host_id = id;
    CHECK(FinishConfig(config).ok());
    CHECK(config.host_id == id);
  }
  DaemonConfig unset = Finishable();
  CHECK(FinishConfig(unset).ok());
  CHECK_FALSE(unset.host_id.has_value());
}

TEST_CASE("FinishConfig takes any printable networks list and rejects blank or control text",
          "[config]") {
  RestoreLogLevel restore;
  for (const char* good : {"auto", "shm", "shm,tcp:eth0,tcp:eth1", "tcp:10.1.2.3/24, shm",
                           "something the runtime will reject"}) {
    DaemonConfig config = Finishable();
    config.networks = good;
    INFO(good);
    CHECK(FinishConfig(config).ok());
  }
  DaemonConfig config = Finishable();
  config.networks = "";
  CHECK_THAT(FinishConfig(config).message(), Catch::StartsWith("networks is empty"));
  config.networks = "   ";
  CHECK_THAT(FinishConfig(config).message(), Catch::StartsWith("networks is empty"));
  config.networks = "shm,\ttcp";
  CHECK(FinishConfig(config) == InvalidArgument("networks: byte 4 (0x09) is not printable ASCII"));
  config.networks = "shm,tcp:\xc3\xa9th0";
  CHECK(FinishConfig(config) == InvalidArgument("networks: byte 8 (0xc3) is not printable ASCII"));
  config.networks = std::string(4097, 's');
  CHECK(FinishConfig(config) == InvalidArgument("networks is 4097 bytes (at most 4096)"));
}

TEST_CASE("the printed config loads back to the same settings", "[config]") {
  DaemonConfig config;
  config.state_dir = "/srv/tocl data";
  config.socket = "/run/tocl/\"quoted\" \\ back.sock";
  config.listen = "[::1]:7390";
  config.log_level = "warn";
  config.host_name =
      "n\xc3\xb6"
      "de-\xe2\x9c\x93";
  config.grace_period_seconds = 2.5;
  config.cache_kib = 65536;
  config.networks = "shm,tcp:eth0,tcp:10.0.0.1/24";
  std::string toml = ConfigToToml(config);
  INFO("printed:\n" << toml);
  CheckSameSettings(MustLoad(toml), config);

  config.host_id = 65535;
  toml = ConfigToToml(config);
  INFO("printed with a host id:\n" << toml);
  CheckSameSettings(MustLoad(toml), config);
}

TEST_CASE("an unset host id is left out of the printed config", "[config]") {
  DaemonConfig config;
  std::string toml = ConfigToToml(config);
  INFO("printed:\n" << toml);
  CHECK_THAT(toml, !Catch::Contains("host_id"));
  CHECK_THAT(toml, Catch::Contains("networks = 'auto'") || Catch::Contains("networks = \"auto\""));
}

TEST_CASE("the printed config names the effective socket", "[config]") {
  DaemonConfig config;
  config.state_dir = "/srv/tocl";
  std::string toml = ConfigToToml(config);
  INFO("printed:\n" << toml);
  DaemonConfig loaded = MustLoad(toml);
  CHECK(loaded.socket == "/srv/tocl/toclsd.sock");
  CHECK(loaded.socket_path() == config.socket_path());
  CHECK(loaded.state_dir == config.state_dir);
  CHECK(loaded.grace_period_seconds == config.grace_period_seconds);
  CHECK(loaded.cache_kib == config.cache_kib);
}

TEST_CASE("grace periods survive printing and loading exactly", "[config]") {
  for (double seconds : {0.0, 0.1, 1.0 / 3.0, 2.5, 10.0, 0.001, 86400.0, 12345.678901234567}) {
    DaemonConfig config;
    config.grace_period_seconds = seconds;
    std::string toml = ConfigToToml(config);
    INFO("printed:\n" << toml);
    CHECK(MustLoad(toml).grace_period_seconds == seconds);
  }
}

TEST_CASE("a config file is read and its errors name the file", "[config]") {
  TempDir dir;
  std::string path = dir.File("toclsd.toml");
  {
    std::ofstream file(path);
    file << "listen = \"none\"\ncache_kib = 2048\n";
  }
  DaemonConfig config;
  REQUIRE(LoadConfigFile(path, config).ok());
  CHECK(config.listen == "none");
  CHECK(config.cache_kib == 2048);

  {
    std::ofstream file(path);
    file << "\nlisten = 5\n";
  }
  Status status = LoadConfigFile(path, config);
  CHECK(status == InvalidArgument(path + ":2: 'listen' has the wrong type"));

  Status missing = LoadConfigFile(dir.File("absent.toml"), config);
  CHECK(missing.code() == StatusCode::kNotFound);
  CHECK_THAT(missing.message(), Catch::Contains(dir.File("absent.toml")));
}

TEST_CASE("host attributes are read from an [attributes] table of strings", "[config]") {
  DaemonConfig config = MustLoad("listen = \"none\"\n[attributes]\ngpu = \"1\"\nrack = \"r7\"\n");
  CHECK(config.attributes == std::map<std::string, std::string>{{"gpu", "1"}, {"rack", "r7"}});
  CHECK(LoadError("[attributes]\ngpu = 1\n") == "test.toml:2: attribute 'gpu' must be a string");
  CHECK_THAT(LoadError("attributes = \"gpu=1\"\n"),
             Catch::StartsWith("test.toml:1: 'attributes' must be a table"));
}

TEST_CASE("the attribute flag is KEY=VALUE and a later one replaces an earlier one", "[config]") {
  std::map<std::string, std::string> attributes{{"gpu", "0"}};
  REQUIRE(ParseAttributeFlag("gpu=1", attributes).ok());
  REQUIRE(ParseAttributeFlag("note=a=b", attributes).ok());
  REQUIRE(ParseAttributeFlag("empty=", attributes).ok());
  CHECK(attributes ==
        std::map<std::string, std::string>{{"empty", ""}, {"gpu", "1"}, {"note", "a=b"}});
  CHECK(ParseAttributeFlag("gpu", attributes) ==
        InvalidArgument("--attribute 'gpu' is not KEY=VALUE"));
  CHECK(ParseAttributeFlag("=1", attributes) ==
        InvalidArgument("--attribute '=1' is not KEY=VALUE"));
}

TEST_CASE("FinishConfig checks host attributes as client attributes are checked", "[config]") {
  DaemonConfig config;
  config.host_name = "node1";
  config.attributes = {{"gpu", "1"}};
  CHECK(FinishConfig(config).ok());

  config.attributes = {{"networks", "shm"}};
  Status networks = FinishConfig(config);
  CHECK(networks.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(networks.message(), Catch::Contains("networks setting"));

  config.attributes = {{"bad key", "1"}};
  Status bad = FinishConfig(config);
  CHECK(bad.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.message(), Catch::StartsWith("host attribute: "));

  config.attributes.clear();
  for (int i = 0; i < 64; ++i) config.attributes["a" + std::to_string(i)] = "x";
  CHECK(FinishConfig(config) == InvalidArgument("64 host attributes (at most 63)"));
}

TEST_CASE("host attributes survive printing and loading", "[config]") {
  DaemonConfig config;
  config.attributes = {{"gpu", "1"}, {"zone", "eu west \"2\""}};
  std::string toml = ConfigToToml(config);
  INFO("printed:\n" << toml);
  CHECK(MustLoad(toml).attributes == config.attributes);
  CHECK_THAT(ConfigToToml(DaemonConfig{}), !Catch::Contains("attributes"));
}

// --- Cluster settings (toclsd/cluster/) -------------------------------------

TEST_CASE("cluster settings are read from the config text", "[config][cluster]") {
  DaemonConfig config = MustLoad(
      "join = [\"10.0.0.1:7390\", \"10.1.0.1:7390\"]\n"
      "advertise = \"10.0.0.2:7390\"\n"
      "heartbeat_interval_seconds = 0.25\n"
      "down_after_seconds = 2\n"
      "join_timeout_seconds = 5\n"
      "change_log_keep = 5000\n");
  CHECK_FALSE(config.seed);
  CHECK(config.join == std::vector<std::string>{"10.0.0.1:7390", "10.1.0.1:7390"});
  CHECK(config.advertise == "10.0.0.2:7390");
  CHECK(config.heartbeat_interval_seconds == 0.25);
  CHECK(config.down_after_seconds == 2.0);
  CHECK(config.join_timeout_seconds == 5.0);
  CHECK(config.change_log_keep == 5000);
  CHECK(MustLoad("seed = true\n").seed);
  CHECK(MustLoad("join = \"10.0.0.1:7390\"\n").join == std::vector<std::string>{"10.0.0.1:7390"});
}

TEST_CASE("cluster settings of the wrong type are errors naming the key", "[config][cluster]") {
  CHECK(LoadError("seed = \"yes\"\n") == "test.toml:1: 'seed' has the wrong type");
  CHECK_THAT(LoadError("join = 7390\n"),
             Catch::StartsWith("test.toml:1: 'join' has the wrong type"));
  CHECK(LoadError("\njoin = [\"a:1\", 2]\n") ==
        "test.toml:2: 'join' holds something that is not a string");
  CHECK(LoadError("change_log_keep = 1.5\n") ==
        "test.toml:1: 'change_log_keep' has the wrong type");
}

TEST_CASE("FinishConfig splits comma-separated join lists and checks each address",
          "[config][cluster]") {
  DaemonConfig config = Finishable();
  config.join = {"10.0.0.1:7390,10.1.0.1:7390", "seed.example:7390"};
  config.credentials = "/etc/tocl/credentials";  // other hosts' addresses need credentials
  REQUIRE(FinishConfig(config).message() == "");
  CHECK(config.join ==
        std::vector<std::string>{"10.0.0.1:7390", "10.1.0.1:7390", "seed.example:7390"});

  config = Finishable();
  config.join = {"10.0.0.1:7390,"};
  CHECK(FinishConfig(config) == InvalidArgument("join: an empty address in '10.0.0.1:7390,'"));
  config.join = {"10.0.0.1"};
  CHECK(FinishConfig(config) == InvalidArgument("join: '10.0.0.1' is not HOST:PORT"));
}

TEST_CASE("FinishConfig refuses a cluster daemon without TCP, and seed with join",
          "[config][cluster]") {
  DaemonConfig config = Finishable();
  config.seed = true;
  config.listen = "none";
  Status status = FinishConfig(config);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Contains("must listen on TCP") &&
                                   Catch::Contains("--listen none cannot be used with --seed"));

  config = Finishable();
  config.join = {"10.0.0.1:7390"};
  config.listen = "none";
  CHECK_THAT(FinishConfig(config).message(), Catch::Contains("with --join"));

  config = Finishable();
  config.seed = true;
  config.join = {"10.0.0.1:7390"};
  CHECK_THAT(FinishConfig(config).message(), Catch::StartsWith("seed and join exclude each other"));

  // A standalone daemon may still go without TCP.
  config = Finishable();
  config.listen = "none";
  CHECK(FinishConfig(config).message() == "");
}

TEST_CASE("FinishConfig bounds the heartbeat, down and join times and the log size",
          "[config][cluster]") {
  auto finish = [](auto change) {
    DaemonConfig config = Finishable();
    change(config);
    return FinishConfig(config).message();
  };
  CHECK(finish([](DaemonConfig& c) {
          c.heartbeat_interval_seconds = 0.2;
          c.down_after_seconds = 0.4;
        }) == "");
  CHECK_THAT(finish([](DaemonConfig& c) { c.heartbeat_interval_seconds = 0; }),
             Catch::StartsWith("heartbeat_interval_seconds 0 is outside 0.01..60"));
  CHECK_THAT(finish([](DaemonConfig& c) { c.heartbeat_interval_seconds = std::nan(""); }),
             Catch::StartsWith("heartbeat_interval_seconds nan is outside"));
  CHECK_THAT(finish([](DaemonConfig& c) { c.down_after_seconds = 0.9; }),
             Catch::StartsWith("down_after_seconds 0.9 is outside 1..3600"));
  CHECK_THAT(finish([](DaemonConfig& c) { c.join_timeout_seconds = -1; }),
             Catch::StartsWith("join_timeout_seconds -1 is outside 0..86400"));
  CHECK(finish([](DaemonConfig& c) { c.change_log_keep = 0; }) ==
        "change_log_keep 0 is less than 1");
  CHECK_THAT(finish([](DaemonConfig& c) { c.advertise = "10.0.0.2"; }),
             Catch::StartsWith("advertise '10.0.0.2' is not HOST:PORT"));
}

TEST_CASE("the retention time is read, defaults to an hour, and 0 keeps exited entities",
          "[config][retention]") {
  CHECK(MustLoad("").retain_exited_seconds == 3600.0);
  CHECK(MustLoad("retain_exited_seconds = 0").retain_exited_seconds == 0.0);
  CHECK(MustLoad("retain_exited_seconds = 2.5").retain_exited() == 2500ms);
  CHECK_THAT(LoadError("retain_exited_seconds = \"1h\"\n"),
             Catch::Contains("test.toml:1: 'retain_exited_seconds' has the wrong type"));
  auto finish = [](double seconds) {
    DaemonConfig config = Finishable();
    config.retain_exited_seconds = seconds;
    return FinishConfig(config).message();
  };
  CHECK(finish(0) == "");
  CHECK(finish(86400 * 30) == "");
  CHECK_THAT(finish(-1), Catch::StartsWith("retain_exited_seconds -1 is outside 0..315360000"));
  CHECK_THAT(finish(std::nan("")), Catch::StartsWith("retain_exited_seconds nan is outside"));
  CHECK_THAT(finish(1e12), Catch::Contains("is outside 0..315360000"));
  DaemonConfig config = Finishable();
  config.retain_exited_seconds = 90.5;
  config.spawn_log_max_bytes = 1 << 20;
  DaemonConfig loaded = MustLoad(ConfigToToml(config));
  CHECK(loaded.retain_exited_seconds == 90.5);
  CHECK(loaded.spawn_log_max_bytes == 1 << 20);
}

TEST_CASE("cluster settings survive printing and loading", "[config][cluster]") {
  DaemonConfig config = Finishable();
  config.join = {"10.0.0.1:7390", "[fd00::1]:7390"};
  config.advertise = "10.0.0.2:7390";
  config.heartbeat_interval_seconds = 0.2;
  config.down_after_seconds = 1.5;
  config.join_timeout_seconds = 12;
  config.change_log_keep = 123456;
  std::string toml = ConfigToToml(config);
  INFO("printed:\n" << toml);
  DaemonConfig loaded = MustLoad(toml);
  CHECK(loaded.seed == config.seed);
  CHECK(loaded.join == config.join);
  CHECK(loaded.advertise == config.advertise);
  CHECK(loaded.heartbeat_interval_seconds == config.heartbeat_interval_seconds);
  CHECK(loaded.down_after_seconds == config.down_after_seconds);
  CHECK(loaded.join_timeout_seconds == config.join_timeout_seconds);
  CHECK(loaded.change_log_keep == config.change_log_keep);
  config.join.clear();
  config.seed = true;
  CHECK(MustLoad(ConfigToToml(config)).seed);
}

}  // namespace
}  // namespace tocl::daemon
