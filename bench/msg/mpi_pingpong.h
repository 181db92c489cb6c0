// Our Open MPI program (bench/peers/mpi_pingpong.cc), when the build found
// MPI, run with mpiexec in its own two processes:
//
// - beside tocl's latencies, once and not interleaved, for reference
//   (RunMpiPingPong, every `tocl-bench msg` run with latency);
// - as a peer of `tocl-bench msg --peers` (RunMpi), one run per round in
//   the rounds of tocl's cases: a ping-pong or an osu_mbw_mr-style stream
//   over Open MPI's ob1 with the vader (shared memory) or tcp btl:
//   `mpiexec -n 2 --mca pml ob1 --mca btl vader,self ...`.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tocl/status.h"

namespace tocl::bench::msg {

// False when the build did not find MPI: nothing is printed about it then.
bool MpiPingPongBuilt();

// One-way p50 latency in ns for each size, measured for about `measure`
// per size. Unavailable when mpiexec fails.
Result<std::vector<std::pair<uint32_t, double>>> RunMpiPingPong(const std::vector<uint32_t>& sizes,
                                                                std::chrono::nanoseconds measure);

enum class MpiBtl { kVader, kTcp };
enum class MpiCase { kPingPong, kStream };

struct MpiFigures {
  double one_way_ns = 0;  // kPingPong: the median batch's half round trip
  uint64_t messages = 0;  // kStream: messages sent over `seconds`
  double seconds = 0;
};

// Ok when the peer can run (MPI built and mpiexec present); else what to do.
Status MpiPeerAvailable();

// "Open MPI vader", "Open MPI tcp".
std::string MpiName(MpiBtl btl);

// One mpiexec run of `size`-byte messages, about `measure` after `warmup`.
Result<MpiFigures> RunMpi(MpiCase what, MpiBtl btl, uint32_t size, std::chrono::nanoseconds warmup,
                          std::chrono::nanoseconds measure);

}  // namespace tocl::bench::msg
