// The security settings (security_config.h): `credentials` read, printed
// and checked at start, and the loopback-only rule for a daemon without
// credentials.
#include "security_config.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

#include "config.h"
#include "security/keygen.h"
#include "temp_dir.h"
#include "tocl/log.h"

namespace tocl::daemon {
namespace {

using tocl::testing::TempDir;

// A config FinishConfig accepts (an explicit host name).
DaemonConfig Finishable() {
  DaemonConfig config;
  config.host_name = "node-a";
  return config;
}

// FinishConfig sets spdlog's level: put it back for the tests that follow.
struct RestoreLogLevel {
  ~RestoreLogLevel() { (void)SetLogLevel("info"); }
};

TEST_CASE("loopback addresses are 127.0.0.0/8, ::1 and localhost, nothing else",
          "[config][security]") {
  for (const char* address : {"127.0.0.1:7390", "127.1.2.3:0", "[::1]:7390", "::1:7390",
                              "localhost:7390", "LocalHost:1", "[::ffff:127.0.0.1]:7390"}) {
    INFO(address);
    CHECK(IsLoopbackAddress(address));
  }
  for (const char* address :
       {"0.0.0.0:7390", "[::]:7390", ":7390", "10.0.0.1:7390", "128.0.0.1:7390", "[fe80::1]:7390",
        "[::ffff:10.0.0.1]:7390", "seed.example:7390", "localhost.example:7390", "127.0.0.1", ""}) {
    INFO(address);
    CHECK_FALSE(IsLoopbackAddress(address));
  }
}

TEST_CASE("without credentials, listen, advertise and join must be loopback",
          "[config][security]") {
  RestoreLogLevel restore;
  DaemonConfig config = Finishable();
  config.listen = "0.0.0.0:7390";
  Status status = FinishConfig(config);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::StartsWith("listen 0.0.0.0:7390 is not a loopback address") &&
                                   Catch::Contains("use 127.0.0.1:PORT") &&
                                   Catch::Contains("tocl keygen") &&
                                   Catch::Contains("--credentials DIR"));

  config = Finishable();
  config.listen = "127.0.0.1:0";
  config.join = {"127.0.0.1:7390,10.0.0.1:7390"};
  CHECK_THAT(FinishConfig(config).message(),
             Catch::StartsWith("join 10.0.0.1:7390 is not a loopback address"));

  config = Finishable();
  config.listen = "127.0.0.1:0";
  config.seed = true;
  config.advertise = "10.0.0.2:7390";
  CHECK_THAT(FinishConfig(config).message(),
             Catch::StartsWith("advertise 10.0.0.2:7390 is not a loopback address"));

  // Loopback, or no TCP at all, is fine.
  for (const char* listen : {"none", "127.0.0.1:7390", "[::1]:0", "localhost:7390"}) {
    config = Finishable();
    config.listen = listen;
    CHECK(FinishConfig(config).message() == "");
  }
  config = Finishable();
  config.listen = "127.0.0.1:0";
  config.join = {"localhost:7390"};
  config.advertise = "127.0.0.2:7390";
  CHECK(FinishConfig(config).message() == "");
}

TEST_CASE("with credentials, any address may be used", "[config][security]") {
  RestoreLogLevel restore;
  DaemonConfig config = Finishable();
  config.credentials = "/etc/tocl/credentials";
  config.listen = "0.0.0.0:7390";
  config.advertise = "10.0.0.2:7390";
  config.join = {"10.0.0.1:7390"};
  CHECK(FinishConfig(config).message() == "");
}

TEST_CASE("credentials are read from the config text and printed", "[config][security]") {
  DaemonConfig config;
  REQUIRE(LoadConfigText("credentials = \"/etc/tocl/credentials\"\n", "test.toml", config).ok());
  CHECK(config.credentials == "/etc/tocl/credentials");
  CHECK(LoadConfigText("credentials = 1\n", "test.toml", config).message() ==
        "test.toml:1: 'credentials' has the wrong type");

  const std::string toml = ConfigToToml(config);
  CHECK_THAT(toml, Catch::Contains("credentials = '/etc/tocl/credentials'") ||
                       Catch::Contains("credentials = \"/etc/tocl/credentials\""));
  DaemonConfig loaded;
  REQUIRE(LoadConfigText(toml, "printed.toml", loaded).message() == "");
  CHECK(loaded.credentials == config.credentials);
}

TEST_CASE("the daemon loads its credentials, or says why it cannot", "[config][security]") {
  TempDir dir;
  const std::string cluster = dir.File("cluster");
  security::KeygenOptions keygen;
  keygen.directory = cluster;
  keygen.hosts.push_back(security::KeygenHost{"node-a", {}});
  REQUIRE(security::GenerateCredentials(keygen).status().message() == "");
  DaemonConfig config = Finishable();
  config.credentials = cluster + "/node-a";
  Result<std::optional<security::Credentials>> loaded = LoadDaemonCredentials(config);
  REQUIRE(loaded.status().message() == "");
  REQUIRE(loaded->has_value());
  CHECK((*loaded)->host == "node-a");
  CHECK((*loaded)->secret.bytes().size() == 32);

  config.credentials = dir.File("missing");
  loaded = LoadDaemonCredentials(config);
  REQUIRE_FALSE(loaded.ok());
  CHECK_THAT(loaded.status().message(), Catch::StartsWith("credentials: ") &&
                                            Catch::Contains(dir.File("missing")) &&
                                            Catch::Contains("is missing"));

  config.credentials.clear();
  loaded = LoadDaemonCredentials(config);
  REQUIRE(loaded.ok());
  CHECK_FALSE(loaded->has_value());
}

}  // namespace
}  // namespace tocl::daemon
