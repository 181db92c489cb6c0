// The data plane's challenge-response (security/handshake.h) and the
// cluster secret's encodings.
#include "security/handshake.h"

#include <catch2/catch.hpp>

#include "security/cluster_key.h"

namespace tocl::security {
namespace {

const Gid kConnector = Gid::Process(1, 2);
const Gid kAcceptor = Gid::Process(3, 4);

ClusterKey Key(char fill) {
  return ClusterKey::FromHex(std::string(64, fill)).value();
}

// Runs the three steps; the status of the first check that fails.
Status Run(const ClusterKey& connector_key, const ClusterKey& acceptor_key,
           std::string_view connector_transport = "tcp",
           std::string_view acceptor_transport = "tcp") {
  auto connector =
      ConnectorHandshake::Start(connector_key, connector_transport, kConnector, kAcceptor);
  REQUIRE(connector.ok());
  auto acceptor = AcceptorHandshake::Start(acceptor_key, acceptor_transport, kAcceptor, kConnector,
                                           connector->nonce());
  REQUIRE(acceptor.ok());
  auto proof = connector->Answer(acceptor->nonce(), acceptor->mac());
  if (!proof.ok()) return proof.status();
  return acceptor->CheckProof(*proof);
}

TEST_CASE("both sides with the same secret authenticate each other", "[security]") {
  CHECK(Run(Key('a'), Key('a')).ok());
  // Without credentials both sides have none: they still agree.
  CHECK(Run(ClusterKey(), ClusterKey()).ok());
}

TEST_CASE("a side without the secret fails the handshake with a clear error", "[security]") {
  const Status wrong_acceptor = Run(Key('a'), Key('b'));
  CHECK(wrong_acceptor.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(wrong_acceptor.message(), Catch::Contains("peer that accepted") &&
                                           Catch::Contains("does not hold this cluster's secret"));
  CHECK(Run(Key('a'), ClusterKey()).code() == StatusCode::kPermissionDenied);
  CHECK(Run(ClusterKey(), Key('a')).code() == StatusCode::kPermissionDenied);
  // A MAC made for via is no good on tcp.
  CHECK(Run(Key('a'), Key('a'), "via", "tcp").code() == StatusCode::kPermissionDenied);
}

TEST_CASE("a connector that forges or replays a proof is refused", "[security]") {
  const ClusterKey key = Key('c');
  auto connector = ConnectorHandshake::Start(key, "tcp", kConnector, kAcceptor);
  REQUIRE(connector.ok());
  auto acceptor = AcceptorHandshake::Start(key, "tcp", kAcceptor, kConnector, connector->nonce());
  REQUIRE(acceptor.ok());
  auto proof = connector->Answer(acceptor->nonce(), acceptor->mac());
  REQUIRE(proof.ok());
  CHECK(acceptor->CheckProof(*proof).ok());

  // The proof recorded from that connection, replayed on another one (the
  // same hello, a fresh acceptor nonce): refused.
  auto second = AcceptorHandshake::Start(key, "tcp", kAcceptor, kConnector, connector->nonce());
  REQUIRE(second.ok());
  CHECK(second->nonce() != acceptor->nonce());
  const Status replayed = second->CheckProof(*proof);
  CHECK(replayed.code() == StatusCode::kPermissionDenied);
  CHECK_THAT(replayed.message(), Catch::Contains("peer that connected"));

  // A flipped bit, and the acceptor's own MAC sent back, are refused too.
  Mac flipped = *proof;
  flipped[17] ^= std::byte{1};
  CHECK_FALSE(acceptor->CheckProof(flipped).ok());
  CHECK_FALSE(acceptor->CheckProof(acceptor->mac()).ok());

  // A proof made for another acceptor process does not pass here.
  auto elsewhere = ConnectorHandshake::Start(key, "tcp", kConnector, Gid::Process(3, 5));
  REQUIRE(elsewhere.ok());
  auto third = AcceptorHandshake::Start(key, "tcp", kAcceptor, kConnector, elsewhere->nonce());
  REQUIRE(third.ok());
  CHECK(elsewhere->Answer(third->nonce(), third->mac()).status().code() ==
        StatusCode::kPermissionDenied);
}

TEST_CASE("nonces are fresh", "[security]") {
  auto a = NewNonce();
  auto b = NewNonce();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a != *b);
}

TEST_CASE("a cluster secret reads from 64 hex digits and nothing else", "[security]") {
  auto key =
      ClusterKey::FromHex("  00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n");
  REQUIRE(key.ok());
  CHECK(key->Hex() == "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  CHECK(key->bytes().size() == 32);
  CHECK_FALSE(key->none());

  CHECK_THAT(ClusterKey::FromHex("abc").status().message(), Catch::Contains("64 hex digits"));
  CHECK_THAT(ClusterKey::FromHex(std::string(63, 'a') + "g").status().message(),
             Catch::Contains("character 64"));
  auto random = ClusterKey::Random();
  REQUIRE(random.ok());
  CHECK(random->Hex().size() == 64);
  CHECK(ClusterKey::FromHex(random->Hex())->Hex() == random->Hex());

  CHECK(ClusterKey::FromBytes({}).value().none());
  CHECK(ClusterKey::FromBytes(random->bytes()).value().Hex() == random->Hex());
  std::array<std::byte, 5> short_bytes{};
  CHECK(ClusterKey::FromBytes(short_bytes).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tocl::security
