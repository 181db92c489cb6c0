// Network statistics: reported by processes on their enroll streams (beside
// the pool statistics), kept by the daemon in memory while the stream lasts,
// read with GetNetworkStats.
#include "tocl/network_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "runtime/directory_link.h"
#include "status_assertions.h"
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

NetworkPeerStats Peer(Gid peer, double bandwidth, bool failed = false) {
  return NetworkPeerStats{.peer = peer,
                          .bandwidth = bandwidth,
                          .fragments_sent = 1000,
                          .fragments_resent = failed ? uint64_t{17} : 0,
                          .failed = failed};
}

NetworkStats Network(std::string name, std::string kind, std::string device,
                     std::vector<NetworkPeerStats> peers = {}) {
  NetworkStats network;
  network.name = std::move(name);
  network.kind = std::move(kind);
  network.device = std::move(device);
  network.address = std::string("\x0a\x00\x00\x01\xa0\x12", 6);  // opaque bytes, with a zero
  network.frames_sent = 1204;
  network.bytes_sent = uint64_t{5} << 32;  // past 32 bits
  network.frames_received = 998;
  network.bytes_received = 123456789;
  network.failures = 1;
  network.peers = std::move(peers);
  return network;
}

ViStats Vi(Gid peer, uint32_t class_bytes, std::string state = "connected") {
  return ViStats{.peer = peer,
                 .class_bytes = class_bytes,
                 .state = std::move(state),
                 .posted = 64,
                 .credits = 60,
                 .queued = 3,
                 .sent = (uint64_t{1} << 32) + 10,  // past 32 bits
                 .received = 12};
}

// A via network with the VI pool `vis`.
NetworkStats Via(std::string name, std::string provider, std::vector<ViStats> vis) {
  NetworkStats network = Network(std::move(name), "via", "eth0");
  network.provider = std::move(provider);
  network.vi_cap = 64;
  network.vis_opened = (uint64_t{7} << 32) + 1;
  network.vis_closed = 40;
  network.vis = std::move(vis);
  return network;
}

bool SamePeer(const NetworkPeerStats& a, const NetworkPeerStats& b) {
  return a.peer == b.peer && a.bandwidth == b.bandwidth && a.fragments_sent == b.fragments_sent &&
         a.fragments_resent == b.fragments_resent && a.failed == b.failed;
}

bool SameVi(const ViStats& a, const ViStats& b) {
  return a.peer == b.peer && a.class_bytes == b.class_bytes && a.state == b.state &&
         a.posted == b.posted && a.credits == b.credits && a.queued == b.queued &&
         a.sent == b.sent && a.received == b.received;
}

bool SameNetwork(const NetworkStats& a, const NetworkStats& b) {
  return a.name == b.name && a.kind == b.kind && a.device == b.device && a.address == b.address &&
         a.frames_sent == b.frames_sent && a.bytes_sent == b.bytes_sent &&
         a.frames_received == b.frames_received && a.bytes_received == b.bytes_received &&
         a.failures == b.failures &&
         std::equal(a.peers.begin(), a.peers.end(), b.peers.begin(), b.peers.end(), SamePeer) &&
         a.provider == b.provider && a.vi_cap == b.vi_cap && a.vis_opened == b.vis_opened &&
         a.vis_closed == b.vis_closed &&
         std::equal(a.vis.begin(), a.vis.end(), b.vis.begin(), b.vis.end(), SameVi);
}

bool SameNetworks(const std::vector<NetworkStats>& a, const std::vector<NetworkStats>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameNetwork);
}

// True once the daemon holds exactly `expected` as the report of `process`.
bool Holds(DirectoryClient& client, Gid process, const std::vector<NetworkStats>& expected) {
  auto reports = client.NetworkStats(process);
  return reports.ok() && reports->size() == 1 && (*reports)[0].process == process &&
         SameNetworks((*reports)[0].networks, expected);
}

