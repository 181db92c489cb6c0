// The transport registry (subsystem/transport_registry.h): the kinds this
// libtocl was built with, lookup by name, network lists (each kind's entry,
// "auto", names, loopback without credentials), each kind's endpoints and
// opening a network through its entry. No daemon, no runtime.
#include "subsystem/transport_registry.h"

#include <catch2/catch.hpp>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collecting_sink.h"
#include "runtime/epoll_reactor.h"
#include "scoped_environment.h"
#include "subsystem/network_spec.h"

namespace tocl::subsystem {
namespace {

// What CMake built (TOCL_WITH_*, passed to this test as definitions).
constexpr bool kWithShm = TOCL_TEST_WITH_SHM;
constexpr bool kWithTcp = TOCL_TEST_WITH_TCP;
constexpr bool kWithVia = TOCL_TEST_WITH_VIA;
constexpr bool kWithAll = kWithShm && kWithTcp && kWithVia;

// A network list of the entries in `entries` whose kind (before any ':')
// this libtocl was built with: each test's list names every kind built.
std::string ListOfBuilt(std::initializer_list<std::string_view> entries) {
  std::string list;
  for (std::string_view entry : entries) {
    if (!CompiledTransports().Find(entry.substr(0, entry.find(':'))).ok()) continue;
    if (!list.empty()) list += ", ";
    list += entry;
  }
  return list;
}

std::vector<std::string_view> Names(const TransportRegistry& registry) {
  std::vector<std::string_view> names;
  for (const Transport& transport : registry.transports()) names.push_back(transport.name);
  return names;
}

const Transport& Kind(std::string_view name) {
  auto found = CompiledTransports().Find(name);
  INFO(found.status().ToString());
  REQUIRE(found.ok());
  return **found;
}

TEST_CASE("the registry lists the kinds this libtocl was built with, fastest first", "[registry]") {
  std::vector<std::string_view> expected;
  if (kWithShm) expected.push_back("shm");
  if (kWithTcp) expected.push_back("tcp");
  if (kWithVia) expected.push_back("via");
  const TransportRegistry& registry = CompiledTransports();
  CHECK(Names(registry) == expected);
  for (const Transport& transport : registry.transports()) {
    INFO(transport.name);
    CHECK(NetworkName(transport.network) == transport.name);
    CHECK(transport.parse);
    CHECK(transport.automatic);
    CHECK(transport.open);
    CHECK(transport.connect_address);
  }
  // What the runtime chooses by.
  if (kWithShm) {
    CHECK(Kind("shm").host_local);
    CHECK(Kind("shm").post_copy);
    CHECK(Kind("shm").sleeps_alone);
    CHECK_FALSE(Kind("shm").ip_bound);
  }
  for (std::string_view name : {"tcp", "via"}) {
    if (!registry.Find(name).ok()) continue;
    INFO(name);
    CHECK(Kind(name).ip_bound);
    CHECK_FALSE(Kind(name).host_local);
    CHECK_FALSE(Kind(name).post_copy);
  }
}

TEST_CASE("a kind is found by its name, and an unknown one is refused naming the known ones",
          "[registry]") {
  const TransportRegistry& registry = CompiledTransports();
  for (const Transport& transport : registry.transports()) {
    auto found = registry.Find(transport.name);
    REQUIRE(found.ok());
    CHECK(*found == &transport);
  }
  auto unknown = registry.Find("udp");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unknown.status().message(), Catch::Contains("unknown network kind 'udp'"));
  if (kWithAll) {
    CHECK_THAT(unknown.status().message(), Catch::Contains("(known: shm, tcp, via)"));
  }
  // A network's name is not its kind.
  CHECK_FALSE(registry.Find("tcp-1").ok());
}

NetworkSpec SpecOf(std::string_view kind) {
  NetworkSpec spec;
  spec.kind = std::string(kind);
  return spec;
}

// Two made-up kinds: what the registry does comes from the entries.
Transport FakeKind(std::string_view name, bool host_local) {
  Transport transport = IpBoundTransport(name, Network::kFastest);
  if (host_local) {
    transport.host_local = true;
    transport.ip_bound = false;
    transport.parse = [name](std::string_view, std::span<const Interface>) -> Result<NetworkSpec> {
      return SpecOf(name);
    };
  }
  transport.automatic = [name, host_local](std::span<const Interface>, bool) {
    return std::vector<NetworkSpec>{host_local ? SpecOf(name) : LoopbackIpNetwork(name)};
  };
  return transport;
}

TEST_CASE("list syntax, names and a host-local kind listed once come from the entries",
          "[registry][networks]") {
  const TransportRegistry registry({FakeKind("near", true), FakeKind("far", false)}, {"gone"});
  auto specs = registry.ParseNetworks("far, near, far:127.0.0.3/8");
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 3);
  CHECK((*specs)[0].name == "far");
  CHECK((*specs)[0].ip == "127.0.0.1");
  CHECK((*specs)[1].name == "near");
  CHECK((*specs)[2].name == "far-1");
  CHECK((*specs)[2].ip == "127.0.0.3");

