// The failure listener needs Catch2's reporter interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "daemon_harness.h"

#include <sstream>

#include "catch_failure_listener.h"

namespace tocl::testing {

const char* EnrollWorkerPath() {
  return TOCL_ENROLL_WORKER_PATH;
}
const char* CliPath() {
  return TOCL_CLI_PATH;
}

std::vector<ThreadInfo> MakeThreads(Gid process, uint32_t first, uint32_t count,
                                    std::string_view name_prefix, const Attributes& attributes) {
  std::vector<ThreadInfo> threads;
  threads.reserve(count);
  for (uint32_t i = first; i < first + count; ++i) {
    threads.push_back(
        {Gid::Thread(process, i), std::string(name_prefix) + std::to_string(i), attributes});
  }
  return threads;
}

EnrollOptions ProcessNamed(std::string name, Attributes attributes) {
  EnrollOptions options;
  options.name = std::move(name);
  options.attributes = std::move(attributes);
  return options;
}

std::vector<std::string> EnrollWorkerCommand(const std::string& address, const std::string& name,
                                             uint32_t threads, uint32_t batch, bool hold) {
  std::vector<std::string> argv = {EnrollWorkerPath(),
                                   "--daemon",
                                   address,
                                   "--name",
                                   name,
                                   "--threads",
                                   std::to_string(threads),
                                   "--batch",
                                   std::to_string(batch)};
  if (hold) argv.push_back("--hold");
  return argv;
}

Result<Gid> WorkerGid(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("gid ", 0) == 0) return Gid::Parse(line.substr(4));
  }
  return NotFound("the worker has not printed its gid yet");
}

DaemonOptions LoopbackClusterMember(const std::string& name, std::vector<std::string> extra_args) {
  DaemonOptions options;
  options.listen = "127.0.0.1:0";
  options.host_name = name;
  options.heartbeat_interval_seconds = 0.2;
  options.down_after_seconds = 1.0;
  options.extra_args = std::move(extra_args);
  return options;
}

}  // namespace tocl::testing
