// The user behind a plaintext TCP connection on this machine, from the
// kernel's socket tables. A daemon without credentials listens on loopback
// only, so every TCP peer it has is a socket on this host, and
// /proc/net/tcp (tcp6) names the uid that owns each socket: the peer's end
// of the connection is the row whose local address is the peer's address.
#pragma once

#include <sys/types.h>

#include <string_view>

#include "tocl/status.h"

namespace tocl::directory {

// `peer` is grpc::ServerContext::peer() of a TCP call: "ipv4:127.0.0.1:41234",
// "ipv6:[::1]:41234" (newer gRPC escapes the brackets: "%5B::1%5D").
// PermissionDenied when no established socket of this host has that address
// (a peer in another network namespace, or one that already closed), or
// when sockets of several users do: the uid is then unknown, and unknown is
// never taken for anyone.
Result<uid_t> LoopbackPeerUid(std::string_view peer);

}  // namespace tocl::directory