  // auto: every kind's own, in the registry's order, a host-local one once.
  auto automatic = registry.ParseNetworks("near, auto");
  REQUIRE(automatic.ok());
  REQUIRE(automatic->size() == 2);
  CHECK((*automatic)[0].kind == "near");
  CHECK((*automatic)[1].kind == "far");

  auto twice = registry.ParseNetworks("near,near");
  REQUIRE_FALSE(twice.ok());
  CHECK_THAT(twice.status().message(), Catch::Contains("near is listed twice in 'near,near'"));
  // A kind that takes no address is listed by its name alone.
  auto unknown = registry.ParseNetworks("near:lo");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(),
             Catch::Contains("unknown network 'near:lo' in 'near:lo' (known: near, far, far:IFACE, "
                             "far:IP[/PREFIX], auto)"));
  // A kind this build left out says so.
  for (const char* text : {"gone", "gone:eth0"}) {
    INFO(text);
    auto left_out = registry.ParseNetworks(text);
    REQUIRE_FALSE(left_out.ok());
    CHECK(left_out.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(left_out.status().message(),
               Catch::Contains("this libtocl was built without the gone subsystem"));
  }
  auto gone = registry.Find("gone");
  REQUIRE_FALSE(gone.ok());
  CHECK_THAT(gone.status().message(),
             Catch::Contains("this libtocl was built without the gone subsystem"));

  // Without credentials: host-local and loopback pass, the rest is refused.
  CHECK(registry.ParseNetworks("near, far", true).ok());
  CHECK(registry.ParseNetworks("far:10.1.2.3/24", true).status().code() ==
        StatusCode::kPermissionDenied);
}

TEST_CASE("each kind turns a peer's published endpoint into an address to connect to",
          "[registry]") {
  NetworkSpec local;
  local.ip = "10.77.1.1";
  local.prefix = 24;
  if (kWithShm) {
    local.kind = "shm";
    CHECK(Kind("shm").connect_address(local, "/dev/shm/tocl.1.2.0.seg") ==
          "/dev/shm/tocl.1.2.0.seg");
  }
  if (kWithTcp) {
    local.kind = "tcp";
    const Transport& tcp = Kind("tcp");
    CHECK(tcp.connect_address(local, "10.77.1.2:4000/24") == "10.77.1.2:4000");
    CHECK(tcp.connect_address(local, "10.77.2.2:4000/24") == std::nullopt);   // another subnet
    CHECK(tcp.connect_address(local, "10.77.2.2:4000") == "10.77.2.2:4000");  // no prefix
  }
  if (kWithVia) {
    local.kind = "via";
    const Transport& via = Kind("via");
    CHECK(via.connect_address(local, "sockets:10.77.1.2:4000/24") == "sockets:10.77.1.2:4000");
    CHECK(via.connect_address(local, "ibverbs:10.77.2.2:4000/24") == std::nullopt);
    CHECK(via.connect_address(local, "no-provider") == std::nullopt);
    CHECK(via.connect_address(local, ":10.77.1.2:4000/24") == std::nullopt);  // empty provider
  }
}

TEST_CASE("each kind opens through the registry and publishes its endpoint", "[registry]") {
  auto reactor = runtime::EpollReactor::Create();
  REQUIRE(reactor.ok());
  testing::CollectingSink sink;
  buffers::PoolBudget budget(size_t{64} << 20);
  tocl::testing::ScopedEnvironment environment;
  environment.Unset("TOCL_VIA_MAX_VIS");  // via's VI cap: the default
  RuntimeOptions options;
  options.via_provider = "sockets";
  REQUIRE(CompiledTransports().ResolveOptions(options).ok());
  const OpenContext context{.self_process = Gid::Process(1, 77),
                            .num_classes = 4,
                            .options = options,
                            .key = {},
                            .reactor = **reactor,
                            .sink = sink,
                            .budget = budget};
  auto specs = CompiledTransports().ParseNetworks(ListOfBuilt({"shm", "tcp", "via"}), true);
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == CompiledTransports().transports().size());
  for (const NetworkSpec& spec : *specs) {
    INFO(spec.name);
    auto network = Kind(spec.kind).open(spec, context);
    INFO(network.status().ToString());
    REQUIRE(network.ok());
    CHECK(NetworkName(network->subsystem->network()) == spec.kind);
    if (spec.kind == "shm") {
      CHECK(network->published == network->subsystem->address());
      CHECK_FALSE(network->add_stats);
    } else if (spec.kind == "tcp") {
      CHECK_THAT(network->published, Catch::StartsWith("127.0.0.1:") && Catch::EndsWith("/8"));
      CHECK_FALSE(network->add_stats);
    } else {
      REQUIRE(spec.kind == "via");
      CHECK_THAT(network->published,
                 Catch::StartsWith("sockets:127.0.0.1:") && Catch::EndsWith("/8"));
      REQUIRE(network->add_stats);
      NetworkStats stats;
      network->add_stats(stats);
      CHECK(stats.provider == "sockets");
      CHECK(stats.vi_cap == 1024);
    }
    network->subsystem->Close();
  }
}