// A raw report of `networks` networks named "n0", "n1", ... with `peers`
// peers each; `frames_sent` marks it.
pb::EnrollRequest RawReport(size_t networks, size_t peers, uint64_t frames_sent) {
  pb::EnrollRequest request;
  for (size_t i = 0; i < networks; ++i) {
    pb::NetworkStats* network = request.mutable_network_stats()->add_networks();
    network->set_name("n" + std::to_string(i));
    network->set_kind("tcp");
    network->set_frames_sent(frames_sent);
    for (size_t p = 0; p < peers; ++p) {
      pb::NetworkPeerStats* peer = network->add_peers();
      peer->set_peer(Gid::Process(2, static_cast<uint32_t>(p + 1)).raw());
      peer->set_bandwidth(1e9);
    }
  }
  return request;
}

// A raw report of a tcp network "n0" and a via network "n1" with `vis` VIs
// to h2.p1, h2.p2, ...; `frames_sent` marks it.
pb::EnrollRequest RawViReport(size_t vis, uint64_t frames_sent) {
  pb::EnrollRequest request = RawReport(2, 0, frames_sent);
  pb::NetworkStats* via = request.mutable_network_stats()->mutable_networks(1);
  via->set_kind("via");
  via->set_provider("sockets");
  via->set_vi_cap(64);
  for (size_t v = 0; v < vis; ++v) {
    pb::ViStats* vi = via->add_vis();
    vi->set_peer(Gid::Process(2, static_cast<uint32_t>(v + 1)).raw());
    vi->set_class_bytes(256);
    vi->set_state("connected");
    vi->set_credits(60);
  }
  return request;
}

TEST_CASE("reported network statistics round-trip through the daemon, the next report replaces",
          "[network][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto first = REQUIRE_VALUE(client->Enroll(ProcessNamed("first")));
  auto second = REQUIRE_VALUE(client->Enroll(ProcessNamed("second")));

  const auto before = std::chrono::system_clock::now();
  const std::vector<NetworkStats> report = {
      Network("shm", "shm", ""),
      Network("tcp.0", "tcp", "eth0",
              {Peer(Gid::Process(2, 5), 812.4e6), Peer(Gid::Process(3, 1), 0, /*failed=*/true)}),
      Network("tcp.1", "tcp", "eth1", {Peer(Gid::Process(2, 5), 117.5e6)}),
  };
  REQUIRE_OK(first->ReportNetworkStats(report));
  REQUIRE(WaitUntil([&] { return Holds(*client, first->gid(), report); }, seconds(10)));
  const auto reported_at = REQUIRE_VALUE(client->NetworkStats(first->gid()))[0].reported_at;
  CHECK(reported_at >= before - seconds(1));
  CHECK(reported_at <= std::chrono::system_clock::now() + seconds(1));

  // Pool statistics are a report of their own: none yet.
  CHECK(client->PoolStats(first->gid()).status().code() == StatusCode::kNotFound);

  auto silent = client->NetworkStats(second->gid());
  REQUIRE(silent.status().code() == StatusCode::kNotFound);
  CHECK(silent.status().message() ==
        "process " + second->gid().ToString() + " has not reported network statistics yet");
  auto all = REQUIRE_VALUE(client->NetworkStats());
  REQUIRE(all.size() == 1);
  CHECK(all[0].process == first->gid());

  // An empty report is a report: a process with no networks.
  REQUIRE_OK(second->ReportNetworkStats({}));
  REQUIRE(WaitUntil([&] { return Holds(*client, second->gid(), {}); }, seconds(10)));
  all = REQUIRE_VALUE(client->NetworkStats());
  REQUIRE(all.size() == 2);
  CHECK(all[0].process == first->gid());  // in Gid order
  CHECK(all[1].process == second->gid());
  CHECK(SameNetworks(all[0].networks, report));

  const std::vector<NetworkStats> next = {Network("tcp.0", "tcp", "eth0")};
  REQUIRE_OK(first->ReportNetworkStats(next));
  REQUIRE(WaitUntil([&] { return Holds(*client, first->gid(), next); }, seconds(10)));

  REQUIRE_OK(first->Close("done"));
  CHECK(first->ReportNetworkStats(next).code() == StatusCode::kFailedPrecondition);
  Status gone;
  CHECK(WaitUntil(
      [&] {
        gone = client->NetworkStats(first->gid()).status();
        return gone.message() == "process " + first->gid().ToString() + " has exited";
      },
      seconds(10)));
  CHECK(gone.code() == StatusCode::kNotFound);
  all = REQUIRE_VALUE(client->NetworkStats());
  REQUIRE(all.size() == 1);
  CHECK(all[0].process == second->gid());
  CHECK_OK(second->Close());
}

