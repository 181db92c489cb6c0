// RuntimeOptions with the environment applied and checked
// (runtime/runtime_options.h): the network list, its older spelling, the
// peer daemons, the timeouts and each network kind's settings.
#include "runtime/runtime_options.h"

#include <catch2/catch.hpp>
#include <string_view>

#include "scoped_environment.h"
#include "subsystem/transport_registry.h"

namespace tocl::runtime {
namespace {

// None of the variables ResolveOptions reads is set while it lives, whatever
// the shell that runs the test has set.
struct NoOptionVariables : testing::ScopedEnvironment {
  NoOptionVariables() {
    for (const char* name : {"TOCL_DAEMON", "TOCL_NETWORKS", "TOCL_SUBSYSTEMS", "TOCL_TCP_BIND",
                             "TOCL_PEER_DAEMONS", "TOCL_VIA_PROVIDER", "TOCL_VIA_MAX_VIS"}) {
      Unset(name);
    }
  }
};

// Whether this libtocl was built with the network kind `kind`.
bool Compiled(std::string_view kind) {
  return subsystem::CompiledTransports().Find(kind).ok();
}

TEST_CASE("via options: the provider and the VI cap are checked", "[networks][via]") {
  NoOptionVariables environment;
  RuntimeOptions options;
  options.via_provider = "sockets";
  options.via_max_vis = 7;
  auto resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->options.via_provider == "sockets");
  CHECK(resolved->options.via_max_vis == 7);
  if (!Compiled("via")) {
    WARN("skipped the provider check: this libtocl is built without via");
    return;
  }
  options.via_provider = "gm";
  auto bad = ResolveOptions(options);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("unknown via provider 'gm'"));
}

TEST_CASE("via options left empty come from the environment, else the defaults",
          "[networks][via]") {
  if (!Compiled("via")) {
    WARN("skipped: this libtocl is built without via");
    return;
  }
  NoOptionVariables environment;
  const RuntimeOptions options;
  auto defaults = ResolveOptions(options);
  REQUIRE(defaults.ok());
  CHECK(defaults->options.via_provider == "auto");
  CHECK(defaults->options.via_max_vis == 1024);
  environment.Set("TOCL_VIA_PROVIDER", "sockets");
  environment.Set("TOCL_VIA_MAX_VIS", "9");
  auto from_environment = ResolveOptions(options);
  REQUIRE(from_environment.ok());
  CHECK(from_environment->options.via_provider == "sockets");
  CHECK(from_environment->options.via_max_vis == 9);
  for (const char* bad : {"0", "-1", "9x", "lots"}) {
    INFO(bad);
    environment.Set("TOCL_VIA_MAX_VIS", bad);
    auto refused = ResolveOptions(options);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(),
               Catch::Contains("TOCL_VIA_MAX_VIS must be a positive number"));
  }
}

TEST_CASE("runtime options: timeouts must be positive", "[networks]") {
  NoOptionVariables environment;
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
  NoOptionVariables environment;
  RuntimeOptions options;
  options.daemon_address = "unix:/nowhere";
  options.networks = "shm";
  options.subsystems = "tcp";
  auto resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->options.networks == "shm");  // networks wins
  CHECK(resolved->options.daemon_address == "unix:/nowhere");

  options.networks.clear();
  options.tcp_bind = "127.0.0.5";
  if (Compiled("shm") && Compiled("tcp")) {
    options.subsystems = "shm,tcp";
    resolved = ResolveOptions(options);
    REQUIRE(resolved.ok());
    CHECK(resolved->options.networks == "shm,tcp:127.0.0.5");
  }

  // Each subsystem is a kind of the registry's (which says what it knows).
  struct Case {
    const char* subsystems;
    const char* words;
  };
  for (const Case& c : {Case{"udp", "subsystem 'udp' in 'udp': unknown network kind 'udp'"},
                        Case{"tcpx", "unknown network kind 'tcpx'"},
                        Case{"tcpx:eth0,shm", "unknown network kind 'tcpx'"}}) {
    INFO(c.subsystems);
    options.subsystems = c.subsystems;
    auto refused = ResolveOptions(options);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(refused.status().message(), Catch::Contains(c.words));
  }

  options.subsystems.clear();
  options.tcp_bind.clear();
  options.peer_daemons = "2=10.77.1.2:7390, 3=10.77.1.3:7390";
  resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->peer_daemons.size() == 2);
  CHECK(resolved->peer_daemons.at(3) == "10.77.1.3:7390");
  for (const char* bad : {"x=1", "2", "0=a:1", "2=", "70000=a:1", "=a:1", "2x=a:1"}) {
    INFO(bad);
    options.peer_daemons = bad;
    auto refused = ResolveOptions(options);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(), Catch::Contains("bad peer daemon"));
  }
}

TEST_CASE("runtime options left empty come from the environment", "[networks]") {
  NoOptionVariables environment;
  RuntimeOptions options;
  environment.Set("TOCL_DAEMON", "unix:/from-env.sock");
  environment.Set("TOCL_NETWORKS", "tcp:lo");
  environment.Set("TOCL_PEER_DAEMONS", "4=10.0.0.4:7390");
  auto resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->options.daemon_address == "unix:/from-env.sock");
  CHECK(resolved->options.networks == "tcp:lo");
  CHECK(resolved->options.peer_daemons == "4=10.0.0.4:7390");
  CHECK(resolved->peer_daemons.at(4) == "10.0.0.4:7390");

  // The older spelling's variables, when TOCL_NETWORKS is not set.
  environment.Unset("TOCL_NETWORKS");
  if (Compiled("tcp")) {
    environment.Set("TOCL_SUBSYSTEMS", "tcp");
    environment.Set("TOCL_TCP_BIND", "127.0.0.7");
    resolved = ResolveOptions(options);
    REQUIRE(resolved.ok());
    CHECK(resolved->options.networks == "tcp:127.0.0.7");
  }

  // Nothing anywhere: the host decides (empty), and the options given win.
  environment.Unset("TOCL_SUBSYSTEMS");
  environment.Unset("TOCL_TCP_BIND");
  resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->options.networks.empty());
  options.daemon_address = "unix:/given.sock";
  options.networks = "shm";
  resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->options.daemon_address == "unix:/given.sock");
  CHECK(resolved->options.networks == "shm");
}

}  // namespace
}  // namespace tocl::runtime
