// tocl-bench-mpi-pingpong: the Open MPI peer of `tocl-bench msg`, built when
// CMake finds MPI. Two ranks, rank 0 measures:
//
//   mpiexec -n 2 tocl-bench-mpi-pingpong --sizes 8,64,4096,65536 --ms 150
//   mpiexec -n 2 tocl-bench-mpi-pingpong --mode stream --sizes 8 --ms 150 --warmup-ms 30
//
// --mode pingpong (the default): rank 0 pings rank 1 with MPI_Send /
// MPI_Recv (blocking, as an application would), timed like tocl-bench's own
// ping-pongs: warm-up, then batches of round trips about 20 us long, and the
// median batch's time / (2 x round trips). One line per size:
// "mpi-pingpong size=8 one_way_ns=812.5".
//
// --mode stream: message rate and bandwidth as osu_mbw_mr / osu_bw measure
// them for one pair: rank 0 posts a window of 64 MPI_Isend, rank 1 a
// window of 64 MPI_Irecv, both MPI_Waitall, then rank 1 acknowledges the
// window with a 4-byte message; windows for about --ms after about
// --warmup-ms of them. One line per size:
// "mpi-stream size=8 messages=1234567 seconds=0.150".
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

constexpr int kWindow = 64;  // osu_mbw_mr's default window
constexpr int kTagData = 1;
constexpr int kTagAck = 2;

double Nanos(Clock::duration d) {
  return std::chrono::duration<double, std::nano>(d).count();
}

// Both ranks run `count` round trips of `size` bytes.
void RoundTrips(int rank, std::vector<char>& buffer, int size, long count) {
  for (long i = 0; i < count; ++i) {
    if (rank == 0) {
      MPI_Send(buffer.data(), size, MPI_BYTE, 1, kTagData, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), size, MPI_BYTE, 1, kTagData, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buffer.data(), size, MPI_BYTE, 0, kTagData, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), size, MPI_BYTE, 0, kTagData, MPI_COMM_WORLD);
    }
  }
}

double MeasurePingPong(int rank, int size, double measure_ns) {
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

// Both ranks run `count` windows of `size`-byte messages, 0 to 1.
void Windows(int rank, std::vector<char>& buffer, int size, long count) {
  MPI_Request requests[kWindow];
  char ack[4] = {};
  for (long w = 0; w < count; ++w) {
    for (int i = 0; i < kWindow; ++i) {
      // osu_mbw_mr sends every message of a window from one buffer and
      // receives them into one buffer.
      if (rank == 0) {
        MPI_Isend(buffer.data(), size, MPI_BYTE, 1, kTagData, MPI_COMM_WORLD, &requests[i]);
      } else {
        MPI_Irecv(buffer.data(), size, MPI_BYTE, 0, kTagData, MPI_COMM_WORLD, &requests[i]);
      }
    }
    MPI_Waitall(kWindow, requests, MPI_STATUSES_IGNORE);
    if (rank == 0) {
      MPI_Recv(ack, 4, MPI_BYTE, 1, kTagAck, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Send(ack, 4, MPI_BYTE, 0, kTagAck, MPI_COMM_WORLD);
    }
  }
}

// Messages per second, as messages sent and the seconds they took.
void MeasureStream(int rank, int size, double warmup_ns, double measure_ns, long* messages,
                   double* seconds) {
  std::vector<char> buffer(static_cast<size_t>(size), 'x');
  auto start = Clock::now();
  Windows(rank, buffer, size, 10);
  double window = Nanos(Clock::now() - start) / 10;
  long plan[2] = {std::max(1L, static_cast<long>(warmup_ns / window)),
                  std::max(10L, static_cast<long>(measure_ns / window))};
  MPI_Bcast(plan, 2, MPI_LONG, 0, MPI_COMM_WORLD);
  Windows(rank, buffer, size, plan[0]);
  start = Clock::now();
  Windows(rank, buffer, size, plan[1]);
  *seconds = Nanos(Clock::now() - start) * 1e-9;
  *messages = plan[1] * kWindow;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::string sizes = "8,64,4096,65536";
  std::string mode = "pingpong";
  double measure_ms = 150;
  double warmup_ms = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--sizes") == 0) sizes = argv[i + 1];
    if (std::strcmp(argv[i], "--ms") == 0) measure_ms = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--warmup-ms") == 0) warmup_ms = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--mode") == 0) mode = argv[i + 1];
  }
  if (ranks != 2 || (mode != "pingpong" && mode != "stream")) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "tocl-bench-mpi-pingpong: needs exactly 2 ranks and --mode pingpong or "
                   "stream\n");
    }
    MPI_Finalize();
    return 2;
  }
  for (size_t begin = 0; begin < sizes.size();) {
    size_t end = sizes.find(',', begin);
    if (end == std::string::npos) end = sizes.size();
    int size = std::atoi(sizes.substr(begin, end - begin).c_str());
    begin = end + 1;
    if (mode == "pingpong") {
      double one_way = MeasurePingPong(rank, size, measure_ms * 1e6);
      if (rank == 0) std::printf("mpi-pingpong size=%d one_way_ns=%.1f\n", size, one_way);
    } else {
      long messages = 0;
      double seconds = 0;
      MeasureStream(rank, size, warmup_ms * 1e6, measure_ms * 1e6, &messages, &seconds);
      if (rank == 0) {
        std::printf("mpi-stream size=%d messages=%ld seconds=%.6f\n", size, messages, seconds);
      }
    }
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
