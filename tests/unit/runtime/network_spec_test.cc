// Which networks a process opens and which peer networks they reach
// (runtime/network_spec.h), and the options that name them.
#include "runtime/network_spec.h"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "runtime/runtime_options.h"

namespace tocl::runtime {
namespace {

TEST_CASE("network lists: shm, tcp by address, interface and loopback", "[networks]") {
  auto specs = ParseNetworks("shm, tcp:127.0.0.1, tcp:10.1.2.3/24,tcp:lo");
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 4);
  CHECK((*specs)[0].kind == "shm");
  CHECK((*specs)[0].name == "shm");
  CHECK((*specs)[1].name == "tcp");
  CHECK((*specs)[1].ip == "127.0.0.1");
  CHECK((*specs)[1].prefix == 8);  // lo's
  CHECK((*specs)[1].device == "lo");
  CHECK((*specs)[2].name == "tcp-1");
  CHECK((*specs)[2].ip == "10.1.2.3");
  CHECK((*specs)[2].prefix == 24);
  CHECK((*specs)[3].name == "tcp-2");
  CHECK((*specs)[3].ip == "127.0.0.1");
  CHECK(IsLoopback((*specs)[3]));
  CHECK(KindOf("tcp-2") == "tcp");
  CHECK(KindOf("shm") == "shm");

  auto bare = ParseNetworks("tcp");
  REQUIRE(bare.ok());
  CHECK((*bare)[0].ip == "127.0.0.1");

  auto automatic = ParseNetworks("auto");
  REQUIRE(automatic.ok());
  REQUIRE_FALSE(automatic->empty());
  CHECK(automatic->front().kind == "shm");
  CHECK(automatic->size() >= 2);  // some tcp network, loopback at least
}

TEST_CASE("network lists: via by address, interface and loopback, named apart from tcp",
          "[networks][via]") {
  auto specs = ParseNetworks("tcp:lo, via, via:127.0.0.1/8, via:lo");
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 4);
  CHECK((*specs)[0].name == "tcp");
  CHECK((*specs)[1].kind == "via");
  CHECK((*specs)[1].name == "via");
  CHECK((*specs)[1].ip == "127.0.0.1");
  CHECK((*specs)[2].name == "via-1");
  CHECK((*specs)[2].prefix == 8);
  CHECK((*specs)[3].name == "via-2");
  CHECK((*specs)[3].device == "lo");
  CHECK(IsLoopback((*specs)[3]));
  CHECK(KindOf("via-2") == "via");
  auto bad = ParseNetworks("via:no-such-if0");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("'via:no-such-if0'"));
  // Without an RDMA device, auto opens no via network (over sockets it
  // would repeat tcp).
  auto automatic = ParseNetworks("auto");
  REQUIRE(automatic.ok());
  for (const NetworkSpec& spec : *automatic) CHECK(spec.kind != "via");
}

TEST_CASE("via options: the provider and the VI cap are checked", "[networks][via]") {
  RuntimeOptions options;
  options.via_provider = "sockets";
  options.via_max_vis = 7;
  auto resolved = ResolveOptions(options);
  REQUIRE(resolved.ok());
  CHECK(resolved->via_provider == "sockets");
  CHECK(resolved->via_max_vis == 7);
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

TEST_CASE("without cluster credentials, networks stay on loopback", "[networks][security]") {
  auto local = ParseNetworks("shm, tcp, tcp:127.0.0.2/8, tcp:lo, via, via:lo", true);
  REQUIRE(local.ok());
  CHECK(local->size() == 6);
  // auto: shm and tcp on loopback, whatever interfaces the machine has.
  auto automatic = ParseNetworks("auto", true);
  REQUIRE(automatic.ok());
  REQUIRE(automatic->size() == 2);
  CHECK((*automatic)[0].kind == "shm");
  CHECK((*automatic)[1].ip == "127.0.0.1");
  for (const char* text : {"tcp:10.1.2.3/24", "via:192.168.7.1", "shm,tcp:lo,tcp:10.0.0.1"}) {
    INFO(text);
    auto refused = ParseNetworks(text, true);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(refused.status().message(),
               Catch::Contains("is not loopback: without cluster credentials") &&
                   Catch::Contains("README \"Security\""));
  }
  CHECK(ParseNetworks("tcp:10.1.2.3/24", false).ok());
}

TEST_CASE("bad network lists name the bad entry", "[networks]") {
  struct Case {
    const char* text;
    const char* words;
  };
  for (const Case& c :
       {Case{"udp", "unknown network 'udp'"}, Case{"shm,shm", "shm is listed twice"},
        Case{"tcp:no-such-if0", "no interface of that name"},
        Case{"tcp:10.0.0.1/33", "bad prefix length"},
        Case{"tcp:lo/8", "an interface takes no prefix"}, Case{" , ", "no network"}}) {
    INFO(c.text);
    auto specs = ParseNetworks(c.text);
    REQUIRE_FALSE(specs.ok());
    CHECK(specs.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(specs.status().message(), Catch::Contains(c.words));
  }
}

TEST_CASE("a tcp network reaches peer endpoints in its subnet", "[networks]") {
  NetworkSpec a;
  a.kind = "tcp";
  a.ip = "10.77.1.1";
  a.prefix = 24;
  TcpEndpoint same = ParseTcpEndpoint("10.77.1.2:4000/24");
  CHECK(same.connect == "10.77.1.2:4000");
  CHECK(same.prefix == 24);
  CHECK(TcpReaches(a, same));
  CHECK_FALSE(TcpReaches(a, ParseTcpEndpoint("10.77.2.2:4000/24")));
  // No prefix published (an older process): assumed reachable.
  TcpEndpoint old = ParseTcpEndpoint("10.77.2.2:4000");
  CHECK(old.prefix == -1);
  CHECK(TcpReaches(a, old));
  // IPv6 is not matched by subnet.
  CHECK(TcpReaches(a, ParseTcpEndpoint("[::1]:4000/128")));
  CHECK(FormatTcpEndpoint("10.77.1.1:5000", 24) == "10.77.1.1:5000/24");
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
