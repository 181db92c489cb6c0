#include "security/handshake.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <string>

#include "security/random_bytes.h"

namespace tocl::security {

namespace {

enum class Side : uint8_t { kConnector = 1, kAcceptor = 2 };

constexpr std::string_view kDomain = "tocl data plane handshake v1";

void AppendGid(std::string& data, Gid gid) {
  const uint64_t raw = gid.raw();
  for (int shift = 56; shift >= 0; shift -= 8) data += static_cast<char>((raw >> shift) & 0xff);
}

// HMAC-SHA256 over fixed-size fields after two length-prefixed labels, so
// that no two different inputs serialise alike.
Mac ComputeMac(const ClusterKey& key, std::string_view transport, Side side,
               const Nonce& connector_nonce, const Nonce& acceptor_nonce, Gid connector,
               Gid acceptor) {
  std::string data;
  data.reserve(128);
  data += static_cast<char>(kDomain.size());
  data += kDomain;
  data += static_cast<char>(transport.size());
  data += transport;
  data += static_cast<char>(side);
  data.append(reinterpret_cast<const char*>(connector_nonce.data()), connector_nonce.size());
  data.append(reinterpret_cast<const char*>(acceptor_nonce.data()), acceptor_nonce.size());
  AppendGid(data, connector);
  AppendGid(data, acceptor);

  // HMAC with an empty key is well defined (the key is zero-padded), but
  // OpenSSL wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const auto key_bytes = key.bytes();
  const void* key_data = key_bytes.empty() ? static_cast<const void*>(&kNoKey) : key_bytes.data();
  Mac mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key_data, static_cast<int>(key_bytes.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(),
       reinterpret_cast<unsigned char*>(mac.data()), &length);
  return mac;
}

Status NotOurs(std::string_view transport, std::string_view who) {
  return PermissionDenied(fmt::format(
      "{} handshake: the {} does not hold this cluster's secret (a stranger, a process of "
      "another cluster, or one side started without credentials)",
      transport, who));
}

}  // namespace

Result<Nonce> NewNonce() {
  Nonce nonce;
  TOCL_RETURN_IF_ERROR(FillRandom(nonce));
  return nonce;
}

bool SameMac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void PrepareMacs() {
  (void)ComputeMac(ClusterKey(), "warm-up", Side::kAcceptor, Nonce{}, Nonce{}, Gid(), Gid());
}

ConnectorHandshake::ConnectorHandshake(const ClusterKey& key, std::string_view transport, Gid self,
                                       Gid acceptor, const Nonce& nonce)
    : key_(key), transport_(transport), self_(self), acceptor_(acceptor), nonce_(nonce) {}

Result<ConnectorHandshake> ConnectorHandshake::Start(const ClusterKey& key,
                                                     std::string_view transport, Gid self,
                                                     Gid acceptor) {
  TOCL_ASSIGN_OR_RETURN(Nonce nonce, NewNonce());
  return ConnectorHandshake(key, transport, self, acceptor, nonce);
}

Result<Mac> ConnectorHandshake::Answer(const Nonce& acceptor_nonce, const Mac& acceptor_mac) const {
  const Mac expected =
      ComputeMac(key_, transport_, Side::kAcceptor, nonce_, acceptor_nonce, self_, acceptor_);
  if (!SameMac(expected, acceptor_mac)) return NotOurs(transport_, "peer that accepted");
  return ComputeMac(key_, transport_, Side::kConnector, nonce_, acceptor_nonce, self_, acceptor_);
}

Result<AcceptorHandshake> AcceptorHandshake::Start(const ClusterKey& key,
                                                   std::string_view transport, Gid self,
                                                   Gid connector, const Nonce& connector_nonce) {
  AcceptorHandshake handshake;
  TOCL_ASSIGN_OR_RETURN(handshake.nonce_, NewNonce());
  handshake.mac_ = ComputeMac(key, transport, Side::kAcceptor, connector_nonce, handshake.nonce_,
                              connector, self);
  handshake.expected_proof_ = ComputeMac(key, transport, Side::kConnector, connector_nonce,
                                         handshake.nonce_, connector, self);
  handshake.transport_ = transport;
  return handshake;
}

Status AcceptorHandshake::CheckProof(const Mac& proof) const {
  if (!SameMac(expected_proof_, proof)) return NotOurs(transport_, "peer that connected");
  return Status::Ok();
}

}  // namespace tocl::security
