// The connector's side of the data plane's tcp handshake, as bytes, for
// tests that write frames by hand to a real tcp subsystem (the unit tests,
// which pump the acceptor themselves, and the integration tests, which talk
// to a real process): the hello to send, then the proof frame (and the
// stream's resume) for the answer read back.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "security/cluster_key.h"
#include "security/handshake.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::testing {

class RawConnector {
 public:
  static constexpr size_t kAnswerBytes =
      wire::kHeaderBytes + wire::kHandshakeNonceBytes + wire::kHandshakeMacBytes;

  RawConnector(Gid from, Gid to, const security::ClusterKey& key);

  // The hello frame: header and our nonce.
  std::vector<std::byte> Hello() const;
  // The stream every raw connection resumes (from frame 0).
  static constexpr uint64_t kStream = 1;

  // The proof frame for the acceptor's answer (kAnswerBytes), followed by
  // our kResume (stream kStream from frame 0: the acceptor answers it with
  // a kReceived, which raw tests may leave unread). When the acceptor's MAC
  // is wrong, `acceptor_ok` says so and the proof is zeros (what a stranger
  // could send). InvalidArgument for an answer that is not a handshake
  // answer.
  Result<std::vector<std::byte>> Proof(std::span<const std::byte> answer,
                                       bool* acceptor_ok = nullptr) const;

 private:
  Gid from_;
  Gid to_;
  security::ConnectorHandshake handshake_;
};

// Blocking: connects `fd` (a connected blocking socket) through the whole
// handshake. Returns the acceptor's verdict as a Status (PermissionDenied
// when its MAC was wrong; the zero proof is still sent).
Status RawTcpHandshake(int fd, Gid from, Gid to, const security::ClusterKey& key);

}  // namespace tocl::testing
