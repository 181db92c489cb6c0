#include "ucx_perftest.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "child_process.h"  // tests/support: tocl::testing::RunProgram

namespace tocl::bench::msg {
namespace {

constexpr const char* kProgram = "ucx_perftest";
// A run that has not ended this long after it should have is taken for hung.
constexpr auto kSlack = std::chrono::seconds(60);
// The client retries while the server has not started listening yet.
constexpr auto kConnectPatience = std::chrono::seconds(10);
// A first run, before the time of an iteration is known, about this long
// on the build VM.
constexpr uint64_t kFirstLatencyIterations = 20'000;
constexpr uint64_t kFirstStreamIterations = 100'000;
constexpr uint64_t kFirstLargeIterations = 5'000;

// A port nobody listens on now: the kernel's choice for a socket bound to
// port 0. Another process could take it before the server does; the run
// then fails with a clear error.
Result<int> FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  if (port < 0) return Internal("no free loopback port");
  return port;
}

const char* TestName(UcxTest test) {
  return test == UcxTest::kTagLat ? "tag_lat" : "tag_bw";
}

std::vector<std::string> TransportEnv(UcxTransport transport) {
  // UCX 1.13 (ucx_info -d) calls its shared-memory transports posix, sysv
  // and cma; "self" carries a process's messages to itself.
  std::vector<std::string> env = {"UCX_WARN_UNUSED_ENV_VARS=n"};
  if (transport == UcxTransport::kPosix) {
    env.emplace_back("UCX_TLS=posix,self");
  } else {
    env.emplace_back("UCX_TLS=tcp");
    env.emplace_back("UCX_NET_DEVICES=lo");
  }
  return env;
}

}  // namespace

Result<UcxPerftestFigures> ParseUcxPerftest(std::string_view output) {
  // The final row: 8 numbers and nothing else (-f prints the table's head,
  // its borders, and this one row).
  std::optional<UcxPerftestFigures> last;
  std::istringstream lines{std::string(output)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<double> numbers;
    std::string field;
    bool all_numbers = true;
    while (fields >> field) {
      char* end = nullptr;
      double value = std::strtod(field.c_str(), &end);
      if (end == field.c_str() || *end != '\0') {
        all_numbers = false;
        break;
      }
      numbers.push_back(value);
    }
    if (!all_numbers || numbers.size() != 8) continue;
    UcxPerftestFigures figures;
    figures.iterations = static_cast<uint64_t>(numbers[0]);
    figures.latency_p50_us = numbers[1];
    figures.latency_overall_us = numbers[3];
    figures.bandwidth_overall_mib_s = numbers[5];
    figures.rate_overall_per_s = numbers[7];
    last = figures;
  }
  if (!last) return Internal(fmt::format("no result row in ucx_perftest's output: {}", output));
  return *last;
}

Status UcxPerftestAvailable() {
  if (tocl::testing::FindProgram(kProgram).ok()) return Status::Ok();
  return Unavailable(
      "ucx_perftest is not installed (Debian's ucx-utils): run deploy/install-bench-peers.sh");
}

std::string UcxPerftest::Name() const {
  return transport_ == UcxTransport::kPosix ? "UCX posix" : "UCX tcp";
}

uint64_t UcxPerftest::IterationsFor(std::chrono::nanoseconds time) const {
  if (iteration_ns_ <= 0) {
    if (test_ == UcxTest::kTagLat) return kFirstLatencyIterations;
    return size_ > 4096 ? kFirstLargeIterations : kFirstStreamIterations;
  }
  auto n = static_cast<double>(time.count()) / iteration_ns_;
  return std::max<uint64_t>(100, static_cast<uint64_t>(n));
}

Result<UcxPerftestFigures> UcxPerftest::Run(std::chrono::nanoseconds warmup,
                                            std::chrono::nanoseconds measure) {
  TOCL_RETURN_IF_ERROR(UcxPerftestAvailable());
  TOCL_ASSIGN_OR_RETURN(std::string program, tocl::testing::FindProgram(kProgram));
  TOCL_ASSIGN_OR_RETURN(int port, FreePort());
  std::vector<std::string> args = {program,
                                   "-p",
                                   std::to_string(port),
                                   "-t",
                                   TestName(test_),
                                   "-s",
                                   std::to_string(size_),
                                   "-n",
                                   std::to_string(IterationsFor(measure)),
                                   "-w",
                                   std::to_string(std::max<uint64_t>(10, IterationsFor(warmup))),
                                   "-f"};
  const std::vector<std::string> env = TransportEnv(transport_);
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      warmup + measure + kSlack + kConnectPatience);
  TOCL_ASSIGN_OR_RETURN(tocl::testing::ChildProcess server,
                        tocl::testing::ChildProcess::Spawn(
                            args, {.output_path = "", .pipe_stdin = false, .env = env}));
  std::vector<std::string> client_args = args;
  client_args.insert(client_args.begin() + 1, "127.0.0.1");
  // The server listens once it has set UCX up; until then the client's
  // connect is refused and it exits at once: start it again.
  const auto give_up = std::chrono::steady_clock::now() + kConnectPatience;
  for (;;) {
    TOCL_ASSIGN_OR_RETURN(tocl::testing::ProgramResult out,
                          tocl::testing::RunProgram(client_args, timeout, env));
    if (out.timed_out) {
      return DeadlineExceeded(fmt::format("{} client still running after {} ms; it wrote: {}",
                                          kProgram, timeout.count(), out.output));
    }
    bool refused = out.exit_code != 0 && out.output.find("Connection refused") != std::string::npos;
    if (refused && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    Result<int> server_exit = server.Wait(kSlack);  // still running: killed by its destructor
    if (out.exit_code != 0) {
      return Unavailable(fmt::format("{} {} over {} failed ({}): {}", kProgram, TestName(test_),
                                     Name(), tocl::testing::ExitStatusText(out.exit_code),
                                     out.output));
    }
    TOCL_RETURN_IF_ERROR(server_exit.status().WithContext("ucx_perftest server"));
    TOCL_ASSIGN_OR_RETURN(UcxPerftestFigures figures, ParseUcxPerftest(out.output));
    if (figures.iterations == 0) return Internal("ucx_perftest ran no iterations");
    // What one iteration took: a round trip for tag_lat (its latency is
    // half of one), one message for tag_bw.
    iteration_ns_ = test_ == UcxTest::kTagLat ? 2e3 * figures.latency_overall_us
                                              : 1e9 / figures.rate_overall_per_s;
    return figures;
  }
}

}  // namespace tocl::bench::msg
