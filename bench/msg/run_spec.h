// One measured run as a peer sees it, and what it measures, shared by the raw
// baselines and the tocl side so that both are timed by the same code
// (timing.h).
#pragma once

#include <chrono>
#include <cstdint>

#include "protocol.h"

namespace tocl::bench::msg {

struct RunSpec {
  uint32_t size = 8;   // payload bytes per message
  uint32_t pairs = 1;  // thread pairs (streams)
  uint32_t run_id = 0;
  std::chrono::nanoseconds warmup{0};
  std::chrono::nanoseconds measure{0};
  std::chrono::nanoseconds batch{0};

  static RunSpec From(const Command& command) {
    RunSpec spec;
    spec.size = command.size;
    spec.pairs = command.pairs == 0 ? 1 : command.pairs;
    spec.run_id = command.run_id;
    spec.warmup = std::chrono::nanoseconds(command.warmup_ns);
    spec.measure = std::chrono::nanoseconds(command.measure_ns);
    spec.batch = std::chrono::nanoseconds(command.batch_ns);
    return spec;
  }
};

// Ping-pong, on the initiator: the one-way latency (half a round trip) of
// batches of round trips.
struct LatencyResult {
  double p50_ns = 0;
  double min_ns = 0;
  uint64_t samples = 0;    // batches
  uint64_t per_batch = 0;  // round trips in each
};

// Streams, on the initiator: messages sent between the acknowledged start
// marker and the acknowledgement of the last message, and the time between
// them. For several pairs, the sum over pairs and the span from the first
// start to the last acknowledgement.
struct StreamResult {
  uint64_t messages = 0;
  double seconds = 0;
  int64_t start_ns = 0;  // steady clock
  int64_t end_ns = 0;
};

// The first 8 payload bytes of every message: the ping-pong round number
// (echoed back) or, in streams, what the message is.
enum class StreamMark : uint64_t { kData = 0, kSync = 1, kLast = 2 };
inline constexpr uint64_t kStopStamp = ~uint64_t{0};  // ends a ping-pong

}  // namespace tocl::bench::msg