TEST_CASE("network statistics of an unknown process are not found, of a non-process invalid",
          "[network][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto unknown = client->NetworkStats(Gid::Process(1, 999));
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK(unknown.status().message() == "no process h1.p999");
  auto other_host = client->NetworkStats(Gid::Process(7, 1));
  CHECK(other_host.status().code() == StatusCode::kNotFound);
  CHECK(other_host.status().message() == "no process h7.p1");
  CHECK(client->NetworkStats(Gid::Host(1)).status().code() == StatusCode::kInvalidArgument);
  CHECK(client->NetworkStats(Gid::Thread(1, 1, 1)).status().code() == StatusCode::kInvalidArgument);
  // Nobody has reported: an empty list, not an error.
  CHECK(REQUIRE_VALUE(client->NetworkStats()).empty());
}

TEST_CASE("ReportNetworkStats refuses a report over the limits and leaves out extra peers",
          "[network][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("limits")));
  using Report = std::vector<NetworkStats>;
  auto refused = [&](const Report& report) {
    return session->ReportNetworkStats(report).code() == StatusCode::kInvalidArgument;
  };

  Report most;
  for (size_t i = 0; i < kMaxNetworksPerReport; ++i) {
    most.push_back(Network("tcp." + std::to_string(i), "tcp", "eth0"));
  }
  CHECK_OK(session->ReportNetworkStats(most));
  Report too_many = most;
  too_many.push_back(Network("shm", "shm", ""));
  CHECK(refused(too_many));

  const std::string longest(kMaxNetworkNameBytes, 'n');
  CHECK(refused({Network(longest + "n", "tcp", "")}));
  CHECK(refused({Network("", "tcp", "")}));
  CHECK(refused({Network("tcp.0", "", "")}));
  CHECK(refused({Network("tcp.0", longest + "k", "")}));
  CHECK(refused({Network("tcp.0", "tcp", std::string(kMaxNetworkDeviceBytes + 1, 'd'))}));
  Report long_address = {Network("tcp.0", "tcp", "")};
  long_address[0].address.assign(kMaxNetworkAddressBytes + 1, 'a');
  CHECK(refused(long_address));
  CHECK(refused({Network("tcp.0", "tcp", ""), Network("tcp.0", "tcp", "")}));
  CHECK(refused({Network("tcp.0", "tcp", "", {Peer(Gid::Thread(2, 1, 1), 1e6)})}));
  CHECK(refused({Network("tcp.0", "tcp", "", {Peer(Gid(), 1e6)})}));
  CHECK(refused({Network("tcp.0", "tcp", "", {Peer(Gid::Process(2, 1), -1)})}));
  CHECK(refused({Network("tcp.0", "tcp", "",
                         {Peer(Gid::Process(2, 1), std::numeric_limits<double>::quiet_NaN())})}));
  CHECK(refused({Network("tcp.0", "tcp", "",
                         {Peer(Gid::Process(2, 1), std::numeric_limits<double>::infinity())})}));

  // Peers past the limit are left out, the first (most recent) ones kept.
  std::vector<NetworkPeerStats> peers;
  for (uint32_t p = 1; p <= kMaxNetworkPeersPerReport + 10; ++p) {
    peers.push_back(Peer(Gid::Process(2, p), 1e6 * p));
  }
  Report edge = {Network(longest, longest, std::string(kMaxNetworkDeviceBytes, 'd'), peers)};
  edge[0].address.assign(kMaxNetworkAddressBytes, '\xff');
  REQUIRE_OK(session->ReportNetworkStats(edge));
  Report expected = edge;
  expected[0].peers.resize(kMaxNetworkPeersPerReport);
  CHECK(WaitUntil([&] { return Holds(*client, session->gid(), expected); }, seconds(10)));
  CHECK_OK(session->Close());
}

