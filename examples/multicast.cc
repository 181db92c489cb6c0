// Multicast: one sender gives every thread a query matches the same table
// (tocl/multicast.h). Its message goes once to each other host that has
// listeners and is fanned out there; each listener gets it in order with
// the sender's other messages to it.
//
//   ./multicast listen 3      # 3 threads with role=listener; each prints what it gets
//   ./multicast send 3        # waits for 3 listeners, then: hello (Send), the table
//                             # (Multicast, 1 MiB), bye (Multicast); prints each outcome
//
// The processes enroll with the local toclsd ($TOCL_DAEMON, else
// /var/lib/tocl/toclsd.sock); in a cluster the listeners may run on any
// host.
#include <tocl/multicast.h>
#include <tocl/runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr tocl::Tag kTag = 1;
constexpr std::string_view kListeners = "kind=thread and role=listener";

int Fail(const char* what, const tocl::Status& status) {
  std::fprintf(stderr, "multicast: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

std::span<const std::byte> Text(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// One listener: three messages from the sender, printed in the order they
// come (hello, the table, bye: the order they were sent).
void Listen(tocl::Runtime& runtime, int index) {
  tocl::Result<tocl::Gid> me =
      runtime.EnrollThread("listener-" + std::to_string(index), {{"role", "listener"}});
  if (!me.ok()) {
    Fail("enroll", me.status());
    return;
  }
  for (int n = 0; n < 3; ++n) {
    tocl::Result<tocl::Buffer> got = runtime.RecvFor(*me, std::chrono::minutes(1));
    if (!got.ok()) {
      Fail("receive", got.status());
      return;
    }
    const std::string what =
        got->size() < 100 ? std::string(reinterpret_cast<const char*>(got->data()), got->size())
                          : std::to_string(got->size()) + " bytes";
    std::printf("%s: %s (from %s)\n", me->ToString().c_str(), what.c_str(),
                got->source().ToString().c_str());
    std::fflush(stdout);
  }
}

int Send(tocl::Runtime& runtime, size_t listeners) {
  tocl::Result<tocl::Gid> me = runtime.EnrollThread("sender");
  if (!me.ok()) return Fail("enroll", me.status());
  tocl::Result<std::vector<tocl::Entity>> found =
      runtime.WaitForQuery(kListeners, listeners, std::chrono::minutes(1));
  if (!found.ok()) return Fail("waiting for listeners", found.status());
  for (const tocl::Entity& listener : *found) {
    if (tocl::Status sent = runtime.Send(*me, listener.gid, kTag, Text("hello")); !sent.ok()) {
      return Fail("send", sent);
    }
  }
  // The table goes to whoever matches now: one copy per host, not per
  // listener; each gets it after its hello.
  std::vector<uint32_t> table(256 * 1024);
  std::iota(table.begin(), table.end(), 0u);
  tocl::Result<tocl::MulticastResult> sent =
      runtime.Multicast(*me, kListeners, kTag, std::as_bytes(std::span(table)));
  if (!sent.ok()) return Fail("multicast", sent.status());
  for (const tocl::MulticastOutcome& outcome : sent->receivers) {
    std::printf("%s: %s (carried by %s)\n", outcome.receiver.ToString().c_str(),
                outcome.status.ToString().c_str(), outcome.carried_by.ToString().c_str());
  }
  std::printf("the table: %zu of %zu delivered, %zu copies sent\n", sent->delivered(),
              sent->receivers.size(), sent->copies_sent);
  // A list works as well as a query.
  std::vector<tocl::Gid> to;
  for (const tocl::Entity& listener : *found) to.push_back(listener.gid);
  sent = runtime.Multicast(*me, to, kTag, Text("bye"));
  if (!sent.ok()) return Fail("multicast", sent.status());
  std::printf("bye: %zu of %zu delivered\n", sent->delivered(), sent->receivers.size());
  return sent->all_delivered() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int count = argc > 2 ? std::atoi(argv[2]) : 0;
  if ((mode != "listen" && mode != "send") || count <= 0) {
    std::fprintf(stderr, "usage: multicast listen N | multicast send N\n");
    return 2;
  }
  tocl::Result<std::unique_ptr<tocl::Runtime>> started =
      tocl::Runtime::Start({.name = "multicast-" + mode});
  if (!started.ok()) return Fail("start", started.status());
  tocl::Runtime& runtime = **started;
  if (mode == "send") return Send(runtime, static_cast<size_t>(count));
  std::vector<std::thread> listeners;
  for (int i = 0; i < count; ++i) listeners.emplace_back([&, i] { Listen(runtime, i); });
  for (std::thread& listener : listeners) listener.join();
  return 0;
}
