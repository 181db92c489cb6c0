// An MPI ping-pong beside ours, when the build found MPI (bench/peers/):
// `mpiexec -n 2 tocl-bench-mpi-pingpong`, its own two processes, run once
// (not interleaved), for reference only.
#pragma once

#include <chrono>
#include <cstdint>
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

}  // namespace tocl::bench::msg
