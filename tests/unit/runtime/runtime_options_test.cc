// RuntimeOptions with the environment applied and checked
// (runtime/runtime_options.h): the network list, its older spelling, the
// peer daemons, the timeouts and each network kind's settings.
#include "runtime/runtime_options.h"

#include <catch2/catch.hpp>

namespace tocl::runtime {
namespace {

TEST_CASE("via options: the provider and the VI cap are checked", "[networks][via]") {
  RuntimeOptions options;
  options.via_provider = "sockets";
  options.via_max_vis = 7;
  auto resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->options.via_provider == "sockets");
  CHECK(resolved->options.via_max_vis == 7);
  options.via_provider = "gm";
  auto bad = ResolveOptions(options);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("unknown via provider 'gm'"));
}

TEST_CASE("runtime options: timeouts must be positive", "[networks]") {
  RuntimeOptions options;
  options.partial_timeout = std::chrono::milliseconds(0);
  auto bad = ResolveOptions(options);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("partial_timeout must be positive, not 0 ms"));
  options = RuntimeOptions();
  options.fragment_timeout = std::chrono::milliseconds(-5);
  bad = ResolveOptions(options);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("fragment_timeout must be positive"));
  options = RuntimeOptions();
  options.fragment_timeout = std::chrono::milliseconds(1000);
  options.partial_timeout = std::chrono::milliseconds(1500);
  bad = ResolveOptions(options);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("partial_timeout (1500 ms) must be at least twice fragment_timeout"));
  options.partial_timeout = std::chrono::milliseconds(2000);
  CHECK(ResolveOptions(options).ok());
}

TEST_CASE("runtime options: networks, the older spelling and peer daemons", "[networks]") {
  RuntimeOptions options;
  options.daemon_address = "unix:/nowhere";
  options.networks = "shm";
  options.subsystems = "tcp";
  auto resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->networks == "shm");  // networks wins

  options.networks.clear();
  options.subsystems = "shm,tcp";
  options.tcp_bind = "127.0.0.5";
  resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->networks == "shm,tcp:127.0.0.5");

  options.subsystems = "udp";
  CHECK(ResolveOptions(options).status().code() == StatusCode::kInvalidArgument);

  options.subsystems = "shm";
  options.peer_daemons = "2=10.77.1.2:7390, 3=10.77.1.3:7390";
  resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->peer_daemons.size() == 2);
  CHECK(resolved->peer_daemons.at(3) == "10.77.1.3:7390");
  for (const char* bad : {"x=1", "2", "0=a:1", "2=", "70000=a:1"}) {
    INFO(bad);
    options.peer_daemons = bad;
    auto refused = ResolveOptions(options);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(), Catch::Contains("bad peer daemon"));
  }
}

}  // namespace
}  // namespace tocl::runtime