TEST_CASE("a via network's VI pool round-trips through the daemon", "[network][via][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("via")));

  std::vector<ViStats> vis = {Vi(Gid::Process(2, 5), 256), Vi(Gid::Process(2, 5), 65536),
                              Vi(Gid::Process(3, 1), uint32_t{1} << 20, "connecting")};
  vis[1].posted = 0;
  vis[1].credits = 0;
  vis[1].queued = 0;
  vis[2].state = "closing";
  vis[2].sent = 0;
  vis[2].received = std::numeric_limits<uint64_t>::max();
  const std::vector<NetworkStats> report = {
      Network("shm", "shm", ""), Via("via.0", "sockets", vis),
      Via("via.1", "ibverbs", {}),  // a pool with no VI open
  };
  REQUIRE_OK(session->ReportNetworkStats(report));
  REQUIRE(WaitUntil([&] { return Holds(*client, session->gid(), report); }, seconds(10)));
  const auto networks = REQUIRE_VALUE(client->NetworkStats(session->gid()))[0].networks;
  REQUIRE(networks.size() == 3);
  // Not a via network: no via fields.
  CHECK(networks[0].provider.empty());
  CHECK(networks[0].vi_cap == 0);
  CHECK(networks[0].vis.empty());
  CHECK(networks[1].vis[2].state == "closing");
  CHECK(networks[1].vis[2].received == std::numeric_limits<uint64_t>::max());
  CHECK_OK(session->Close());
}

TEST_CASE("ReportNetworkStats refuses a bad VI and leaves out VIs past the limit",
          "[network][via][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("via-limits")));
  auto refused = [&](const ViStats& vi) {
    const std::vector<NetworkStats> report = {
        Via("via.0", "sockets", {Vi(Gid::Process(2, 1), 256), vi})};
    return session->ReportNetworkStats(report).code() == StatusCode::kInvalidArgument;
  };
  const Gid peer = Gid::Process(2, 1);
  CHECK(refused(Vi(Gid::Thread(2, 1, 1), 256)));
  CHECK(refused(Vi(Gid::Host(2), 256)));
  CHECK(refused(Vi(Gid(), 256)));
  CHECK(refused(Vi(peer, 0)));
  CHECK(refused(Vi(peer, 128)));
  CHECK(refused(Vi(peer, 384)));  // not a power of two
  CHECK(refused(Vi(peer, uint32_t{2} << 20)));
  CHECK(refused(Vi(peer, 256, "")));
  CHECK(refused(Vi(peer, 256, std::string(kMaxViStateBytes + 1, 's'))));
  const std::vector<NetworkStats> long_provider = {Via("via.0", std::string(33, 'p'), {})};
  CHECK(session->ReportNetworkStats(long_provider).code() == StatusCode::kInvalidArgument);

  // VIs past the limit are left out (unchecked), the first (most recently
  // used) ones kept; bounds are inclusive.
  std::vector<ViStats> vis;
  for (uint32_t v = 1; v <= kMaxVisPerReport + 10; ++v) {
    vis.push_back(Vi(Gid::Process(2, v), v % 2 == 0 ? 256u : uint32_t{1} << 20,
                     std::string(kMaxViStateBytes, 's')));
  }
  vis.back().peer = Gid::Host(2);  // left out, so not refused
  const std::vector<NetworkStats> edge = {Via("via.0", std::string(32, 'p'), vis)};
  REQUIRE_OK(session->ReportNetworkStats(edge));
  std::vector<NetworkStats> expected = edge;
  expected[0].vis.resize(kMaxVisPerReport);
  CHECK(WaitUntil([&] { return Holds(*client, session->gid(), expected); }, seconds(10)));
  CHECK_OK(session->Close());
}

