// tocl-stream-ledger's receiver: checks every message and records what
// arrived when (stream_ledger.h).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "messaging_payload.h"
#include "seq_ranges.h"
#include "stream_ledger.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;

// What one receiving thread got from one source thread.
struct PairArrivals {
  std::vector<bool> seen;  // by seq
  uint64_t next = 0;       // one past the highest seq received
  uint64_t duplicates = 0, reordered = 0;
  // (send stamp, arrival) of the first message in each 100 us of send time.
  std::vector<std::pair<uint64_t, uint64_t>> samples;

  SeqRanges Seqs() const {
    SeqRanges ranges;
    for (uint64_t seq = 0; seq < seen.size(); ++seq) {
      if (seen[seq]) ranges.Add(seq);
    }
    return ranges;
  }
  // When the first message stamped at or after `kill_ns` arrived.
  std::optional<uint64_t> FirstArrivalSentAfter(uint64_t kill_ns) const {
    auto at =
        std::lower_bound(samples.begin(), samples.end(), std::make_pair(kill_ns, uint64_t{0}));
    if (at == samples.end()) return std::nullopt;
    return at->second;
  }
};

class Receiver {
 public:
  Receiver(Runtime& runtime, std::vector<Gid> threads)
      : runtime_(runtime),
        threads_(std::move(threads)),
        pairs_(threads_.size()),
        newest_(threads_.size()) {}

  // Receives until stdin closes, then prints what arrived. False on an
  // unexpected error.
  bool Run(StdinWatch& stdin_watch, const std::string& kills_path);

 private:
  void Receive(size_t index, StdinWatch& stdin_watch);
  void Arrived(size_t index, const Buffer& message);
  void Report(std::stop_token stop);
  void PrintResumeTimes(const std::string& kills_path);

  Runtime& runtime_;
  const std::vector<Gid> threads_;
  // Per receiving thread, written by that thread only.
  std::vector<std::map<Gid, PairArrivals>> pairs_;
  std::vector<std::atomic<uint64_t>> newest_;  // per thread: the newest stamp received
  std::atomic<uint64_t> received_{0}, corrupt_{0}, errors_{0};
};

void Receiver::Arrived(size_t index, const Buffer& message) {
  const uint64_t arrival = SteadyNowNs();
  const Gid self = threads_[index];
  if (std::string problem = message.tag() == kLedgerTag
                                ? CheckPayload(message.span(), message.source(), self)
                                : fmt::format("tag {}", message.tag());
      !problem.empty()) {
    corrupt_++;
    fmt::print(stderr, "tocl-stream-ledger: error {} from {}: {}\n", self.ToString(),
               message.source().ToString(), problem);
    return;
  }
  const uint64_t seq = ReadPayloadHeader(message.span()).seq;
  const uint64_t stamp = PayloadStamp(message.span());
  PairArrivals& pair = pairs_[index][message.source()];
  if (seq < pair.next) {
    (pair.seen[seq] ? pair.duplicates : pair.reordered)++;
    return;
  }
  pair.seen.resize(seq + 1, false);
  pair.seen[seq] = true;
  pair.next = seq + 1;
  if (pair.samples.empty() || stamp >= pair.samples.back().first + 100'000) {
    pair.samples.emplace_back(stamp, arrival);
  }
  if (stamp > newest_[index].load(std::memory_order_relaxed)) {
    newest_[index].store(stamp, std::memory_order_relaxed);
  }
  received_++;
}

void Receiver::Receive(size_t index, StdinWatch& stdin_watch) {
  while (!stdin_watch.closed()) {
    auto message = runtime_.RecvFor(threads_[index], milliseconds(50));
    if (message.ok()) {
      Arrived(index, *message);
    } else if (message.status().code() != StatusCode::kDeadlineExceeded) {
      errors_++;
      fmt::print(stderr, "tocl-stream-ledger: error {}: RecvFor: {}\n", threads_[index].ToString(),
                 message.status().ToString());
      return;
    }
  }
}

void Receiver::Report(std::stop_token stop) {
  uint64_t last = std::numeric_limits<uint64_t>::max();
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(milliseconds(20));
    const uint64_t received = received_.load();
    if (received == last) continue;
    uint64_t caught_up = std::numeric_limits<uint64_t>::max();
    for (const auto& newest : newest_) caught_up = std::min(caught_up, newest.load());
    Say(fmt::format("progress received={} caught_up_ns={}", received, caught_up));
    last = received;
  }
}

void Receiver::PrintResumeTimes(const std::string& kills_path) {
  if (kills_path.empty()) return;
  std::ifstream kills(kills_path);
  uint64_t kill_ns = 0;
  while (kills >> kill_ns) {
    // Every pair must have resumed: the latest of their first arrivals.
    std::optional<uint64_t> resumed = 0;
    for (const auto& sources : pairs_) {
      for (const auto& [source, pair] : sources) {
        const std::optional<uint64_t> first = pair.FirstArrivalSentAfter(kill_ns);
        resumed = first && resumed ? std::optional(std::max(*first, *resumed)) : std::nullopt;
      }
    }
    Say(fmt::format("resume kill_ns={} us={}", kill_ns,
                    resumed ? std::to_string((*resumed - kill_ns) / 1000) : "none"));
  }
}

bool Receiver::Run(StdinWatch& stdin_watch, const std::string& kills_path) {
  {
    std::jthread report([this](std::stop_token token) { Report(token); });
    std::vector<std::jthread> receivers;
    for (size_t i = 0; i < threads_.size(); ++i) {
      receivers.emplace_back([this, i, &stdin_watch] { Receive(i, stdin_watch); });
    }
  }
  uint64_t duplicates = 0, reordered = 0;
  for (size_t i = 0; i < threads_.size(); ++i) {
    for (const auto& [source, pair] : pairs_[i]) {
      Say(fmt::format("received from={} to={} seqs={} duplicates={} reordered={}",
                      source.ToString(), threads_[i].ToString(), pair.Seqs().ToString(),
                      pair.duplicates, pair.reordered));
      duplicates += pair.duplicates;
      reordered += pair.reordered;
    }
  }
  PrintResumeTimes(kills_path);
  Say(fmt::format("done received={} duplicates={} reordered={} corrupt={} errors={}",
                  received_.load(), duplicates, reordered, corrupt_.load(), errors_.load()));
  return errors_ == 0;
}

}  // namespace

bool ReceiveWithRecord(Runtime& runtime, std::vector<Gid> threads, StdinWatch& stdin_watch,
                       const std::string& kills_path) {
  return Receiver(runtime, std::move(threads)).Run(stdin_watch, kills_path);
}

}  // namespace tocl::testing
