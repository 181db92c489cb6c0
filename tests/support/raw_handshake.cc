#include "raw_handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/posix.h"

namespace tocl::testing {

namespace {

std::vector<std::byte> Frame(wire::FrameKind kind, Gid from, Gid to,
                             std::span<const std::byte> payload) {
  wire::Header header;
  header.kind = kind;
  header.length = static_cast<uint32_t>(payload.size());
  header.source = from.raw();
  header.destination = to.raw();
  std::vector<std::byte> bytes(wire::kHeaderBytes);
  wire::EncodeHeader(header, bytes.data());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

}  // namespace

RawConnector::RawConnector(Gid from, Gid to, const security::ClusterKey& key)
    : from_(from),
      to_(to),
      handshake_(security::ConnectorHandshake::Start(key, "tcp", from, to).value()) {}

std::vector<std::byte> RawConnector::Hello() const {
  return Frame(wire::FrameKind::kHello, from_, to_, handshake_.nonce());
}

Result<std::vector<std::byte>> RawConnector::Proof(std::span<const std::byte> answer,
                                                   bool* acceptor_ok) const {
  if (answer.size() != kAnswerBytes) {
    return InvalidArgument("a handshake answer is " + std::to_string(kAnswerBytes) + " bytes");
  }
  TOCL_ASSIGN_OR_RETURN(wire::Header header,
                        wire::DecodeHeader(answer, {.max_payload = kAnswerBytes}));
  if (header.kind != wire::FrameKind::kAuth) return InvalidArgument("not a handshake answer");
  security::Nonce nonce;
  security::Mac mac;
  std::memcpy(nonce.data(), answer.data() + wire::kHeaderBytes, nonce.size());
  std::memcpy(mac.data(), answer.data() + wire::kHeaderBytes + nonce.size(), mac.size());
  auto proof = handshake_.Answer(nonce, mac);
  if (acceptor_ok != nullptr) *acceptor_ok = proof.ok();
  const security::Mac zeros{};
  std::vector<std::byte> frames =
      Frame(wire::FrameKind::kProof, from_, to_, proof.ok() ? *proof : zeros);
  std::byte resume[wire::kHeaderBytes];
  wire::EncodeHeader(wire::StreamHeader(wire::FrameKind::kResume, from_, to_, kStream, 0), resume);
  frames.insert(frames.end(), std::begin(resume), std::end(resume));
  return frames;
}

Status RawTcpHandshake(int fd, Gid from, Gid to, const security::ClusterKey& key) {
  RawConnector connector(from, to, key);
  const std::vector<std::byte> hello = connector.Hello();
  if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    return ErrnoStatus("send the hello", errno);
  }
  std::vector<std::byte> answer(RawConnector::kAnswerBytes);
  size_t filled = 0;
  while (filled < answer.size()) {
    pollfd entry{fd, POLLIN, 0};
    if (poll(&entry, 1, 10'000) != 1) return DeadlineExceeded("no handshake answer in 10 s");
    const ssize_t n = recv(fd, answer.data() + filled, answer.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("the acceptor closed before its handshake answer");
    filled += static_cast<size_t>(n);
  }
  bool acceptor_ok = false;
  TOCL_ASSIGN_OR_RETURN(std::vector<std::byte> proof, connector.Proof(answer, &acceptor_ok));
  if (send(fd, proof.data(), proof.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(proof.size())) {
    return ErrnoStatus("send the proof", errno);
  }
  if (!acceptor_ok) return PermissionDenied("the acceptor does not hold our key");
  return Status::Ok();
}

}  // namespace tocl::testing
