#include "service/loopback_peer.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/posix.h"

namespace tocl::directory {
namespace {

constexpr uint16_t kDaemonPort = 7390;
constexpr int kEstablished = 1;
constexpr int kFinWait2 = 5;
constexpr int kTimeWait = 6;
constexpr int kListen = 10;

const char* const kHeader =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n";

// An address as /proc/net/tcp (tcp6) prints it on this machine: each
// 32-bit word of the address as the number it is in memory, the port in
// hex.
std::string TableV4(const char* ip, uint16_t port) {
  in_addr address{};
  REQUIRE(::inet_pton(AF_INET, ip, &address) == 1);
  uint32_t word = 0;
  std::memcpy(&word, &address, 4);
  return fmt::format("{:08X}:{:04X}", word, port);
}
std::string TableV6(const char* ip, uint16_t port) {
  in6_addr address{};
  REQUIRE(::inet_pton(AF_INET6, ip, &address) == 1);
  std::string text;
  for (int i = 0; i < 4; ++i) {
    uint32_t word = 0;
    std::memcpy(&word, reinterpret_cast<const unsigned char*>(&address) + 4 * i, 4);
    text += fmt::format("{:08X}", word);
  }
  return fmt::format("{}:{:04X}", text, port);
}

std::string Row(int slot, const std::string& local, const std::string& remote, int state, uid_t uid,
                uint64_t inode) {
  return fmt::format(
      "{:4}: {} {} {:02X} 00000000:00000000 00:00000000 00000000 {:5}        0 {} 1 "
      "0000000000000000 20 4 30 10 -1\n",
      slot, local, remote, state, uid, inode);
}

std::vector<TcpSocketRow> Parse(const std::string& text) {
  std::istringstream table(text);
  return ParseTcpTable(table);
}

TcpEndpoint Endpoint(const std::string& grpc_peer) {
  std::optional<TcpEndpoint> endpoint = ParseGrpcPeer(grpc_peer);
  REQUIRE(endpoint.has_value());
  return *endpoint;
}

// The daemon listening on 127.0.0.1:7390 and [::1]:7390.
LoopbackPeers Daemon() {
  return LoopbackPeers({Endpoint("ipv4:127.0.0.1:7390"), Endpoint("ipv6:[::1]:7390")});
}

TEST_CASE("gRPC's TCP peers are read as addresses, IPv4 as v4-mapped IPv6", "[loopback]") {
  const TcpEndpoint v4 = Endpoint("ipv4:127.0.0.1:41234");
  CHECK(v4.port == 41234);
  CHECK(v4.v4_mapped());
  CHECK(v4 == Endpoint("ipv6:[::ffff:127.0.0.1]:41234"));
  const TcpEndpoint v6 = Endpoint("ipv6:[::1]:41234");
  CHECK_FALSE(v6.v4_mapped());
  CHECK(v6 == Endpoint("ipv6:%5B::1%5D:41234"));  // newer gRPC escapes the brackets
  CHECK(Endpoint("ipv6:[fe80::1%25eth0]:1") == Endpoint("ipv6:[fe80::1]:1"));  // zone dropped
  CHECK(Endpoint("ipv4:0.0.0.0:1").unspecified());
  CHECK(Endpoint("ipv6:[::]:1").unspecified());
  CHECK_FALSE(v4.unspecified());
  for (const char* bad :
       {"ipv4:127.0.0.1", "ipv4:127.0.0.1:", "ipv4:127.0.0.1:70000", "ipv4:127.0.0.1:80x",
        "ipv4:localhost:80", "ipv6:[::1:80", "unix:/x", "ipv6:%5B::1"}) {
    INFO(bad);
    CHECK_FALSE(ParseGrpcPeer(bad).has_value());
  }
}

TEST_CASE("the kernel's TCP tables are read row by row, malformed rows skipped", "[loopback]") {
  const std::string text =
      kHeader + Row(0, TableV4("127.0.0.1", kDaemonPort), TableV4("0.0.0.0", 0), kListen, 0, 100) +
      Row(1, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kEstablished, 1000,
          101) +
      "   2: 0100007F:ZZZZ 0100007F:1CDE 01 00000000:00000000 00:00000000 00000000  1000 0 7\n" +
      "   3: 0100007F:A012 0100007F:1CDE 01\n" +
      Row(4, TableV6("::1", 41235), TableV6("::1", kDaemonPort), kEstablished, 1001, 102) +
      Row(5, TableV6("::ffff:127.0.0.1", 41236), TableV6("::ffff:127.0.0.1", kDaemonPort),
          kTimeWait, 0, 0);
  const std::vector<TcpSocketRow> rows = Parse(text);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].local == Endpoint("ipv4:127.0.0.1:7390"));
  CHECK(rows[0].remote == Endpoint("ipv4:0.0.0.0:0"));
  CHECK(rows[0].state == kListen);
  CHECK(rows[1].local == Endpoint("ipv4:127.0.0.1:41234"));
  CHECK(rows[1].remote == Endpoint("ipv4:127.0.0.1:7390"));
  CHECK(rows[1].uid == 1000u);
  CHECK(rows[1].inode == 101u);
  CHECK(rows[2].local == Endpoint("ipv6:[::1]:41235"));
  CHECK(rows[2].remote == Endpoint("ipv6:[::1]:7390"));
  CHECK(rows[2].uid == 1001u);
  // A v4-mapped address in tcp6 is the same address as in tcp.
  CHECK(rows[3].local == Endpoint("ipv4:127.0.0.1:41236"));
  CHECK(rows[3].inode == 0u);
  CHECK(Parse("").empty());
  CHECK(Parse(kHeader).empty());
}