TEST_CASE("the daemon ignores a network report over the limits with one log line",
          "[network][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt raw = RawEnroll(*stub, MakeRegister("oversized"));
  REQUIRE(raw.status.ok());
  const Gid gid = raw.enrollment->gid();
  const std::string prefix = "process " + gid.ToString() + ": network statistics report ignored: ";
  auto logged = [&](const std::string& line) {
    return WaitUntil(
        [&] { return daemon.LogTail(1 << 20).find(prefix + line) != std::string::npos; },
        seconds(10));
  };
  auto holds = [&](uint64_t frames_sent) {
    pb::GetNetworkStatsResponse response;
    return RawGetNetworkStats(*stub, gid.raw(), &response).ok() && response.processes_size() == 1 &&
           response.processes(0).networks_size() == 1 &&
           response.processes(0).networks(0).frames_sent() == frames_sent;
  };

  REQUIRE(raw.enrollment->Send(RawReport(1, 2, 1)));
  REQUIRE(WaitUntil([&] { return holds(1); }, seconds(10)));

  // Reports are handled in order: once the line is logged, the report is done.
  REQUIRE(raw.enrollment->Send(RawReport(17, 0, 2)));
  CHECK(logged("17 networks (at most 16)"));
  CHECK(holds(1));
  REQUIRE(raw.enrollment->Send(RawReport(1, 65, 3)));
  CHECK(logged("network 0: 65 peers (at most 64)"));
  CHECK(holds(1));

  auto edited = [](auto edit) {
    pb::EnrollRequest request = RawReport(2, 1, 4);
    edit(*request.mutable_network_stats()->mutable_networks(1));
    return request;
  };
  REQUIRE(raw.enrollment->Send(edited([](pb::NetworkStats& n) { n.set_name(""); })));
  CHECK(logged("network 1: a name of 0 bytes (1 to 32)"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.set_name(std::string(33, 'x') + "\n"); })));
  CHECK(logged("network 1: a name of 34 bytes (1 to 32)"));
  REQUIRE(raw.enrollment->Send(edited([](pb::NetworkStats& n) { n.set_kind(""); })));
  CHECK(logged("network 1: a kind of 0 bytes (1 to 32)"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.set_device(std::string(65, 'd')); })));
  CHECK(logged("network 1: a device name of 65 bytes (at most 64)"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.set_address(std::string(1025, 'a')); })));
  CHECK(logged("network 1: an address of 1025 bytes (at most 1024)"));
  REQUIRE(raw.enrollment->Send(edited([](pb::NetworkStats& n) { n.set_name("n0"); })));
  CHECK(logged("network 1 has the name of network 0"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.mutable_peers(0)->set_peer(Gid::Host(2).raw()); })));
  CHECK(logged("network 1: peer h2 is not a process id"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.mutable_peers(0)->set_bandwidth(-5); })));
  CHECK(logged("network 1: a bandwidth of -5 to h2.p1"));
  REQUIRE(raw.enrollment->Send(edited([](pb::NetworkStats& n) {
    n.mutable_peers(0)->set_bandwidth(std::numeric_limits<double>::quiet_NaN());
  })));
  CHECK(logged("network 1: a bandwidth of nan to h2.p1"));
  CHECK(holds(1));

  // The stream is still up: the next report counts and the process runs.
  REQUIRE(raw.enrollment->Send(RawReport(1, 0, 5)));
  CHECK(WaitUntil([&] { return holds(5); }, seconds(10)));
  CHECK(REQUIRE_VALUE(client->Lookup(gid)).state == EntityState::kRunning);
  CHECK(raw.enrollment->Goodbye().ok());
}

