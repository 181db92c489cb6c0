// The sending end of tocl-long-worker (long_worker.cc says what it prints).
#include <atomic>
#include <condition_variable>
#include <thread>

#include "long_worker.h"
#include "test_message.h"

namespace tocl::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One sending thread; false when a send failed (and was not to be waited
// out) or the end marker could not be sent.
bool SendAll(Runtime& runtime, Gid self, int index, const WorkerOptions& options,
             LinePrinter& out) {
  const Gid to = options.to[index % options.to.size()];
  auto sizes = ParsePlan(options.plan, static_cast<uint32_t>(index));
  if (!sizes.ok()) {
    out.Print("error thread {} plan status {}", index, sizes.status().ToString());
    return false;
  }
  uint64_t largest = 0;
  for (uint64_t size : *sizes) largest = std::max(largest, size);
  std::vector<std::byte> buffer(largest);
  uint64_t seq = 0;
  for (uint64_t size : *sizes) {
    std::span<std::byte> message = std::span(buffer).first(size);
    const Sha256::Digest digest = FillTestMessage(message, static_cast<uint32_t>(index), seq);
    out.Print("sending thread {} seq {} bytes {}", index, seq, size);
    const auto start = Clock::now();
    Status sent = runtime.Send(self, to, kDataTag, std::span<const std::byte>(message));
    if (sent.ok()) {
      out.Print("sent thread {} seq {} bytes {} sha256 {} seconds {:.3f}", index, seq, size,
                Sha256::Hex(digest), SecondsSince(start));
      ++seq;
      continue;
    }
    out.Print("send-failed thread {} seq {} bytes {} seconds {:.3f} status {}", index, seq, size,
              SecondsSince(start), sent.ToString());
    if (!options.wait_after_failure) return false;
    WaitForGo();
  }
  if (options.pause_before_end) WaitForGo();
  const std::vector<std::byte> end = EndMarker(seq);
  if (Status sent = runtime.Send(self, to, kEndTag, std::span<const std::byte>(end)); !sent.ok()) {
    out.Print("error thread {} end marker status {}", index, sent.ToString());
    return false;
  }
  out.Print("ended thread {} count {}", index, seq);
  return true;
}

struct Progress {
  uint64_t fragments = 0;  // long-message fragments posted, every network and peer
  uint64_t bytes = 0;      // everything sent, every network
  bool operator==(const Progress&) const = default;
};

Progress SentSoFar(const Runtime& runtime) {
  Progress progress;
  for (const NetworkStats& network : runtime.Networks()) {
    progress.bytes += network.bytes_sent;
    for (const NetworkPeerStats& peer : network.peers) progress.fragments += peer.fragments_sent;
  }
  return progress;
}

}  // namespace

int RunSender(Runtime& runtime, const WorkerOptions& options, LinePrinter& out) {
  std::vector<Gid> gids;
  for (int i = 0; i < options.threads; ++i) {
    auto gid = runtime.EnrollThread("send-" + std::to_string(i));
    if (!gid.ok()) {
      out.Print("error enroll status {}", gid.status().ToString());
      return 1;
    }
    gids.push_back(*gid);
    out.Print("gid thread {} gid {}", i, gid->ToString());
  }

  // Progress: fragment counts while the senders run.
  std::mutex mu;
  std::condition_variable finished_cv;
  bool finished = false;  // guarded by mu
  std::thread progress;
  if (options.progress.count() > 0) {
    progress = std::thread([&] {
      Progress printed;
      std::unique_lock lock(mu);
      while (!finished_cv.wait_for(lock, options.progress, [&] { return finished; })) {
        const Progress now = SentSoFar(runtime);
        if (now != printed) out.Print("progress fragments {} bytes {}", now.fragments, now.bytes);
        printed = now;
      }
    });
  }

  std::atomic<bool> good{true};
  std::vector<std::thread> threads;
  for (int i = 0; i < options.threads; ++i) {
    threads.emplace_back([&, i] {
      if (!SendAll(runtime, gids[i], i, options, out)) good = false;
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (progress.joinable()) {
    {
      std::lock_guard lock(mu);
      finished = true;
    }
    finished_cv.notify_all();
    progress.join();
  }
  PrintNetworks(runtime, out);
  if (options.pause_before_exit) {
    out.Print("paused");
    WaitForGo();
  }
  return good ? 0 : 1;
}

}  // namespace tocl::testing
