#include "mpi_pingpong.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "child_process.h"  // tests/support: tocl::testing::RunProgram

namespace tocl::bench::msg {

std::string MpiName(MpiBtl btl) {
  return btl == MpiBtl::kVader ? "Open MPI vader" : "Open MPI tcp";
}

#if defined(TOCL_BENCH_MPIEXEC) && defined(TOCL_BENCH_MPI_PINGPONG)

namespace {

// mpiexec starts its daemons and both ranks before the run: slack for that.
constexpr auto kSlack = std::chrono::seconds(60);

int64_t Millis(std::chrono::nanoseconds time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time).count();
}

// Open MPI refuses to run as root unless told both ways; MPICH ignores the
// variables.
const std::vector<std::string>& RootEnv() {
  static const std::vector<std::string> kEnv = {"OMPI_ALLOW_RUN_AS_ROOT=1",
                                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  return kEnv;
}

}  // namespace

bool MpiPingPongBuilt() {
  return true;
}

Status MpiPeerAvailable() {
  if (::access(TOCL_BENCH_MPIEXEC, X_OK) == 0) return Status::Ok();  // an absolute path
  return Unavailable(fmt::format(
      "{} (found when tocl-bench was configured) is gone: run deploy/install-bench-peers.sh",
      TOCL_BENCH_MPIEXEC));
}

namespace {

// Runs our MPI program under mpiexec: `mode` over `btl` for `sizes` ("8" or
// "8,64,..."); its output, or why it did not run to its end.
Result<tocl::testing::ProgramResult> RunMpiProgram(const char* mode, MpiBtl btl,
                                                   const std::string& sizes,
                                                   std::chrono::nanoseconds warmup,
                                                   std::chrono::nanoseconds measure) {
  TOCL_RETURN_IF_ERROR(MpiPeerAvailable());
  std::vector<std::string> args = {TOCL_BENCH_MPIEXEC, "-n", "2"};
  if (::geteuid() == 0) args.emplace_back("--allow-run-as-root");
  for (const char* arg : {"--mca", "pml", "ob1", "--mca", "btl"}) args.emplace_back(arg);
  if (btl == MpiBtl::kVader) {
    args.emplace_back("vader,self");
  } else {
    for (const char* arg : {"tcp,self", "--mca", "btl_tcp_if_include", "lo"}) {
      args.emplace_back(arg);
    }
  }
  for (const std::string& arg :
       {std::string(TOCL_BENCH_MPI_PINGPONG), std::string("--mode"), std::string(mode),
        std::string("--sizes"), sizes, std::string("--ms"), std::to_string(Millis(measure)),
        std::string("--warmup-ms"), std::to_string(Millis(warmup))}) {
    args.push_back(arg);
  }
  const auto timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(warmup + measure) + kSlack;
  TOCL_ASSIGN_OR_RETURN(tocl::testing::ProgramResult out,
                        tocl::testing::RunProgram(args, timeout, RootEnv()));
  if (out.timed_out) {
    return DeadlineExceeded(fmt::format("{} still running after {} ms; it wrote: {}",
                                        TOCL_BENCH_MPIEXEC, timeout.count(), out.output));
  }
  return out;
}

}  // namespace

Result<std::vector<std::pair<uint32_t, double>>> RunMpiPingPong(const std::vector<uint32_t>& sizes,
                                                                std::chrono::nanoseconds measure) {
  std::string size_list;
  for (uint32_t size : sizes) size_list += fmt::format("{}{}", size_list.empty() ? "" : ",", size);
  TOCL_ASSIGN_OR_RETURN(
      tocl::testing::ProgramResult out,
      RunMpiProgram("pingpong", MpiBtl::kVader, size_list, std::chrono::nanoseconds(0), measure));
  std::vector<std::pair<uint32_t, double>> results;
  std::istringstream lines(out.output);
  for (std::string line; std::getline(lines, line);) {
    unsigned size = 0;
    double nanos = 0;
    if (std::sscanf(line.c_str(), "mpi-pingpong size=%u one_way_ns=%lf", &size, &nanos) == 2) {
      results.emplace_back(size, nanos);
    }
  }
  if (out.exit_code != 0 || results.size() != sizes.size()) {
    return Unavailable(fmt::format("{} failed ({}): {}", TOCL_BENCH_MPI_PINGPONG,
                                   tocl::testing::ExitStatusText(out.exit_code), out.output));
  }
  return results;
}

Result<MpiFigures> RunMpi(MpiCase what, MpiBtl btl, uint32_t size, std::chrono::nanoseconds warmup,
                          std::chrono::nanoseconds measure) {
  TOCL_ASSIGN_OR_RETURN(tocl::testing::ProgramResult out,
                        RunMpiProgram(what == MpiCase::kPingPong ? "pingpong" : "stream", btl,
                                      std::to_string(size), warmup, measure));
  MpiFigures figures;
  bool found = false;
  size_t begin = 0;
  while (!found && begin < out.output.size()) {
    size_t end = out.output.find('\n', begin);
    if (end == std::string::npos) end = out.output.size();
    std::string line = out.output.substr(begin, end - begin);
    begin = end + 1;
    unsigned got_size = 0;
    unsigned long messages = 0;
    if (what == MpiCase::kPingPong) {
      found = std::sscanf(line.c_str(), "mpi-pingpong size=%u one_way_ns=%lf", &got_size,
                          &figures.one_way_ns) == 2;
    } else {
      found = std::sscanf(line.c_str(), "mpi-stream size=%u messages=%lu seconds=%lf", &got_size,
                          &messages, &figures.seconds) == 3;
      figures.messages = messages;
    }
  }
  if (out.exit_code != 0 || !found) {
    return Unavailable(fmt::format("{} over {} failed ({}): {}", TOCL_BENCH_MPI_PINGPONG,
                                   MpiName(btl), tocl::testing::ExitStatusText(out.exit_code),
                                   out.output));
  }
  return figures;
}

#else

bool MpiPingPongBuilt() {
  return false;
}

Result<std::vector<std::pair<uint32_t, double>>> RunMpiPingPong(const std::vector<uint32_t>&,
                                                                std::chrono::nanoseconds) {
  return Unavailable("this tocl-bench was built without MPI");
}

Status MpiPeerAvailable() {
  return Unavailable(
      "this tocl-bench was built without MPI: run deploy/install-bench-peers.sh, then configure "
      "the build again (cmake --preset release)");
}

Result<MpiFigures> RunMpi(MpiCase, MpiBtl, uint32_t, std::chrono::nanoseconds,
                          std::chrono::nanoseconds) {
  return MpiPeerAvailable();
}

#endif

}  // namespace tocl::bench::msg
