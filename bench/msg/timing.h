// The timing loops every contender shares: the raw baselines and tocl are
// measured by the same code, only the message operations differ (templates,
// so nothing is added to the raw baselines' few-nanosecond hops).
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "run_spec.h"
#include "stats.h"

namespace tocl::bench::msg {

using Clock = std::chrono::steady_clock;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

inline void StoreStamp(std::byte* payload, uint64_t value) {
  std::memcpy(payload, &value, sizeof value);
}
inline uint64_t LoadStamp(const std::byte* payload) {
  uint64_t value;
  std::memcpy(&value, payload, sizeof value);
  return value;
}

// The initiator's side of a ping-pong. `round_trip(i)` sends message i
// (i = 1, 2, ...) and waits for its reply; false means it failed (the
// caller kept the reason). Warm-up runs for spec.warmup; then a short
// calibration picks the batch length (about spec.batch, so the clock is read
// rarely next to 40 ns hops), and batches are timed until spec.measure has
// passed. Each batch gives one sample: its time / (2 x round trips).
template <typename RoundTrip>
bool TimeRoundTrips(RoundTrip&& round_trip, const RunSpec& spec, uint64_t& next,
                    LatencyResult& out) {
  auto warm_start = Clock::now();
  do {
    for (int j = 0; j < 16; ++j) {
      if (!round_trip(next++)) return false;
    }
  } while (Clock::now() - warm_start < spec.warmup);

  auto calibrate_start = Clock::now();
  uint64_t calibrated = 0;
  do {
    for (int j = 0; j < 8; ++j) {
      if (!round_trip(next++)) return false;
    }
    calibrated += 8;
  } while (Clock::now() - calibrate_start < std::chrono::microseconds(500));
  double round_trip_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - calibrate_start).count() /
      static_cast<double>(calibrated);
  auto per_batch = static_cast<uint64_t>(
      std::clamp(static_cast<double>(spec.batch.count()) / round_trip_ns, 1.0, 65536.0));

  std::vector<double> samples;
  samples.reserve(4096);
  auto measure_start = Clock::now();
  auto batch_start = measure_start;
  for (;;) {
    for (uint64_t j = 0; j < per_batch; ++j) {
      if (!round_trip(next++)) return false;
    }
    auto now = Clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(now - batch_start).count() /
                      (2.0 * static_cast<double>(per_batch)));
    batch_start = now;
    if (now - measure_start >= spec.measure) break;
  }
  out.p50_ns = Median(samples);
  out.min_ns = Min(samples);
  out.samples = samples.size();
  out.per_batch = per_batch;
  return true;
}

// The sender's side of a stream. `send(mark)` sends one message; `wait_ack()`
// waits for the receiver's acknowledgement of a kSync or kLast message.
// Warm-up traffic, then kSync (acknowledged), then `barrier` (when several
// pairs run, so that their measurements overlap), then data messages until
// spec.measure has passed, then kLast; the time is from after the barrier to
// the acknowledgement of kLast, so every counted message was received.
template <typename Send, typename WaitAck>
bool TimeStream(Send&& send, WaitAck&& wait_ack, const RunSpec& spec, std::barrier<>* barrier,
                StreamResult& out) {
  constexpr int kChunk = 16;  // messages between clock reads
  // A pair that fails before the barrier leaves it, so the others go on.
  auto fail_before_barrier = [&] {
    if (barrier != nullptr) barrier->arrive_and_drop();
    return false;
  };
  auto warm_start = Clock::now();
  do {
    for (int j = 0; j < kChunk; ++j) {
      if (!send(StreamMark::kData)) return fail_before_barrier();
    }
  } while (Clock::now() - warm_start < spec.warmup);
  if (!send(StreamMark::kSync) || !wait_ack()) return fail_before_barrier();
  if (barrier != nullptr) barrier->arrive_and_wait();

  uint64_t messages = 0;
  auto start = Clock::now();
  do {
    for (int j = 0; j < kChunk; ++j) {
      if (!send(StreamMark::kData)) return false;
    }
    messages += kChunk;
  } while (Clock::now() - start < spec.measure);
  if (!send(StreamMark::kLast) || !wait_ack()) return false;
  auto end = Clock::now();
  out.messages = messages;
  out.seconds = std::chrono::duration<double>(end - start).count();
  out.start_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
  out.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count();
  return true;
}

// Sums the streams of several pairs: all messages over the span from the
// first start to the last end.
inline StreamResult CombineStreams(const std::vector<StreamResult>& streams) {
  StreamResult total;
  if (streams.empty()) return total;
  total.start_ns = streams.front().start_ns;
  total.end_ns = streams.front().end_ns;
  for (const StreamResult& stream : streams) {
    total.messages += stream.messages;
    total.start_ns = std::min(total.start_ns, stream.start_ns);
    total.end_ns = std::max(total.end_ns, stream.end_ns);
  }
  total.seconds = static_cast<double>(total.end_ns - total.start_ns) * 1e-9;
  return total;
}

}  // namespace tocl::bench::msg