TEST_CASE("the daemon ignores a network report with a bad VI with one log line",
          "[network][via][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto stub = NewRawStub(daemon.address());
  EnrollAttempt raw = RawEnroll(*stub, MakeRegister("bad-vi"));
  REQUIRE(raw.status.ok());
  const Gid gid = raw.enrollment->gid();
  const std::string prefix = "process " + gid.ToString() + ": network statistics report ignored: ";
  auto logged = [&](const std::string& line) {
    return WaitUntil(
        [&] { return daemon.LogTail(1 << 20).find(prefix + line) != std::string::npos; },
        seconds(10));
  };
  auto holds = [&](uint64_t frames_sent, int vis) {
    pb::GetNetworkStatsResponse response;
    return RawGetNetworkStats(*stub, gid.raw(), &response).ok() && response.processes_size() == 1 &&
           response.processes(0).networks_size() == 2 &&
           response.processes(0).networks(0).frames_sent() == frames_sent &&
           response.processes(0).networks(1).vis_size() == vis;
  };

  REQUIRE(raw.enrollment->Send(RawViReport(kMaxVisPerReport, 1)));
  REQUIRE(WaitUntil([&] { return holds(1, static_cast<int>(kMaxVisPerReport)); }, seconds(10)));
  {
    pb::GetNetworkStatsResponse response;
    REQUIRE(RawGetNetworkStats(*stub, gid.raw(), &response).ok());
    const pb::NetworkStats& via = response.processes(0).networks(1);
    CHECK(via.provider() == "sockets");
    CHECK(via.vi_cap() == 64);
    CHECK(via.vis(0).state() == "connected");
    CHECK(via.vis(0).credits() == 60);
  }

  REQUIRE(raw.enrollment->Send(RawViReport(kMaxVisPerReport + 1, 2)));
  CHECK(logged("network 1: 257 VIs (at most 256)"));
  auto edited = [](auto edit) {
    pb::EnrollRequest request = RawViReport(2, 3);
    edit(*request.mutable_network_stats()->mutable_networks(1));
    return request;
  };
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.set_provider(std::string(33, 'p') + "\n"); })));
  CHECK(logged("network 1: a provider name of 34 bytes (at most 32)"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.mutable_vis(1)->set_peer(Gid::Host(2).raw()); })));
  CHECK(logged("network 1: the peer h2 of a VI is not a process id"));
  REQUIRE(raw.enrollment->Send(
      edited([](pb::NetworkStats& n) { n.mutable_vis(1)->set_peer(Gid::Thread(2, 2, 1).raw()); })));
  CHECK(logged("network 1: the peer h2.p2.t1 of a VI is not a process id"));
  for (uint32_t bad : {0u, 128u, 384u, 2u << 20}) {
    REQUIRE(raw.enrollment->Send(
        edited([&](pb::NetworkStats& n) { n.mutable_vis(1)->set_class_bytes(bad); })));
    CHECK(
        logged(fmt::format("network 1: a VI class of {} bytes to h2.p2 (a power of two, 256 to "
                           "1048576)",
                           bad)));
  }
  REQUIRE(
      raw.enrollment->Send(edited([](pb::NetworkStats& n) { n.mutable_vis(1)->set_state(""); })));
  CHECK(logged("network 1: a VI state of 0 bytes to h2.p2 (1 to 16)"));
  REQUIRE(raw.enrollment->Send(edited(
      [](pb::NetworkStats& n) { n.mutable_vis(1)->set_state(std::string(16, 's') + "\x1b"); })));
  CHECK(logged("network 1: a VI state of 17 bytes to h2.p2 (1 to 16)"));
  CHECK(holds(1, static_cast<int>(kMaxVisPerReport)));

  // The bounds are inclusive, and the stream is still up.
  REQUIRE(raw.enrollment->Send(edited([](pb::NetworkStats& n) {
    n.set_provider(std::string(32, 'p'));
    n.mutable_vis(0)->set_class_bytes(uint32_t{1} << 20);
    n.mutable_vis(1)->set_state(std::string(16, 's'));
  })));
  CHECK(WaitUntil([&] { return holds(3, 2); }, seconds(10)));
  CHECK(raw.enrollment->Goodbye().ok());
}

TEST_CASE("network statistics vanish when the stream breaks and after a daemon restart",
          "[network][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());

  auto stub = NewRawStub(daemon.address());
  EnrollAttempt raw = RawEnroll(*stub, MakeRegister("dies"));
  REQUIRE(raw.status.ok());
  const Gid raw_gid = raw.enrollment->gid();
  REQUIRE(raw.enrollment->Send(RawReport(2, 1, 7)));
  REQUIRE(WaitUntil([&] { return client->NetworkStats(raw_gid).ok(); }, seconds(10)));
  raw.enrollment.reset();  // cancels the stream
  CHECK(WaitUntil(
      [&] {
        auto all = client->NetworkStats();
        return all.ok() && all->empty();
      },
      seconds(10)));
  CHECK(client->NetworkStats(raw_gid).status().code() == StatusCode::kNotFound);

  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("survivor")));
  const Gid gid = session->gid();
  const std::vector<NetworkStats> report = {Network("shm", "shm", "")};
  REQUIRE_OK(session->ReportNetworkStats(report));
  REQUIRE(WaitUntil([&] { return Holds(*client, gid, report); }, seconds(10)));
  REQUIRE(daemon.Stop().value_or(-1) == 0);
  CHECK(WaitUntil(
      [&] { return session->ReportNetworkStats(report).code() == StatusCode::kUnavailable; },
      seconds(10)));
  REQUIRE_OK(daemon.Restart());
  auto fresh = REQUIRE_VALUE(daemon.Connect());
  // The snapshot lived in the old daemon's memory only.
  CHECK(fresh->NetworkStats(gid).status().code() == StatusCode::kNotFound);
  CHECK(WaitUntil(
      [&] { return session->ReportNetworkStats(report).ok() && Holds(*fresh, gid, report); },
      seconds(20), std::chrono::milliseconds(50)));
  CHECK_OK(session->Close());
}

