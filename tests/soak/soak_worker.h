// The parts of tocl-soak-worker (soak_worker.cc says what it prints): its
// options, the counters of each thread index, and the sending and
// receiving threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "long_worker.h"  // LinePrinter
#include "soak_say.h"     // TimeOfDay
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace tocl::testing {

struct SoakWorkerOptions {
  int threads = 2;      // sending threads, and as many receiving threads
  int target_host = 0;  // the host whose receiving threads this worker's senders stream to
  uint64_t seed = 1;
  size_t window = 8;         // data messages a stream may have unacknowledged
  uint32_t long_every = 10;  // one message in this many is longer than the short maximum
  uint32_t rate = 0;         // data messages per second per sending thread; 0: no limit
  std::chrono::milliseconds stats_interval{2000};
  // A stream whose oldest unacknowledged message got no ack for this long
  // has stalled (tocl/README: a short message lost in a broken connection
  // stalls its thread pair): it ends, and the next stream is a new pair.
  std::chrono::milliseconds stall_timeout{15000};
  // After the stop signal: how long a stream may take to have everything
  // acknowledged and its end answered.
  std::chrono::milliseconds drain_timeout{30000};
};

// What one thread index did: its sending thread (every stream it ran) and
// its receiving thread. Relaxed atomics: the stats line reads them while the
// threads count; nothing is ordered by them.
struct SoakCounters {
  // sending thread
  std::atomic<uint64_t> streams{0};
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> bytes_acked{0};
  std::atomic<uint64_t> failed{0};   // sends that returned an error or whose buffer ended kFailed
  std::atomic<uint64_t> skipped{0};  // sent, never acknowledged, a later one was
  std::atomic<uint64_t> stalls{0};
  // receiving thread
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> gaps{0};  // messages a stream skipped (later ones came)
  std::atomic<uint64_t> dups{0};
  std::atomic<uint64_t> bad{0};  // bad checksum, size or header
  std::atomic<uint64_t> ack_failed{0};
  // both
  std::atomic<uint64_t> errors{0};  // "error" lines printed
};

struct SoakContext {
  Runtime& runtime;
  DirectoryClient& directory;  // the host's daemon: where receivers are looked up
  const SoakWorkerOptions& options;
  LinePrinter& out;
  std::atomic<bool>& stopping;  // set once, by the stop signal
};

// The receiving thread `index` (enrolled as `self`): takes data from any
// sender, checks it, acknowledges it, until the stop signal and an end
// message have come (or the drain time is up). Prints its streams at the end.
void RunReceivingThread(SoakContext& context, int index, Gid self, SoakCounters& counters);

// The sending thread `index`: streams to receiving thread `index` of the
// target host, stream after stream, until the stop signal; then drains.
void RunSendingThread(SoakContext& context, int index, SoakCounters& counters);

}  // namespace tocl::testing
