#include "mpi_pingpong.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tocl::bench::msg {

#if defined(TOCL_BENCH_MPIEXEC) && defined(TOCL_BENCH_MPI_PINGPONG)

bool MpiPingPongBuilt() {
  return true;
}

Result<std::vector<std::pair<uint32_t, double>>> RunMpiPingPong(const std::vector<uint32_t>& sizes,
                                                                std::chrono::nanoseconds measure) {
  std::string size_list;
  for (uint32_t size : sizes) size_list += fmt::format("{}{}", size_list.empty() ? "" : ",", size);
  // Open MPI refuses to run as root unless told; MPICH ignores these.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::string command = fmt::format(
      "'{}' -n 2 '{}' --sizes {} --ms {} 2>&1", TOCL_BENCH_MPIEXEC, TOCL_BENCH_MPI_PINGPONG,
      size_list, std::chrono::duration_cast<std::chrono::milliseconds>(measure).count());
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return Unavailable(fmt::format("cannot run {}", command));
  std::vector<std::pair<uint32_t, double>> results;
  std::string output;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    output += line;
    unsigned size = 0;
    double nanos = 0;
    if (std::sscanf(line, "mpi-pingpong size=%u one_way_ns=%lf", &size, &nanos) == 2) {
      results.emplace_back(size, nanos);
    }
  }
  int status = ::pclose(pipe);
  if (status != 0 || results.size() != sizes.size()) {
    return Unavailable(fmt::format("{} failed: {}", command, output));
  }
  return results;
}

#else

bool MpiPingPongBuilt() {
  return false;
}

Result<std::vector<std::pair<uint32_t, double>>> RunMpiPingPong(const std::vector<uint32_t>&,
                                                                std::chrono::nanoseconds) {
  return Unavailable("this tocl-bench was built without MPI");
}

#endif

}  // namespace tocl::bench::msg