TEST_CASE("a DirectoryLink reports its network statistics every stats interval",
          "[network][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  std::atomic<uint64_t> frames{0};
  runtime::DirectoryEvents events;
  events.network_stats = [&] {
    std::vector<NetworkStats> networks = {Network("shm", "shm", "")};
    networks[0].frames_sent = frames.fetch_add(1) + 1;
    return networks;
  };
  auto link = REQUIRE_VALUE(runtime::DirectoryLink::Start(
      daemon.address(), ProcessNamed("linked"), std::chrono::milliseconds(20), std::move(events)));
  const Gid gid = link->process();
  // Reported again and again: the daemon sees the counter grow.
  CHECK(WaitUntil(
      [&] {
        auto reports = client->NetworkStats(gid);
        return reports.ok() && (*reports)[0].networks.size() == 1 &&
               (*reports)[0].networks[0].frames_sent >= 3;
      },
      seconds(10)));
  // No pool statistics callback: none reported.
  CHECK(client->PoolStats(gid).status().code() == StatusCode::kNotFound);
  CHECK_OK(link->Close());
}

TEST_CASE("a runtime reports its networks and the peer of a long message to its daemon",
          "[network][runtime][integration]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto start = [&](std::string name) {
    RuntimeOptions options;
    options.daemon_address = daemon.address();
    options.name = std::move(name);
    options.networks = "shm,tcp";
    options.stats_interval = std::chrono::milliseconds(50);
    return Runtime::Start(std::move(options));
  };
  auto sender = REQUIRE_VALUE(start("net-sender"));
  auto receiver = REQUIRE_VALUE(start("net-receiver"));
  const Gid from = REQUIRE_VALUE(sender->EnrollThread("from"));
  const Gid to = REQUIRE_VALUE(receiver->EnrollThread("to"));
  const std::vector<std::byte> payload(size_t{4} << 20, std::byte{0x5a});
  REQUIRE_OK(sender->Send(from, to, 1, payload));
  REQUIRE(REQUIRE_VALUE(receiver->RecvFor(to, seconds(10), from, 1)).size() == payload.size());

  std::vector<std::string> names;
  for (const NetworkStats& network : sender->Networks()) names.push_back(network.name);
  REQUIRE(!names.empty());
  const Gid peer = to.process();
  std::string seen;
  CHECK(WaitUntil(
      [&] {
        auto reports = client->NetworkStats(from.process());
        if (!reports.ok()) return false;
        const std::vector<NetworkStats>& networks = (*reports)[0].networks;
        seen.clear();
        uint64_t fragments = 0;
        for (const NetworkStats& network : networks) {
          seen += network.name + " ";
          for (const NetworkPeerStats& stats : network.peers) {
            if (stats.peer == peer) fragments += stats.fragments_sent;
          }
        }
        return networks.size() == names.size() && fragments > 0;
      },
      seconds(10)));
  INFO("reported: " << seen);
  auto reports = REQUIRE_VALUE(client->NetworkStats(from.process()));
  for (size_t i = 0; i < names.size() && i < reports[0].networks.size(); ++i) {
    CHECK(reports[0].networks[i].name == names[i]);
    CHECK(!reports[0].networks[i].kind.empty());
  }
  CHECK_OK(sender->Shutdown());
  CHECK_OK(receiver->Shutdown());
}

}  // namespace
}  // namespace tocl::testing