TEST_CASE("the owner of a loopback peer is the owner of its end of the connection to the daemon",
          "[loopback]") {
  const std::string peer = "ipv4:127.0.0.1:41234";
  const std::string text =
      kHeader + Row(0, TableV4("127.0.0.1", kDaemonPort), TableV4("0.0.0.0", 0), kListen, 0, 100) +
      // The daemon's own end: the peer's address is its remote, not its local.
      Row(1, TableV4("127.0.0.1", kDaemonPort), TableV4("127.0.0.1", 41234), kEstablished, 0, 101) +
      // The peer's end.
      Row(2, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kEstablished, 1000,
          102) +
      // The same local address, connected elsewhere (another destination
      // shares the port, or SO_REUSEADDR): not the connection.
      Row(3, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", 9999), kEstablished, 0, 103) +
      // An older connection of the same 4-tuple, closed: no socket, no owner.
      Row(4, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kTimeWait, 0, 0);
  const Result<uid_t> owner = Daemon().OwnerIn(peer, Parse(text));
  REQUIRE(owner.status().message() == "");
  CHECK(*owner == 1000u);

  // A peer that half-closed its end is still the connection's.
  const std::string half_closed =
      kHeader +
      Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kFinWait2, 1000, 102);
  CHECK(Daemon().OwnerIn(peer, Parse(half_closed)).value_or(0) == 1000u);

  // IPv6, and IPv4 to a dual-stack listener on [::].
  const std::string v6 =
      kHeader + Row(0, TableV6("::1", 41235), TableV6("::1", kDaemonPort), kEstablished, 1001, 104);
  CHECK(Daemon().OwnerIn("ipv6:[::1]:41235", Parse(v6)).value_or(0) == 1001u);
  const LoopbackPeers any({Endpoint("ipv6:[::]:7390")});
  CHECK(any.OwnerIn(peer, Parse(text)).value_or(0) == 1000u);
  CHECK(any.OwnerIn("ipv6:[::ffff:127.0.0.1]:41234", Parse(text)).value_or(0) == 1000u);
}

TEST_CASE("a peer with no socket connected to the daemon, or several, has no owner", "[loopback]") {
  const std::string peer = "ipv4:127.0.0.1:41234";
  const auto refused = [&](const LoopbackPeers& daemon, const std::string& text,
                           const std::string& why) {
    const Result<uid_t> owner = daemon.OwnerIn(peer, Parse(text));
    INFO(owner.status().ToString());
    CHECK(owner.status().code() == StatusCode::kPermissionDenied);
    CHECK_THAT(owner.status().message(), Catch::Contains(why));
  };
  // Zero: only sockets on the peer's port to elsewhere, and its closed one.
  refused(
      Daemon(),
      kHeader +
          Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", 9999), kEstablished, 0, 103) +
          Row(1, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kTimeWait, 0, 0),
      "is not an open socket of this host connected to this daemon");
  refused(Daemon(), kHeader, "is not an open socket");
  // Another port of the same address is not the daemon.
  refused(LoopbackPeers({Endpoint("ipv4:127.0.0.1:7391")}),
          kHeader + Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort),
                        kEstablished, 1000, 102),
          "is not an open socket");
  // A daemon without a TCP listener knows no peer.
  refused(LoopbackPeers(),
          kHeader + Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort),
                        kEstablished, 1000, 102),
          "is not an open socket");
  // Two: one network namespace never shows two open sockets of one
  // 4-tuple, so such tables are not believed: unknown, even when both
  // rows name one uid.
  refused(Daemon(),
          kHeader +
              Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kEstablished,
                  1000, 102) +
              Row(1, TableV6("::ffff:127.0.0.1", 41234), TableV6("::ffff:127.0.0.1", kDaemonPort),
                  kEstablished, 0, 105),
          "2 sockets of this host are the TCP peer");
  refused(Daemon(),
          kHeader +
              Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kEstablished,
                  1000, 102) +
              Row(1, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kEstablished,
                  1000, 106),
          "2 sockets");
  // A peer that is not an address.
  const Result<uid_t> unreadable = Daemon().OwnerIn("unix:/run/x", {});
  CHECK(unreadable.status().code() == StatusCode::kPermissionDenied);
}

