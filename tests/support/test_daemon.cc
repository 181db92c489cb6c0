#include "test_daemon.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "failure_check.h"

namespace tocl::testing {

using std::chrono::milliseconds;

const char* ToclsdPath() {
  return TOCL_TOCLSD_PATH;
}

std::vector<std::string> TestSpawnAllow() {
  // The daemon matches real paths.
  std::error_code error;
  std::filesystem::path build = std::filesystem::canonical(TOCL_BUILD_DIR, error);
  if (error) build = TOCL_BUILD_DIR;
  return {(build / "tests/integration/*").string(), (build / "tests/netns/helpers/*").string(),
          "/usr/bin/sleep", "/usr/bin/false"};
}

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)), dir_("toclsd-test-") {}

Daemon::~Daemon() {
  std::string state = "not started";
  if (process_) {
    // A daemon that died on its own (a crash) says so in the failure report.
    state = process_->Exited() ? "exited on its own: " +
                                     ExitStatusText(process_->Wait(milliseconds(0)).value_or(-1))
                               : "running";
  }
  if (running()) (void)Kill();
  if (CurrentTestFailed()) {
    fmt::print(stderr,
               "---- toclsd log ({}; toclsd {}), last 4000 bytes ----\n{}\n"
               "---- end of toclsd log ----\n",
               log_path(), state, LogTail());
    std::fflush(stderr);
  }
}

std::vector<std::string> Daemon::CommandLine() const {
  std::vector<std::string> argv = options_.command_prefix;
  argv.insert(argv.end(), {options_.toclsd_path.empty() ? ToclsdPath() : options_.toclsd_path,
                           "--state-dir", state_dir(), "--socket", socket_path(), "--listen",
                           options_.listen, "--log-level", options_.log_level});
  if (!options_.host_name.empty()) {
    argv.insert(argv.end(), {"--host-name", options_.host_name});
  }
  if (options_.host_id) {
    argv.insert(argv.end(), {"--host-id", std::to_string(*options_.host_id)});
  }
  if (!options_.networks.empty()) {
    argv.insert(argv.end(), {"--networks", options_.networks});
  }
  if (options_.grace_period_seconds) {
    argv.insert(argv.end(), {"--grace-period", std::to_string(*options_.grace_period_seconds)});
  }
  if (options_.seed) argv.push_back("--seed");
  for (const std::string& address : options_.join) {
    argv.insert(argv.end(), {"--join", address});
  }
  if (options_.heartbeat_interval_seconds) {
    argv.insert(argv.end(),
                {"--heartbeat-interval", fmt::format("{}", *options_.heartbeat_interval_seconds)});
  }
  if (options_.down_after_seconds) {
    argv.insert(argv.end(), {"--down-after", fmt::format("{}", *options_.down_after_seconds)});
  }
  for (const std::string& glob : options_.spawn_allow) {
    argv.insert(argv.end(), {"--spawn-allow", glob});
  }
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  return argv;
}

Status Daemon::Start() {
  if (running()) return FailedPrecondition("toclsd is already running");
  {
    std::ofstream log(log_path(), std::ios::app);
    log << "==== harness: starting toclsd ====\n";
  }
  SpawnOptions spawn;
  spawn.output_path = log_path();
  TOCL_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn(CommandLine(), spawn));
  process_ = std::move(child);

  Status last = Unavailable("no attempt yet");
  bool exited = false;
  bool ready = WaitUntil(
      [&] {
        if (process_->Exited()) {
          exited = true;
          return true;
        }
        auto client = DirectoryClient::Connect(address(), milliseconds(200));
        if (!client.ok()) {
          last = client.status();
          return false;
        }
        auto ping = (*client)->Ping();
        last = ping.status();
        return ping.ok();
      },
      options_.ready_timeout, milliseconds(20));
  if (exited) {
    int status = process_->Wait(milliseconds(0)).value_or(-1);
    return Unavailable(fmt::format("toclsd exited during start-up ({}); log:\n{}",
                                   ExitStatusText(status), LogTail()));
  }
  if (!ready) {
    return Unavailable(fmt::format("toclsd did not answer within {} ms (last: {}); log:\n{}",
                                   options_.ready_timeout.count(), last.ToString(), LogTail()));
  }
  return Status::Ok();
}

Result<int> Daemon::Stop() {
  if (!running()) return FailedPrecondition("toclsd is not running");
  TOCL_RETURN_IF_ERROR(process_->Signal(SIGTERM));
  Result<int> status = process_->Wait(std::chrono::seconds(10));
  if (!status.ok()) {
    (void)process_->Kill();
    status = DeadlineExceeded(
        fmt::format("toclsd did not stop within 10 s of SIGTERM; log:\n{}", LogTail()));
  }
  process_.reset();  // stopped by us, not on its own
  return status;
}

Status Daemon::Kill() {
  if (!running()) return FailedPrecondition("toclsd is not running");
  Status killed = process_->Kill().status();
  process_.reset();
  return killed;
}

Result<std::string> Daemon::tcp_address() const {
  if (!running()) return FailedPrecondition("toclsd is not running");
  const std::string path = state_dir() + "/listen-address";
  std::ifstream file(path);
  std::string address;
  if (!file || !std::getline(file, address) || address.empty()) {
    return NotFound(fmt::format("{} holds no address (is TCP disabled?)", path));
  }
  return address;
}

Status Daemon::Signal(int signal) {
  if (!running()) return FailedPrecondition("toclsd is not running");
  return process_->Signal(signal);
}

Result<int> Daemon::thread_count() const {
  if (!running()) return FailedPrecondition("toclsd is not running");
  return ProcessThreadCount(pid());
}

std::string Daemon::LogTail(size_t max_bytes) const {
  return FileTail(log_path(), max_bytes);
}

Result<std::unique_ptr<DirectoryClient>> Daemon::Connect() const {
  return DirectoryClient::Connect(address(), std::chrono::seconds(5));
}

Result<int64_t> Daemon::rss_kib() const {
  if (!running()) return FailedPrecondition("toclsd is not running");
  return ProcessRssKib(pid());
}

Result<int> Daemon::fd_count() const {
  if (!running()) return FailedPrecondition("toclsd is not running");
  return ProcessFdCount(pid());
}

}  // namespace tocl::testing
