// tocl-stream-ledger's sender: the stream and its ledger (stream_ledger.h).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "messaging_payload.h"
#include "seq_ranges.h"
#include "stream_ledger.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::steady_clock;

constexpr size_t kRing = 32;          // lvalue buffers in flight per sending thread
constexpr size_t kFailuresShown = 3;  // "failure" lines per sending thread

bool Final(BufferState state) {
  return state == BufferState::kSent || state == BufferState::kFailed;
}

// What one sending thread knows of its messages.
class SendLedger {
 public:
  enum Outcome : uint8_t { kPending, kOk, kFailed, kUnresolved };

  uint64_t Next() {
    outcome_.push_back(kPending);
    return outcome_.size() - 1;
  }
  void Record(uint64_t seq, Outcome outcome, std::string how = {}) {
    outcome_[seq] = outcome;
    if (outcome == kFailed && failures_.size() < kFailuresShown) {
      failures_.push_back(fmt::format("seq={} how={}", seq, how));
    }
  }
  uint64_t Count(Outcome outcome) const {
    return static_cast<uint64_t>(std::count(outcome_.begin(), outcome_.end(), outcome));
  }
  SeqRanges Ranges(Outcome outcome) const {
    SeqRanges ranges;
    for (uint64_t seq = 0; seq < outcome_.size(); ++seq) {
      if (outcome_[seq] == outcome) ranges.Add(seq);
    }
    return ranges;
  }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  std::vector<uint8_t> outcome_;  // per seq
  std::vector<std::string> failures_;
};

// A buffer sent by lvalue and the message it carries until its state is final.
struct Watched {
  Buffer buffer;
  std::optional<uint64_t> seq;
};

class Sender {
 public:
  Sender(const LedgerOptions& options, Runtime& runtime, std::vector<Gid> threads,
         std::vector<Gid> peers)
      : options_(options),
        runtime_(runtime),
        threads_(std::move(threads)),
        peers_(std::move(peers)),
        ledgers_(threads_.size()) {}

  // Streams until `stop`, then settles and prints the ledger.
  void Run(const std::atomic<bool>& stop);

 private:
  void Stream(size_t index, const std::atomic<bool>& stop);
  // Waits (until `deadline`) for the buffer of `watched` to be final and
  // records its message; false when it is still queued or in flight.
  bool Settle(size_t index, Watched& watched, steady_clock::time_point deadline);
  Status SendWatched(Gid self, Gid to, uint64_t seq, size_t size, Watched& watched);
  void Report(std::stop_token stop);

  const LedgerOptions& options_;
  Runtime& runtime_;
  const std::vector<Gid> threads_;
  const std::vector<Gid> peers_;
  std::vector<SendLedger> ledgers_;  // one per thread, written by that thread only
  std::atomic<uint64_t> sent_{0}, ok_{0}, failed_{0};
  std::atomic<uint64_t> send_errors_{0}, state_failed_{0};
  std::atomic<size_t> streaming_{0};  // threads whose first Send returned
};

