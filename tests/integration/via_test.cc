// The via network between real processes (issue #6): the VI pool a busy
// 64-thread process ends up with, and peers that die mid-stream. The
// conformance cases (ping-pong, streams, every size, back-pressure, pool
// cap, sent before exit) run on via in messaging_traffic_test.cc and
// messaging_flow_test.cc with the shm and tcp ones.
#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "child_process.h"
#include "messaging_payload.h"
#include "messaging_support.h"
#include "status_assertions.h"
#include "test_daemon.h"
#include "tocl/network_stats.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint32_t kClasses = 9;  // 256 B .. 64 KiB: the default short maximum

const NetworkStats* ViaNetwork(const std::vector<NetworkStats>& networks) {
  for (const NetworkStats& network : networks) {
    if (network.kind == "via") return &network;
  }
  return nullptr;
}

// Receives on every thread of `threads` until `total` messages arrived;
// false on a timeout or a bad message.
bool ReceiveAll(Runtime& runtime, const std::vector<Gid>& threads, uint64_t total, seconds timeout,
                std::string* problem) {
  std::atomic<uint64_t> received{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> receivers;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (Gid self : threads) {
    receivers.emplace_back([&, self] {
      while (received.load() < total && !failed.load() &&
             std::chrono::steady_clock::now() < deadline) {
        auto message = runtime.RecvFor(self, milliseconds(50));
        if (!message.ok()) continue;
        if (!CheckPayload(message->span(), message->source(), self).empty()) failed.store(true);
        received.fetch_add(1);
      }
    });
  }
  for (auto& receiver : receivers) receiver.join();
  if (failed.load()) *problem = "a message arrived damaged";
  if (received.load() != total) {
    *problem += fmt::format(" received {} of {}", received.load(), total);
  }
  return problem->empty();
}

TEST_CASE("64 threads per process use at most one VI per peer and size class",
          "[integration][msg][via]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "via-receiver", "via"));
  std::vector<Gid> threads;
  for (int i = 0; i < 64; ++i) threads.push_back(REQUIRE_VALUE(runtime->EnrollThread("r")));
  constexpr uint64_t kPerSender = 64 * 40;
  std::vector<MsgWorker> senders;
  for (const char* name : {"via-source-1", "via-source-2"}) {
    senders.push_back(REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("source", name)
                                                                 .Subsystems("via")
                                                                 .Threads(64)
                                                                 .To(threads)
                                                                 .Count(kPerSender)
                                                                 .Size(6000)
                                                                 .RandomSize()
                                                                 .Linger())));
  }
  std::string problem;
  const bool all = ReceiveAll(*runtime, threads, 2 * kPerSender, seconds(120), &problem);
  INFO(problem << "\n" << senders[0].Output() << "\n" << senders[1].Output());
  REQUIRE(all);

  const std::vector<NetworkStats> networks = runtime->Networks();
  const NetworkStats* via = ViaNetwork(networks);
  REQUIRE(via != nullptr);
  CHECK(via->provider == "sockets");
  CHECK(via->vi_cap == 1024);
  std::set<std::pair<uint64_t, uint32_t>> seen;
  std::set<uint32_t> classes;
  for (const ViStats& vi : via->vis) {
    INFO(vi.peer.ToString() << " " << vi.class_bytes << " " << vi.state);
    CHECK((vi.peer == senders[0].process() || vi.peer == senders[1].process()));
    CHECK(seen.insert({vi.peer.raw(), vi.class_bytes}).second);  // one per (peer, class)
    CHECK(vi.state == "connected");
    classes.insert(vi.class_bytes);
  }
  // 128 sending threads over a handful of classes: (#classes x #peers) VIs at most.
  CHECK(via->vis.size() <= kClasses * 2);
  CHECK(classes.size() >= 3);  // random sizes up to 6000 B span 256 B .. 8 KiB
  CHECK(via->vis_opened == via->vis.size());
  for (MsgWorker& sender : senders) CHECK(sender.Finish(seconds(30)).value_or(-1) == 0);
}

TEST_CASE("a via peer killed mid-stream costs its VIs only, and others go on",
          "[integration][msg][via]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "via-survivor", "via"));
  const Gid self = REQUIRE_VALUE(runtime->EnrollThread("r"));
  // Sends to us until killed.
  MsgWorker doomed = REQUIRE_VALUE(MsgWorker::Start(
      daemon,
      MsgWorkerArgs("source", "via-doomed").Subsystems("via").To({self}).Count(0).Size(3000)));
  // Receives from us until stdin closes.
  MsgWorker sink = REQUIRE_VALUE(
      MsgWorker::Start(daemon, MsgWorkerArgs("sink", "via-doomed-sink").Subsystems("via")));
  uint64_t got = 0;
  while (got < 2000) {
    auto message = runtime->RecvFor(self, seconds(10));
    REQUIRE_OK(message.status());
    ++got;
  }
  // We send to the sink while it is killed: sends fail, nothing hangs.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sent{0};
  // Written by the sender before send_failed, read after it (or the join).
  Status send_status;
  std::atomic<bool> send_failed{false};
  std::thread sender([&] {
    std::vector<std::byte> payload(2000);
    const Gid to = sink.threads().front();
    for (uint64_t seq = 0; !stop.load(); ++seq) {
      FillPayload(payload, self, to, seq);
      Status status = runtime->Send(self, to, 1, payload);
      if (!status.ok()) {
        send_status = status;
        send_failed.store(true, std::memory_order_release);
        return;
      }
      sent.fetch_add(1);
    }
  });
  REQUIRE(WaitUntil([&] { return sent.load() > 1000; }, seconds(30)));
  (void)doomed.child().Kill();
  (void)sink.child().Kill();
  // The sender learns the sink is gone (the VI breaks, the directory says
  // it exited) and stops with an error rather than hanging.
  const bool ended =
      WaitUntil([&] { return send_failed.load(std::memory_order_acquire); }, seconds(30));
  stop.store(true);
  sender.join();
  INFO(send_status.ToString());
  CHECK(ended);
  // Both dead peers' VIs go from the pool.
  CHECK(WaitUntil(
      [&] {
        const std::vector<NetworkStats> now = runtime->Networks();
        const NetworkStats* via = ViaNetwork(now);
        if (via == nullptr) return false;
        for (const ViStats& vi : via->vis) {
          if (vi.peer == doomed.process() || vi.peer == sink.process()) return false;
        }
        return true;
      },
      seconds(30)));
  // A new peer gets through.
  MsgWorker fresh = REQUIRE_VALUE(MsgWorker::Start(
      daemon,
      MsgWorkerArgs("source", "via-fresh").Subsystems("via").To({self}).Count(100).Size(100)));
  // Messages of the killed source may still be queued for us: drain until
  // the fresh one's 100 are in.
  uint64_t fresh_got = 0;
  while (fresh_got < 100) {
    auto message = runtime->RecvFor(self, seconds(10));
    REQUIRE_OK(message.status());
    if (message->source().process() == fresh.process()) ++fresh_got;
  }
  CHECK(fresh.Finish(seconds(30)).value_or(-1) == 0);
}

}  // namespace
}  // namespace tocl::testing
