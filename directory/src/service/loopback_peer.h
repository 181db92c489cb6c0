// The user behind a plaintext TCP connection on this machine, from the
// kernel's socket tables. A daemon without credentials listens on loopback
// only, so every TCP peer it has is a socket on this host, and
// /proc/net/tcp (tcp6) names the uid that owns each socket.
//
// The peer's socket is the row of the whole connection: its local address
// is the peer's address and its remote address one the daemon listens on.
// The local address alone names no connection: a port connect(2) chose is
// shared by sockets to other destinations, and SO_REUSEADDR lets any user
// bind a port another user's socket has. So a client that half-closes its
// end (its row leaves ESTABLISHED) must not leave the choice to a root
// socket on the same port. Rows without an inode (TIME_WAIT, a socket its
// process has closed) belong to no one: their uid column is not an owner.
//
// Thread-safe: const, over the tables the kernel gives at each read.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <istream>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tocl/status.h"

namespace tocl::directory {

// An IP as 16 bytes (IPv4 as v4-mapped IPv6), and a port.
struct TcpEndpoint {
  std::array<unsigned char, 16> ip{};
  uint16_t port = 0;

  bool operator==(const TcpEndpoint&) const = default;
  bool v4_mapped() const;
  // 0.0.0.0 or :: (a wildcard listener: any address of the port).
  bool unspecified() const;
};

// grpc::ServerContext::peer() of a TCP call: "ipv4:127.0.0.1:41234",
// "ipv6:[::1]:41234" (newer gRPC escapes the brackets: "%5B::1%5D").
std::optional<TcpEndpoint> ParseGrpcPeer(std::string_view peer);

// One socket of /proc/net/tcp or /proc/net/tcp6.
struct TcpSocketRow {
  TcpEndpoint local;
  TcpEndpoint remote;
  int state = 0;  // the kernel's TCP state (1 ESTABLISHED, 6 TIME_WAIT, 10 LISTEN)
  uid_t uid = 0;
  uint64_t inode = 0;  // 0: no open socket (TIME_WAIT, orphaned)
};
// The rows of such a table (its text, header first); unreadable rows are
// skipped.
std::vector<TcpSocketRow> ParseTcpTable(std::istream& table);

class LoopbackPeers {
 public:
  // A daemon without a TCP listener: no peer is known.
  LoopbackPeers() = default;
  // The addresses the daemon listens on (port included); an unspecified
  // address stands for every address of its port.
  explicit LoopbackPeers(std::vector<TcpEndpoint> daemon) : daemon_(std::move(daemon)) {}
  // For the daemon's listen address "HOST:PORT" (the real port): HOST is
  // resolved as the listener's was (getaddrinfo). InvalidArgument when it
  // cannot be.
  static Result<LoopbackPeers> ForListenAddress(std::string_view listen);

  // The uid owning the peer's socket of the connection `peer` made to this
  // daemon, from the kernel's tables now. PermissionDenied when no open
  // socket of this host is that connection's other end (a peer in another
  // network namespace, one that already closed its socket) or several are:
  // the uid is then unknown, and unknown is never taken for anyone.
  Result<uid_t> OwnerOf(std::string_view peer) const;
  // The same over given rows (both tables').
  Result<uid_t> OwnerIn(std::string_view peer, std::span<const TcpSocketRow> rows) const;

 private:
  bool IsDaemon(const TcpEndpoint& address) const;

  std::vector<TcpEndpoint> daemon_;
};

}  // namespace tocl::directory
