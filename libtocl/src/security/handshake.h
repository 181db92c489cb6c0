// The data plane's challenge-response (issue #7 §1): before a connection
// carries anything, each side proves it holds the cluster secret, with a
// MAC over both sides' fresh nonces and both process Gids, so a proof is
// good for this one connection only (a recorded one cannot be replayed),
// and an outsider can neither connect nor pose as the peer.
//
//   connector                                 acceptor
//   hello: connector nonce  ------------------>
//                          <------------------  acceptor nonce, acceptor MAC
//   (checks the acceptor MAC)
//   proof: connector MAC    ------------------>  (checks it; then messages)
//
// The connector may send messages right after its proof (it has checked
// the acceptor already); the acceptor takes none before the proof. This
// file is the cryptography only; tcp (subsystem/tcp) and via's sockets
// provider carry the three messages in their own frames.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "security/cluster_key.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::security {

using Nonce = std::array<std::byte, 32>;
using Mac = std::array<std::byte, 32>;

// 32 bytes from getrandom(2).
Result<Nonce> NewNonce();

// Whether two MACs are equal, in time that does not depend on where they
// differ.
bool SameMac(const Mac& a, const Mac& b);

// Computes one MAC and throws it away: OpenSSL loads its configuration and
// algorithms on the first one (about 2 ms, once per process), which would
// otherwise happen inside the first connection's handshake, while its first
// message waits. Any thread; cheap after the first call.
void PrepareMacs();

class ConnectorHandshake {
 public:
  // `transport` names the protocol ("tcp", "via"), so a proof made for one
  // is no good for the other.
  static Result<ConnectorHandshake> Start(const ClusterKey& key, std::string_view transport,
                                          Gid self, Gid acceptor);
  const Nonce& nonce() const { return nonce_; }
  // Checks the acceptor's answer; the proof to send back.
  // PermissionDenied when the acceptor does not hold our secret.
  Result<Mac> Answer(const Nonce& acceptor_nonce, const Mac& acceptor_mac) const;

 private:
  ConnectorHandshake(const ClusterKey& key, std::string_view transport, Gid self, Gid acceptor,
                     const Nonce& nonce);
  ClusterKey key_;
  std::string_view transport_;
  Gid self_;
  Gid acceptor_;
  Nonce nonce_;
};

class AcceptorHandshake {
 public:
  // On the connector's hello.
  static Result<AcceptorHandshake> Start(const ClusterKey& key, std::string_view transport,
                                         Gid self, Gid connector, const Nonce& connector_nonce);
  const Nonce& nonce() const { return nonce_; }
  const Mac& mac() const { return mac_; }
  // Checks the connector's proof. PermissionDenied when it does not hold
  // our secret.
  Status CheckProof(const Mac& proof) const;

 private:
  AcceptorHandshake() = default;
  std::string_view transport_;
  Mac expected_proof_{};
  Nonce nonce_{};
  Mac mac_{};
};

}  // namespace tocl::security