TEST_CASE("the daemon's addresses come from its listen address, resolved as the listener's",
          "[loopback]") {
  const std::string text =
      kHeader + Row(0, TableV4("127.0.0.1", 41234), TableV4("127.0.0.1", kDaemonPort), kEstablished,
                    1000, 102);
  const std::vector<TcpSocketRow> rows = Parse(text);
  const Result<LoopbackPeers> v4 = LoopbackPeers::ForListenAddress("127.0.0.1:7390");
  REQUIRE(v4.ok());
  CHECK(v4->OwnerIn("ipv4:127.0.0.1:41234", rows).value_or(0) == 1000u);
  const Result<LoopbackPeers> other_port = LoopbackPeers::ForListenAddress("127.0.0.1:7391");
  REQUIRE(other_port.ok());
  CHECK_FALSE(other_port->OwnerIn("ipv4:127.0.0.1:41234", rows).ok());
  const Result<LoopbackPeers> v6 = LoopbackPeers::ForListenAddress("[::1]:7390");
  REQUIRE(v6.ok());
  CHECK_FALSE(v6->OwnerIn("ipv4:127.0.0.1:41234", rows).ok());
  // Every address of the port.
  const Result<LoopbackPeers> wildcard = LoopbackPeers::ForListenAddress("0.0.0.0:7390");
  REQUIRE(wildcard.ok());
  CHECK(wildcard->OwnerIn("ipv4:127.0.0.1:41234", rows).value_or(0) == 1000u);

  for (const char* bad : {"127.0.0.1", "127.0.0.1:port", "[::1:7390"}) {
    INFO(bad);
    CHECK(LoopbackPeers::ForListenAddress(bad).status().code() == StatusCode::kInvalidArgument);
  }
}

// A loopback TCP listener of this process and a connection to it.
struct LoopbackConnection {
  Fd listener;
  Fd client;
  Fd accepted;
  uint16_t listen_port = 0;
  uint16_t client_port = 0;
};

uint16_t PortOf(int fd, bool local) {
  sockaddr_in address{};
  socklen_t size = sizeof(address);
  sockaddr* raw = reinterpret_cast<sockaddr*>(&address);
  REQUIRE((local ? ::getsockname(fd, raw, &size) : ::getpeername(fd, raw, &size)) == 0);
  return ntohs(address.sin_port);
}

LoopbackConnection Connect() {
  LoopbackConnection connection;
  connection.listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(connection.listener.valid());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sockaddr* raw = reinterpret_cast<sockaddr*>(&address);
  REQUIRE(::bind(connection.listener.get(), raw, sizeof(address)) == 0);
  REQUIRE(::listen(connection.listener.get(), 1) == 0);
  connection.listen_port = PortOf(connection.listener.get(), true);
  address.sin_port = htons(connection.listen_port);
  connection.client = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(connection.client.get(), raw, sizeof(address)) == 0);
  connection.accepted = Fd(::accept4(connection.listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(connection.accepted.valid());
  connection.client_port = PortOf(connection.client.get(), true);
  return connection;
}

TEST_CASE("a real loopback connection's peer is owned by this process's user", "[loopback]") {
  const LoopbackConnection connection = Connect();
  const Result<LoopbackPeers> daemon =
      LoopbackPeers::ForListenAddress(fmt::format("127.0.0.1:{}", connection.listen_port));
  REQUIRE(daemon.ok());
  const std::string peer = fmt::format("ipv4:127.0.0.1:{}", connection.client_port);
  const Result<uid_t> owner = daemon->OwnerOf(peer);
  REQUIRE(owner.status().message() == "");
  CHECK(*owner == ::geteuid());
  // The daemon's own end is no peer of it.
  const Result<uid_t> own_end =
      daemon->OwnerOf(fmt::format("ipv4:127.0.0.1:{}", connection.listen_port));
  CHECK(own_end.status().code() == StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace tocl::directory
