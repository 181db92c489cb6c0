// tocl-multinet-peer: the tocl side of `tocl-bench multinet`, long messages
// between threads of two processes on two hosts, through the public API only.
//
//   tocl-multinet-peer recv BYTES WARMUP COUNT       (host 2) prints "gid h2.p1.t1", receives
//   tocl-multinet-peer send GID BYTES WARMUP COUNT   (host 1) prints "seconds S bytes B"
//
// Same protocol as tocl-multinet-raw: WARMUP messages of BYTES, acknowledged
// with a short message (tag kAck); the clock starts at the acknowledgement;
// COUNT messages, the last acknowledged again; the clock stops. The sender
// uses Send(from, to, tag, span) from one user buffer; the receiver
// RecvInto(self, span) into one user buffer. Which networks are used is the
// runtime's choice from $TOCL_NETWORKS (the bench sets "tcp:eth0" or
// "tcp:eth0,tcp:eth1"); the daemon is $TOCL_DAEMON, other hosts' daemons
// $TOCL_PEER_DAEMONS.
//
// WARMUP is at least 1 (its first message tells the receiver who sends).
//
// Exit codes: 0 success, 1 a tocl error (on stderr), 2 usage.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tocl/runtime.h"

namespace {

constexpr tocl::Tag kData = 1;
constexpr tocl::Tag kAck = 2;
// No single message or acknowledgement takes this long on any network the
// bench makes; a peer that waits longer has lost its partner.
constexpr auto kPatience = std::chrono::seconds(300);

int Fail(const char* what, const tocl::Status& status) {
  std::fprintf(stderr, "tocl-multinet-peer: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

uint64_t Number(const char* text) {
  return std::strtoull(text, nullptr, 10);
}

struct Peer {
  std::unique_ptr<tocl::Runtime> runtime;
  tocl::Gid self;
};

tocl::Result<Peer> Start(const char* name) {
  tocl::RuntimeOptions options;
  options.name = name;
  TOCL_ASSIGN_OR_RETURN(std::unique_ptr<tocl::Runtime> runtime,
                        tocl::Runtime::Start(std::move(options)));
  TOCL_ASSIGN_OR_RETURN(tocl::Gid self, runtime->EnrollThread("main"));
  return Peer{std::move(runtime), self};
}

int Receive(uint64_t bytes, uint64_t warmup, uint64_t count) {
  auto peer = Start("multinet-recv");
  if (!peer.ok()) return Fail("start", peer.status());
  std::printf("gid %s\n", peer->self.ToString().c_str());
  std::fflush(stdout);
  std::vector<std::byte> buffer(bytes);
  tocl::Gid sender;
  for (uint64_t phase = 0; phase < 2; ++phase) {
    for (uint64_t i = 0; i < (phase == 0 ? warmup : count); ++i) {
      auto got = peer->runtime->RecvIntoFor(peer->self, buffer, kPatience, sender, kData);
      if (!got.ok()) return Fail("receive", got.status());
      if (got->size != bytes) {
        std::fprintf(stderr, "tocl-multinet-peer: received %zu bytes, not %llu\n", got->size,
                     static_cast<unsigned long long>(bytes));
        return 1;
      }
      sender = got->source;  // then only from that thread
    }
    const std::byte ack{1};
    tocl::Status acked = peer->runtime->Send(peer->self, sender, kAck, std::span(&ack, 1));
    if (!acked.ok()) return Fail("acknowledge", acked);
  }
  tocl::Status down = peer->runtime->Shutdown();
  if (!down.ok()) return Fail("shutdown", down);
  return 0;
}

int SendTo(tocl::Gid receiver, uint64_t bytes, uint64_t warmup, uint64_t count) {
  auto peer = Start("multinet-send");
  if (!peer.ok()) return Fail("start", peer.status());
  std::vector<std::byte> buffer(bytes, std::byte{'x'});
  auto start = std::chrono::steady_clock::now();
  for (uint64_t phase = 0; phase < 2; ++phase) {
    for (uint64_t i = 0; i < (phase == 0 ? warmup : count); ++i) {
      tocl::Status sent = peer->runtime->Send(peer->self, receiver, kData, buffer);
      if (!sent.ok()) return Fail("send", sent);
    }
    auto ack = peer->runtime->RecvFor(peer->self, kPatience, receiver, kAck);
    if (!ack.ok()) return Fail("wait for the acknowledgement", ack.status());
    if (phase == 0) start = std::chrono::steady_clock::now();
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::printf("seconds %.9f bytes %llu\n", took.count(),
              static_cast<unsigned long long>(bytes * count));
  std::fflush(stdout);
  tocl::Status down = peer->runtime->Shutdown();
  if (!down.ok()) return Fail("shutdown", down);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "recv" && argc == 5) {
    uint64_t bytes = Number(argv[2]);
    // At least one warm-up message: it tells the receiver who the sender is.
    if (bytes > 0 && Number(argv[3]) > 0) return Receive(bytes, Number(argv[3]), Number(argv[4]));
  }
  if (command == "send" && argc == 6) {
    auto receiver = tocl::Gid::Parse(argv[2]);
    uint64_t bytes = Number(argv[3]);
    if (receiver.ok() && bytes > 0 && Number(argv[4]) > 0) {
      return SendTo(*receiver, bytes, Number(argv[4]), Number(argv[5]));
    }
  }
  std::fprintf(stderr,
               "usage: tocl-multinet-peer recv BYTES WARMUP COUNT | "
               "send GID BYTES WARMUP COUNT\n");
  return 2;
}
