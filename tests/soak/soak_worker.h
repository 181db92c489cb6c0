// The parts of tocl-soak-worker (soak_worker.cc says what it prints): its
// options, the counters of each thread index, the record files, and the
// sending and receiving threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
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
  size_t window = 8;         // short messages a stream may have queued or in flight
  uint32_t long_every = 10;  // one message in this many is longer than the short maximum
  uint32_t rate = 0;         // data messages per second per sending thread; 0: no limit
  std::chrono::milliseconds stats_interval{2000};
  // A stream whose oldest buffer has been queued or in flight this long has
  // stalled: it ends, and the next stream is a new thread pair.
  std::chrono::milliseconds stall_timeout{15000};
  // After the stop signal: how long the buffers may take to end kSent or
  // kFailed, and then the stream's end to be answered.
  std::chrono::milliseconds drain_timeout{30000};
  // Where the records go: RECORDS.send and RECORDS.recv (soak_records.h).
  std::string records;
};

// What one thread index did: its sending thread (every stream it ran) and
// its receiving thread. Relaxed atomics: the stats line reads them while the
// threads count; nothing is ordered by them.
struct SoakCounters {
  // sending thread
  std::atomic<uint64_t> streams{0};
  std::atomic<uint64_t> sent{0};      // Send called
  std::atomic<uint64_t> ok{0};        // the library said sent (kSent, or a long Send ok)
  std::atomic<uint64_t> bytes_ok{0};  // of those
  std::atomic<uint64_t> failed{0};    // Send returned an error or the buffer ended kFailed
  std::atomic<uint64_t> pending{0};   // buffers still queued or in flight
  std::atomic<uint64_t> stalls{0};
  // receiving thread
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> dups{0};
  std::atomic<uint64_t> bad{0};  // bad checksum, size or header, out of order
  // both
  std::atomic<uint64_t> errors{0};  // "error" lines printed
};

// One record file (soak_records.h): lines appended whole, each with one
// write(2), so that a SIGKILL leaves every line finished before it.
class SoakRecordFile {
 public:
  // Nothing is written when `path` is empty.
  explicit SoakRecordFile(const std::string& path);
  ~SoakRecordFile();
  SoakRecordFile(const SoakRecordFile&) = delete;
  SoakRecordFile& operator=(const SoakRecordFile&) = delete;

  bool ok() const { return path_.empty() || fd_ >= 0; }
  void Write(const std::string& line);

 private:
  const std::string path_;
  int fd_ = -1;
  std::mutex mu_;  // one line at a time from the process's threads
};

struct SoakContext {
  Runtime& runtime;
  DirectoryClient& directory;  // the host's daemon: where receivers are looked up
  const SoakWorkerOptions& options;
  LinePrinter& out;
  SoakRecordFile& sent_records;
  SoakRecordFile& received_records;
  std::atomic<bool>& stopping;  // set once, by the stop signal
};

// The receiving thread `index` (enrolled as `self`): takes data from any
// sender, checks and records it, until the stop signal and an end message
// have come and nothing more arrives (or the drain time is up). Prints its
// streams at the end.
void RunReceivingThread(SoakContext& context, int index, Gid self, SoakCounters& counters);

// The sending thread `index`: streams to receiving thread `index` of the
// target host, stream after stream, until the stop signal; then drains.
void RunSendingThread(SoakContext& context, int index, SoakCounters& counters);

}  // namespace tocl::testing