TEST_CASE("network lists: shm, tcp by address, interface and loopback", "[networks]") {
  if (kWithShm) {
    auto shm = CompiledTransports().ParseNetworks("shm");
    REQUIRE(shm.ok());
    REQUIRE(shm->size() == 1);
    CHECK((*shm)[0].kind == "shm");
    CHECK((*shm)[0].name == "shm");
    CHECK(KindOf("shm") == "shm");
  }
  auto automatic = CompiledTransports().ParseNetworks("auto");
  REQUIRE(automatic.ok());
  if (kWithShm) {
    REQUIRE_FALSE(automatic->empty());
    CHECK(automatic->front().kind == "shm");
  }
  if (!kWithTcp) {
    WARN("skipped the tcp lists: this libtocl is built without tcp");
    return;
  }
  CHECK(automatic->size() >= (kWithShm ? 2u : 1u));  // some tcp network, loopback at least
  auto specs = CompiledTransports().ParseNetworks(
      ListOfBuilt({"shm", "tcp:127.0.0.1", "tcp:10.1.2.3/24", "tcp:lo"}));
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == (kWithShm ? 4u : 3u));
  if (kWithShm) {
    CHECK((*specs)[0].kind == "shm");
    CHECK((*specs)[0].name == "shm");
  }
  const std::span<const NetworkSpec> tcp = std::span(*specs).subspan(kWithShm ? 1 : 0);
  CHECK(tcp[0].name == "tcp");
  CHECK(tcp[0].ip == "127.0.0.1");
  CHECK(tcp[0].prefix == 8);  // lo's
  CHECK(tcp[0].device == "lo");
  CHECK(tcp[1].name == "tcp-1");
  CHECK(tcp[1].ip == "10.1.2.3");
  CHECK(tcp[1].prefix == 24);
  CHECK(tcp[2].name == "tcp-2");
  CHECK(tcp[2].ip == "127.0.0.1");
  CHECK(IsLoopback(tcp[2]));
  CHECK(KindOf("tcp-2") == "tcp");

  auto bare = CompiledTransports().ParseNetworks("tcp");
  REQUIRE(bare.ok());
  CHECK((*bare)[0].ip == "127.0.0.1");
}

TEST_CASE("network lists: via by address, interface and loopback, named apart from tcp",
          "[networks][via]") {
  if (!kWithVia) {
    WARN("skipped: this libtocl is built without via");
    return;
  }
  auto specs = CompiledTransports().ParseNetworks(
      ListOfBuilt({"tcp:lo", "via", "via:127.0.0.1/8", "via:lo"}));
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == (kWithTcp ? 4u : 3u));
  if (kWithTcp) CHECK((*specs)[0].name == "tcp");
  const std::span<const NetworkSpec> via = std::span(*specs).subspan(kWithTcp ? 1 : 0);
  CHECK(via[0].kind == "via");
  CHECK(via[0].name == "via");
  CHECK(via[0].ip == "127.0.0.1");
  CHECK(via[1].name == "via-1");
  CHECK(via[1].prefix == 8);
  CHECK(via[2].name == "via-2");
  CHECK(via[2].device == "lo");
  CHECK(IsLoopback(via[2]));
  CHECK(KindOf("via-2") == "via");
  auto bad = CompiledTransports().ParseNetworks("via:no-such-if0");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("'via:no-such-if0'"));
  // Without an RDMA device, auto opens no via network (over sockets it
  // would repeat tcp).
  auto automatic = CompiledTransports().ParseNetworks("auto");
  REQUIRE(automatic.ok());
  for (const NetworkSpec& spec : *automatic) CHECK(spec.kind != "via");
}

