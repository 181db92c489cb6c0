// UCX's own benchmark as a peer of `tocl-bench msg --peers`: ucx_perftest
// (Debian's ucx-utils, UCX 1.13) run as a server and a client process on
// loopback, the server started first without an address, the client with
// 127.0.0.1, both on a free port (-p). Tests:
//
//   tag_lat  UCP tag-matched ping-pong; its latency is half a round trip
//   tag_bw   UCP tag-matched stream one way: message rate and bandwidth
//
// over posix shared memory (UCX_TLS=posix,self) or tcp (UCX_TLS=tcp,
// UCX_NET_DEVICES=lo). Runs use -f (final numbers only) and read the last
// row of the table: iterations, latency p50 / average / overall (us),
// bandwidth average / overall (MB/s, 2^20 bytes), message rate average /
// overall (msg/s).
//
// ucx_perftest takes a count of iterations, not a time: a UcxPerftest learns
// the time of one iteration from each run and sizes the next run to
// about the time asked for. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::bench::msg {

enum class UcxTest { kTagLat, kTagBw };
enum class UcxTransport { kPosix, kTcp };

// The final row of a ucx_perftest -f run.
struct UcxPerftestFigures {
  uint64_t iterations = 0;
  double latency_p50_us = 0;
  double latency_overall_us = 0;
  double bandwidth_overall_mib_s = 0;
  double rate_overall_per_s = 0;
};

// Parses the last row of numbers in ucx_perftest's -f output.
Result<UcxPerftestFigures> ParseUcxPerftest(std::string_view output);

// Ok when ucx_perftest can be run; else what to install.
Status UcxPerftestAvailable();

class UcxPerftest {
 public:
  UcxPerftest(UcxTest test, UcxTransport transport, uint32_t size)
      : test_(test), transport_(transport), size_(size) {}

  // One server/client run of about `measure` after ucx_perftest's own
  // warm-up iterations (-w, about `warmup`).
  Result<UcxPerftestFigures> Run(std::chrono::nanoseconds warmup, std::chrono::nanoseconds measure);

  // "UCX posix", "UCX tcp".
  std::string Name() const;

 private:
  uint64_t IterationsFor(std::chrono::nanoseconds time) const;

  UcxTest test_;
  UcxTransport transport_;
  uint32_t size_;
  double iteration_ns_ = 0;  // learnt from the last run; 0: none yet
};

}  // namespace tocl::bench::msg
