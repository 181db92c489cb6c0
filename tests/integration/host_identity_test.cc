// The daemon's host identity: --host-id for a new database, a clear refusal
// of a database that recorded another id, and the host's `networks`
// attribute.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "daemon_harness.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

std::string HostAttribute(Daemon& daemon, Gid host, const std::string& key) {
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto entity = REQUIRE_VALUE(client->Lookup(host));
  auto found = entity.attributes.find(key);
  return found == entity.attributes.end() ? "<none>" : found->second;
}

TEST_CASE("toclsd publishes its networks setting as the host's attribute", "[integration][host]") {
  SECTION("the harness's loopback-only default") {
    Daemon daemon;
    REQUIRE_OK(daemon.Start());
    CHECK(HostAttribute(daemon, Gid::Host(1), "networks") == "shm,tcp:127.0.0.1/8");
    auto client = REQUIRE_VALUE(daemon.Connect());
    auto hosts = REQUIRE_VALUE(client->QueryAll("kind=host and networks=\"shm,tcp:127.0.0.1/8\""));
    CHECK(hosts.size() == 1);
  }
  SECTION("toclsd's own default, then another value after a restart") {
    DaemonOptions options;
    options.networks = "";  // no --networks flag
    Daemon first(options);
    REQUIRE_OK(first.Start());
    CHECK(HostAttribute(first, Gid::Host(1), "networks") == "auto");
    REQUIRE(first.Stop().value_or(-1) == 0);

    DaemonOptions changed;
    changed.state_dir = first.state_dir();
    changed.networks = "shm,tcp:eth0,tcp:eth1";
    Daemon second(changed);
    REQUIRE_OK(second.Start());
    CHECK(HostAttribute(second, Gid::Host(1), "networks") == "shm,tcp:eth0,tcp:eth1");
  }
}

TEST_CASE("a host id given by flag numbers a new database's host, and another id on it is refused",
          "[integration][host]") {
  DaemonOptions options;
  options.host_id = 5;
  options.host_name = "node-five";
  Daemon daemon(options);
  REQUIRE_OK(daemon.Start());
  {
    auto client = REQUIRE_VALUE(daemon.Connect());
    auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("worker")));
    CHECK(session->host() == Gid::Host(5));
    CHECK(session->gid().host() == Gid::Host(5));
    CHECK(REQUIRE_VALUE(client->Lookup(Gid::Host(5))).name == "node-five");
    CHECK(client->Lookup(Gid::Host(1)).status().code() == StatusCode::kNotFound);
    CHECK_OK(session->Close());
  }
  REQUIRE(daemon.Stop().value_or(-1) == 0);

  DaemonOptions wrong;
  wrong.state_dir = daemon.state_dir();
  wrong.host_id = 6;
  Daemon rival(wrong);
  auto result = REQUIRE_VALUE(RunProgram(rival.CommandLine(), seconds(20)));
  INFO("toclsd output:\n" << result.output);
  CHECK_FALSE(result.timed_out);
  CHECK(result.exit_code == 1);
  CHECK_THAT(result.output,
             Catch::Contains(daemon.db_path() + ": it belongs to host id 5, not 6") &&
                 Catch::Contains("--host-id 5"));

  // Without the flag, and with the same id, it starts as host 5 again.
  DaemonOptions same;
  same.state_dir = daemon.state_dir();
  same.host_name = "node-five";
  Daemon again(same);
  REQUIRE_OK(again.Start());
  auto again_client = REQUIRE_VALUE(again.Connect());
  CHECK(REQUIRE_VALUE(again_client->Lookup(Gid::Host(5))).name == "node-five");
  again_client.reset();
  REQUIRE(again.Stop().value_or(-1) == 0);
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(REQUIRE_VALUE(client->Lookup(Gid::Host(5))).state == EntityState::kRunning);
}

TEST_CASE("the host id and networks flags are checked and printed by --print-config",
          "[integration][host]") {
  TempDir dir;
  auto Run = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {ToclsdPath(), "--state-dir", dir.path(), "--host-name", "n"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--print-config");
    return REQUIRE_VALUE(RunProgram(argv, seconds(10)));
  };
  auto printed = Run({"--host-id", "65535", "--networks", "shm,tcp:eth1"});
  INFO(printed.output);
  CHECK(printed.exit_code == 0);
  CHECK_THAT(printed.output, Catch::Contains("host_id = 65535") && Catch::Contains("shm,tcp:eth1"));
  CHECK_THAT(Run({}).output, Catch::Contains("auto") && !Catch::Contains("host_id"));

  for (const char* bad : {"0", "65536", "-1", "one"}) {
    auto refused = Run({"--host-id", bad});
    INFO("--host-id " << bad << ": " << refused.output);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.output, Catch::Contains("--host-id"));
  }
  auto blank = Run({"--networks", " "});
  CHECK(blank.exit_code == 2);
  CHECK_THAT(blank.output, Catch::Contains("networks is empty"));
}

}  // namespace
}  // namespace tocl::testing
