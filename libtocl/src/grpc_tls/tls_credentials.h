// gRPC's mutual TLS, configured from a host's cluster credentials
// (security/credentials.h), for the three kinds of connection tocl makes
// over TCP: a daemon's listener, a daemon's channels to other daemons, and
// tools reaching a remote daemon (DirectoryClient).
//
//   grpc::ChannelArguments args;
//   SetServerNameOverride(args);
//   auto channel = grpc::CreateCustomChannel("10.0.0.2:7390", ChannelCredentials(creds), args);
//
// Both sides present a certificate of the cluster CA and accept only one:
// the server requires and verifies the client's, the client checks the
// server's against the CA and the name every cluster certificate carries
// (kTlsServerName), not against the address it dialled, so that daemons
// reached by IP (join lists, the directory's member addresses) need no
// certificate naming that IP.
//
// Internal to tocl (not a public header); the daemon, directory_client and
// the tools share it so that TLS is set up in one place.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "security/credentials.h"

namespace tocl::grpc_tls {

// The client half: trusts ca.pem only and presents cert.pem with key.pem.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const security::Credentials& credentials);

// Makes a TLS channel check the server's certificate for kTlsServerName.
// Every channel made with ChannelCredentials needs it.
void SetServerNameOverride(grpc::ChannelArguments& args);

// The server half: presents cert.pem, and requires every client to present
// a certificate ca.pem verifies (a client without one, or with another
// cluster's, fails the handshake before any call).
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const security::Credentials& credentials);

// Whether the peer of a call showed a certificate the CA verified (false on
// the unix socket and on plaintext TCP).
bool PeerAuthenticated(const grpc::ServerContext& context);

// Whether gRPC's message for a failed connection (UNAVAILABLE, "failed to
// connect to all addresses; last error: ...") says the TCP connection was
// made and the TLS handshake failed: a certificate of another cluster, or
// TLS on one side only (a TLS server closes a plaintext client's
// connection). Waiting longer does not help then, unlike for a refused
// connection.
bool HandshakeFailed(std::string_view grpc_message);

}  // namespace tocl::grpc_tls
