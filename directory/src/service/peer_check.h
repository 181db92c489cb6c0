// Who may spawn and kill processes (and read their logs) through this
// daemon:
//   - callers on this host's unix socket (its file permissions decide who
//     they are);
//   - with credentials, any TCP peer that showed a certificate of the
//     cluster's CA (a daemon forwarding a call, or a tool with this
//     cluster's credentials): the TLS listener lets no other TCP peer in;
//   - without credentials (everything on loopback), a TCP peer whose IP is
//     the IP of a member's address: the cluster's daemons.
// Everyone else is refused.
#pragma once

#include <span>
#include <string_view>

#include "store/store.h"
#include "tocl/status.h"

namespace tocl::directory {

// `peer` is grpc::ServerContext::peer(): "unix:...", "ipv4:10.0.0.2:41234",
// "ipv6:[fe80::1]:41234"; `authenticated`, whether it showed a certificate
// the cluster's CA verified (grpc_tls::PeerAuthenticated). PermissionDenied
// naming `what` unless allowed.
Status CheckTrustedPeer(std::string_view peer, bool authenticated,
                        std::span<const MemberRow> members, std::string_view what);

// Whether the IP of `peer` (a gRPC peer string) is the IP of `address`
// ("10.0.0.2:7390", "[fe80::1]:7390", optionally "ipv4:"/"ipv6:"-prefixed).
// Only literal IPs are compared: member addresses are what daemons
// announce, not host names.
bool SameIp(std::string_view peer, std::string_view address);

}  // namespace tocl::directory
