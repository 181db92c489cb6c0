// tocl-bench-mpi-pingpong: the MPI figure `tocl-bench msg` prints beside its
// own latencies when the build found MPI. Run as
//
//   mpiexec -n 2 tocl-bench-mpi-pingpong --sizes 8,64,4096,65536 --ms 150
//
// Rank 0 pings rank 1 with MPI_Send / MPI_Recv (blocking, as an application
// would), timed like tocl-bench's own ping-pongs: warm-up, then batches of
// round trips about 20 us long, and the median batch's time / (2 x round
// trips). Prints one line per size: "mpi-pingpong size=8 one_way_ns=812.5".
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double Nanos(Clock::duration d) {
  return std::chrono::duration<double, std::nano>(d).count();
}

// Both ranks run `count` round trips of `size` bytes.
void RoundTrips(int rank, std::vector<char>& buffer, int size, long count) {
  for (long i = 0; i < count; ++i) {
    if (rank == 0) {
      MPI_Send(buffer.data(), size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buffer.data(), size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
}

double Measure(int rank, int size, double measure_ns) {
  std::vector<char> buffer(static_cast<size_t>(size), 'x');
  // Warm-up and calibration: rank 0 decides the batch length and count.
  auto start = Clock::now();
  RoundTrips(rank, buffer, size, 2000);
  double round_trip = Nanos(Clock::now() - start) / 2000;
  long plan[2] = {std::max(1L, static_cast<long>(20000 / round_trip)), 0};
  plan[1] =
      std::max(5L, static_cast<long>(measure_ns / (round_trip * static_cast<double>(plan[0]))));
  MPI_Bcast(plan, 2, MPI_LONG, 0, MPI_COMM_WORLD);
  std::vector<double> samples;
  for (long b = 0; b < plan[1]; ++b) {
    auto batch_start = Clock::now();
    RoundTrips(rank, buffer, size, plan[0]);
    samples.push_back(Nanos(Clock::now() - batch_start) / (2.0 * static_cast<double>(plan[0])));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::string sizes = "8,64,4096,65536";
  double measure_ms = 150;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--sizes") == 0) sizes = argv[i + 1];
    if (std::strcmp(argv[i], "--ms") == 0) measure_ms = std::atof(argv[i + 1]);
  }
  if (ranks != 2) {
    if (rank == 0) std::fprintf(stderr, "tocl-bench-mpi-pingpong: needs exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  for (size_t begin = 0; begin < sizes.size();) {
    size_t end = sizes.find(',', begin);
    if (end == std::string::npos) end = sizes.size();
    int size = std::atoi(sizes.substr(begin, end - begin).c_str());
    begin = end + 1;
    double one_way = Measure(rank, size, measure_ms * 1e6);
    if (rank == 0) std::printf("mpi-pingpong size=%d one_way_ns=%.1f\n", size, one_way);
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