bool Sender::Settle(size_t index, Watched& watched, steady_clock::time_point deadline) {
  if (!watched.seq) return true;
  while (!Final(watched.buffer.state()) && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const BufferState state = watched.buffer.state();
  if (state == BufferState::kSent) {
    ledgers_[index].Record(*watched.seq, SendLedger::kOk);
    ok_++;
  } else if (state == BufferState::kFailed) {
    ledgers_[index].Record(*watched.seq, SendLedger::kFailed, "state=failed");
    failed_++;
    state_failed_++;
  } else {
    return false;
  }
  watched.seq.reset();
  return true;
}

Status Sender::SendWatched(Gid self, Gid to, uint64_t seq, size_t size, Watched& watched) {
  if (!watched.buffer.valid()) {
    // Room for any short message: the buffer carries one size after another.
    TOCL_ASSIGN_OR_RETURN(watched.buffer, runtime_.GetBuffer(options_.short_size));
  }
  if (!watched.buffer.resize(size)) {
    return Internal(
        fmt::format("a buffer of capacity {} for {} bytes", watched.buffer.capacity(), size));
  }
  FillPayload(watched.buffer.span(), self, to, seq);
  StampPayload(watched.buffer.span(), SteadyNowNs());
  return runtime_.Send(self, to, kLedgerTag, watched.buffer);
}

void Sender::Stream(size_t index, const std::atomic<bool>& stop) {
  const Gid self = threads_[index];
  const Gid to = peers_[index];
  SendLedger& ledger = ledgers_[index];
  std::mt19937_64 random(self.raw());
  std::uniform_int_distribution<size_t> short_size(kStampedPayloadBytes, options_.short_size);
  std::vector<Watched> ring(kRing), stuck;
  std::vector<std::byte> copy;
  const auto settle_limit = milliseconds(options_.settle_ms);
  const auto start = steady_clock::now();
  const nanoseconds interval(
      options_.rate == 0 ? 0 : 1'000'000'000ull * threads_.size() / options_.rate);
  while (!stop.load(std::memory_order_relaxed)) {
    const uint64_t seq = ledger.Next();
    if (interval.count() > 0) std::this_thread::sleep_until(start + interval * seq);
    const bool long_one = options_.long_every != 0 && seq % options_.long_every == 0 && seq > 0;
    Status sent;
    Watched* watched = nullptr;
    if (!long_one && seq % 2 == 0) {
      watched = &ring[(seq / 2) % kRing];
      if (!Settle(index, *watched, steady_clock::now() + settle_limit)) {
        // Still the library's: set aside, and a fresh buffer takes its place.
        stuck.push_back(std::move(*watched));
        *watched = Watched();
      }
      sent = SendWatched(self, to, seq, short_size(random), *watched);
    } else {
      copy.resize(long_one ? options_.long_size : short_size(random));
      FillPayload(copy, self, to, seq);
      StampPayload(copy, SteadyNowNs());
      sent = runtime_.Send(self, to, kLedgerTag, std::span<const std::byte>(copy));
    }
    sent_++;
    if (!sent.ok()) {
      const char* kind = long_one ? "long" : watched != nullptr ? "buffer" : "copy";
      ledger.Record(seq, SendLedger::kFailed, fmt::format("{}-send:{}", kind, sent.ToString()));
      failed_++;
      send_errors_++;
    } else if (watched != nullptr) {
      watched->seq = seq;
    } else {
      ledger.Record(seq, SendLedger::kOk);
      ok_++;
    }
    if (seq == 0) streaming_++;
  }
  const auto deadline = steady_clock::now() + settle_limit;
  for (Watched& watched : ring) {
    if (!Settle(index, watched, deadline)) stuck.push_back(std::move(watched));
  }
  for (Watched& watched : stuck) {
    if (!Settle(index, watched, deadline)) ledger.Record(*watched.seq, SendLedger::kUnresolved);
  }
}

void Sender::Report(std::stop_token stop) {
  bool said_streaming = false;
  uint64_t last = std::numeric_limits<uint64_t>::max();
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(milliseconds(20));
    if (!said_streaming && streaming_.load() == threads_.size()) {
      Say("streaming");
      said_streaming = true;
    }
    const uint64_t sent = sent_.load();
    if (sent == last) continue;
    Say(fmt::format("progress sent={} ok={} failed={}", sent, ok_.load(), failed_.load()));
    last = sent;
  }
}

void Sender::Run(const std::atomic<bool>& stop) {
  const auto start = steady_clock::now();
  {
    std::jthread report([this](std::stop_token token) { Report(token); });
    std::vector<std::jthread> streams;
    for (size_t i = 0; i < threads_.size(); ++i) {
      streams.emplace_back([this, i, &stop] { Stream(i, stop); });
    }
  }
  uint64_t unresolved = 0;
  for (const SendLedger& ledger : ledgers_) unresolved += ledger.Count(SendLedger::kUnresolved);
  Say(fmt::format("done sent={} ok={} failed={} send_errors={} state_failed={} unresolved={} ms={}",
                  sent_.load(), ok_.load(), failed_.load(), send_errors_.load(),
                  state_failed_.load(), unresolved,
                  std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count()));
  for (size_t i = 0; i < threads_.size(); ++i) {
    const SendLedger& ledger = ledgers_[i];
    const std::string pair =
        fmt::format("from={} to={}", threads_[i].ToString(), peers_[i].ToString());
    Say(fmt::format("ledger {} ok={} failed={} unresolved={}", pair,
                    ledger.Ranges(SendLedger::kOk).ToString(),
                    ledger.Ranges(SendLedger::kFailed).ToString(),
                    ledger.Ranges(SendLedger::kUnresolved).ToString()));
    for (const std::string& failure : ledger.failures()) {
      Say(fmt::format("failure {} {}", pair, failure));
    }
  }
}

}  // namespace

void StreamWithLedger(const LedgerOptions& options, Runtime& runtime, std::vector<Gid> threads,
                      std::vector<Gid> peers, const std::atomic<bool>& stop) {
  Sender(options, runtime, std::move(threads), std::move(peers)).Run(stop);
}

}  // namespace tocl::testing
