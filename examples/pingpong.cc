// Ping-pong between threads of two processes.
//
//   ./pingpong              # terminal 1: prints "pong thread h1.p2.t1", then echoes
//   ./pingpong h1.p2.t1 5   # terminal 2: sends 5 pings to that thread, prints each round trip
//
// Both processes enroll with the local toclsd ($TOCL_DAEMON, else
// /var/lib/tocl/toclsd.sock) when they start their tocl::Runtime. A thread
// that enrolls gets a global id (host.process.thread) that any thread of
// the cluster can send to, on this host or another.
#include <tocl/runtime.h>
#include <tocl/version.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace {

// Tags say what a message is; a receiver can wait for one tag only.
constexpr tocl::Tag kPing = 1;
constexpr tocl::Tag kPong = 2;
constexpr tocl::Tag kBye = 3;

int Fail(const tocl::Status& status) {
  std::fprintf(stderr, "pingpong: %s\n", status.ToString().c_str());
  return 1;
}

// Echoes every ping back to its sender until one says bye.
int Pong(tocl::Runtime& runtime) {
  tocl::Result<tocl::Gid> me = runtime.EnrollThread("pong");
  if (!me.ok()) return Fail(me.status());
  std::printf("pong thread %s\n", me->ToString().c_str());
  std::fflush(stdout);  // the pinger's user (or a script) waits for this line

  for (;;) {
    // Any sender, any tag.
    tocl::Result<tocl::Buffer> message = runtime.Recv(*me);
    if (!message.ok()) return Fail(message.status());
    if (message->tag() == kBye) return 0;
    // A received message is a buffer that can be sent on as it is: no copy.
    const tocl::Gid sender = message->source();
    tocl::Status sent = runtime.Send(*me, sender, kPong, std::move(*message));
    if (!sent.ok()) return Fail(sent);
  }
}

int Ping(tocl::Runtime& runtime, std::string_view peer_text, int count) {
  tocl::Result<tocl::Gid> peer = tocl::Gid::Parse(peer_text);
  if (!peer.ok()) return Fail(peer.status());
  tocl::Result<tocl::Gid> me = runtime.EnrollThread("ping");
  if (!me.ok()) return Fail(me.status());

  for (int i = 1; i <= count; ++i) {
    const std::string text = "ping " + std::to_string(i);
    const auto start = std::chrono::steady_clock::now();
    // Sends from any memory: copied once into a registered buffer.
    tocl::Status sent = runtime.Send(*me, *peer, kPing, std::as_bytes(std::span(text)));
    if (!sent.ok()) return Fail(sent);
    // Only a pong from that thread; give up after 5 s.
    tocl::Result<tocl::Buffer> reply = runtime.RecvFor(*me, std::chrono::seconds(5), *peer, kPong);
    if (!reply.ok()) return Fail(reply.status());
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    const std::string_view echoed(reinterpret_cast<const char*>(reply->data()), reply->size());
    std::printf("%.*s came back from %s in %lld us\n", static_cast<int>(echoed.size()),
                echoed.data(), peer->ToString().c_str(), static_cast<long long>(micros));
  }
  tocl::Status bye = runtime.Send(*me, *peer, kBye, std::span<const std::byte>());
  if (!bye.ok()) return Fail(bye);
  std::printf("%d round trips\n", count);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view first = argc > 1 ? argv[1] : "";
  if (first == "--version") {
    std::printf("pingpong (tocl %s)\n", TOCL_VERSION_STRING);
    return 0;
  }
  // Enrolls this process with the daemon and opens the networks.
  tocl::Result<std::unique_ptr<tocl::Runtime>> runtime = tocl::Runtime::Start({.name = "pingpong"});
  if (!runtime.ok()) return Fail(runtime.status());

  const int result =
      first.empty() ? Pong(**runtime) : Ping(**runtime, first, argc > 2 ? std::atoi(argv[2]) : 5);
  // Sends what is still queued, then leaves the directory.
  (void)(*runtime)->Shutdown();
  return result;
}