TEST_CASE("without cluster credentials, networks stay on loopback", "[networks][security]") {
  auto local = CompiledTransports().ParseNetworks(
      ListOfBuilt({"shm", "tcp", "tcp:127.0.0.2/8", "tcp:lo", "via", "via:lo"}), true);
  REQUIRE(local.ok());
  CHECK(local->size() == (kWithShm ? 1u : 0u) + (kWithTcp ? 3u : 0u) + (kWithVia ? 2u : 0u));
  // auto: shm and tcp on loopback, whatever interfaces the machine has.
  auto automatic = CompiledTransports().ParseNetworks("auto", true);
  if (kWithShm || kWithTcp) {
    REQUIRE(automatic.ok());
    REQUIRE(automatic->size() == (kWithShm ? 1u : 0u) + (kWithTcp ? 1u : 0u));
    if (kWithShm) CHECK((*automatic)[0].kind == "shm");
    if (kWithTcp) CHECK(automatic->back().ip == "127.0.0.1");
  }
  std::vector<std::string> refused_lists;
  if (kWithTcp) refused_lists.push_back("tcp:10.1.2.3/24");
  if (kWithVia) refused_lists.push_back("via:192.168.7.1");
  if (kWithTcp) refused_lists.push_back(ListOfBuilt({"shm", "tcp:lo", "tcp:10.0.0.1"}));
  for (const std::string& text : refused_lists) {
    INFO(text);
    auto refused = CompiledTransports().ParseNetworks(text, true);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(refused.status().message(),
               Catch::Contains("is not loopback: without cluster credentials") &&
                   Catch::Contains("README \"Security\""));
  }
  if (kWithTcp) CHECK(CompiledTransports().ParseNetworks("tcp:10.1.2.3/24", false).ok());
}

TEST_CASE("bad network lists name the bad entry", "[networks]") {
  struct Case {
    const char* text;
    const char* words;
  };
  std::vector<Case> cases = {Case{"udp", "unknown network 'udp'"}, Case{" , ", "no network"}};
  if (kWithShm) cases.push_back(Case{"shm,shm", "shm is listed twice"});
  if (kWithTcp) {
    cases.insert(cases.end(), {Case{"tcp:no-such-if0", "no interface of that name"},
                               Case{"tcp:10.0.0.1/33", "bad prefix length"},
                               Case{"tcp:lo/8", "an interface takes no prefix"}});
  }
  if (kWithVia) cases.push_back(Case{"via:10.0.0.1/x", "bad prefix length in 'via:10.0.0.1/x'"});
  for (const Case& c : cases) {
    INFO(c.text);
    auto specs = CompiledTransports().ParseNetworks(c.text);
    REQUIRE_FALSE(specs.ok());
    CHECK(specs.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(specs.status().message(), Catch::Contains(c.words));
  }
}

TEST_CASE("auto binds a kind to each interface that is up and not loopback", "[networks]") {
  const std::vector<Interface> interfaces = {
      {.name = "lo", .ipv4 = 0x7f000001, .prefix = 8, .up = true, .loopback = true},
      {.name = "eth0", .ipv4 = 0x0a4d0101, .prefix = 24, .up = true},
      {.name = "eth1", .ipv4 = 0x0a4e0101, .prefix = 16, .up = false},
      {.name = "eth2", .ipv4 = 0xc0a80701, .prefix = 24, .up = true}};
  const std::vector<NetworkSpec> specs = IpNetworksOnUpInterfaces("far", interfaces);
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].kind == "far");
  CHECK(specs[0].device == "eth0");
  CHECK(specs[0].ip == "10.77.1.1");
  CHECK(specs[0].prefix == 24);
  CHECK(specs[1].device == "eth2");
  CHECK(specs[1].ip == "192.168.7.1");
  CHECK(IpNetworksOnUpInterfaces("far", {}).empty());
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

TEST_CASE("the older spelling of the network list names subsystems", "[networks]") {
  if (kWithShm && kWithTcp) {
    CHECK(*NetworksFromOlderSpelling("", "127.0.0.5") == "shm,tcp:127.0.0.5");
  }
  if (kWithTcp && kWithVia) CHECK(*NetworksFromOlderSpelling("tcp, via", "") == "tcp,via");
  // Every kind built, by its name; tcp takes the address.
  for (const Transport& transport : CompiledTransports().transports()) {
    INFO(transport.name);
    auto networks = NetworksFromOlderSpelling(transport.name, "127.0.0.5");
    REQUIRE(networks.ok());
    CHECK(*networks == (transport.name == "tcp" ? "tcp:127.0.0.5" : std::string(transport.name)));
  }
  // A subsystem that is no kind of the registry's is refused as it says;
  // one whose name starts like one is no exception.
  for (const char* bad : {"udp", "tcpx", "shmem,tcp"}) {
    INFO(bad);
    auto refused = NetworksFromOlderSpelling(bad, "");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(refused.status().message(), Catch::Contains("unknown network kind"));
  }
  auto bad = NetworksFromOlderSpelling("udp", "");
  CHECK_THAT(bad.status().message(),
             Catch::Contains("subsystem 'udp' in 'udp': unknown network kind 'udp'"));
  if (kWithAll) CHECK_THAT(bad.status().message(), Catch::Contains("(known: shm, tcp, via)"));
  CHECK_FALSE(NetworksFromOlderSpelling(" , ", "").ok());  // nothing enabled
}

}  // namespace
}  // namespace tocl::subsystem
