// The fragment scheduler of one long message (paper §4.3, long_message.h):
// which network of the peer carries each fragment, and what to do when a
// network stops acknowledging.
//
// Placement: each fragment goes to the network with the earliest expected
// finish, (fragments in flight there + 1) x fragment size / bandwidth; when
// that network's window is full the message waits for it rather than use a
// slower one. Bandwidth is this message's own measurement once a network
// acknowledged kMeasuredAfter fragments, else what earlier messages
// learned (RailHealth::bandwidth), else the mean of the known ones. So a
// message starts as an alternation and, once acknowledgements measure each
// network, splits by throughput.
//
// Failover: a network that acknowledged nothing for fragment_timeout while
// fragments were in flight is failed until kRetryAfterTimeouts x
// fragment_timeout from now; one whose route broke is failed for good. Its
// unacknowledged fragments are sent again over the others (before fresh
// ones).
//
// Plain data, no I/O and no clock of its own: the caller (LongSender) passes
// the peer's health of each network (SendQueue::health(), `broken` read
// from the routes), posts what Next names, and reports Posted or Full; the
// poller reports acknowledgements. Threading: none of its own (LongSend::mu
// guards it; the health is the peer's, under its mu()).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

namespace tocl::runtime {

// Unacknowledged fragments per network and message: enough to cover the
// bandwidth-delay product of a fast link (32 x 64 KiB = 2 MiB).
inline constexpr uint64_t kWindowFragments = 32;
// Bandwidth is trusted once this many fragments were acknowledged.
inline constexpr uint64_t kMeasuredAfter = 4;
// A failed network is tried again after this many fragment timeouts.
inline constexpr int kRetryAfterTimeouts = 10;

// What the sender knows of one of the peer's networks, shared by every
// long message to that peer (one per route, kept by its SendQueue).
struct RailHealth {
  using Clock = std::chrono::steady_clock;

  bool broken = false;  // its route broke (it does not come back)
  // Stopped acknowledging fragments, or broke: not used until retry_at
  // (never, once broken).
  bool failed = false;
  Clock::time_point retry_at;
  double bandwidth = 0;  // bytes/s learned from acknowledgements; 0 = unknown

  // Not failed, or its retry time has come by `now`.
  bool UsableAt(Clock::time_point now) const { return !failed || now >= retry_at; }
  // Its route broke: failed for good.
  void Break() {
    broken = true;
    failed = true;
    retry_at = Clock::time_point::max();
  }
};

class FragmentScheduler {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    uint64_t window = kWindowFragments;
    uint64_t measured_after = kMeasuredAfter;
    // A network that acknowledges nothing for this long is failed, and
    // tried again after retry_after_timeouts of them.
    Clock::duration fragment_timeout = std::chrono::seconds(1);
    int retry_after_timeouts = kRetryAfterTimeouts;
  };

  // A network found broken or silent this round.
  struct Failure {
    size_t rail;
    bool broken;              // else silent
    uint64_t unacknowledged;  // its fragments that go back to be sent again
    // Worth reporting: it was live, or had fragments in flight (a broken
    // network is found again every round).
    bool news;
  };

  // A fragment to post now, and the network it goes over.
  struct Placement {
    uint64_t index;
    size_t rail;
    bool resent;  // it went over another network before
  };

  FragmentScheduler() = default;
  // A message of `total_bytes` cut into fragments of `fragment_bytes`, over
  // `rails` networks of the peer.
  FragmentScheduler(uint64_t total_bytes, uint64_t fragment_bytes, size_t rails, Limits limits);

  uint64_t count() const { return state_.size(); }
  size_t rails() const { return rails_.size(); }
  uint64_t acked() const { return acked_; }
  bool done() const { return acked_ == count(); }
  uint64_t Offset(uint64_t index) const { return index * fragment_bytes_; }
  uint64_t Length(uint64_t index) const;

  // The receiver acknowledged [offset, offset + length) (a run of whole
  // fragments; anything else is ignored). Returns how many fragments were
  // new; their networks' measurements advance.
  uint64_t Acknowledge(uint64_t offset, uint64_t length, Clock::time_point now);

  // Starts a round of placement: a failed network whose retry_at passed is
  // live again; one that broke (failed for good) or went silent (failed
  // for retry_after_timeouts; unless `congested`: while we do not read,
  // nothing can be heard) is failed in `rails` and gives its fragments
  // back. Returns those failures, in network order.
  std::vector<Failure> StartRound(std::span<RailHealth> rails, Clock::time_point now,
                                  bool congested);
  // The next fragment and its network this round (after StartRound, with
  // its `rails`), or none: every fragment is placed, the best network's
  // window is full, or no network is left.
  std::optional<Placement> Next(std::span<const RailHealth> rails);
  // `placement` was posted: in flight on its network.
  void Posted(const Placement& placement, Clock::time_point now);
  // `rail` could not take a fragment now (no buffer, TryAgain, or broken):
  // not offered again this round.
  void Full(size_t rail) { full_[rail] = true; }

  // Bytes/s this message measured on `rail`, or 0 (too few acknowledged).
  double Measured(size_t rail) const;
  // The bandwidth a network showed, after this message (what the next
  // message starts from).
  double Learned(size_t rail, double before) const;

 private:
  enum class State : uint8_t { kUnsent, kPosted, kAcked };
  struct RailProgress {
    uint64_t inflight = 0;     // fragments
    uint64_t acked_bytes = 0;  // this message
    Clock::time_point first_post;
    Clock::time_point last_ack;  // or post, while inflight
  };

  Limits limits_;
  uint64_t total_bytes_ = 0;
  uint64_t fragment_bytes_ = 1;
  std::vector<State> state_;
  std::vector<int8_t> rail_of_;  // the network of the last post; -1 never posted
  uint64_t acked_ = 0;
  std::vector<RailProgress> rails_;
  std::deque<uint64_t> retry_;  // fragments to send again (their network failed)
  uint64_t next_fresh_ = 0;
  // This round's: the bandwidth each network is counted with, and those
  // that took nothing more.
  std::vector<double> bandwidth_;
  std::vector<bool> full_;
};

}  // namespace tocl::runtime
