#include "messaging_support.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace tocl::testing {

using std::chrono::milliseconds;

const char* MsgWorkerPath() {
  return TOCL_MSG_WORKER_PATH;
}

bool SanitizedBuild() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  const char* forced = std::getenv("TOCL_TEST_SANITIZED");
  return forced != nullptr && *forced != '\0' && std::string_view(forced) != "0";
#endif
}

uint64_t MessageCount(uint64_t normal, uint64_t sanitized) {
  if (const char* text = std::getenv("TOCL_TEST_MESSAGES"); text != nullptr && *text != '\0') {
    return std::strtoull(text, nullptr, 10);
  }
  return SanitizedBuild() ? sanitized : normal;
}

std::vector<std::string> MsgWorkerCommand(const std::string& daemon_address,
                                          const MsgWorkerArgs& args) {
  std::vector<std::string> argv = {MsgWorkerPath(),
                                   "--daemon",
                                   daemon_address,
                                   "--role",
                                   args.role,
                                   "--name",
                                   args.name,
                                   "--threads",
                                   std::to_string(args.threads),
                                   "--count",
                                   std::to_string(args.count),
                                   "--size",
                                   std::to_string(args.size),
                                   "--tag",
                                   std::to_string(args.tag)};
  if (!args.subsystems.empty()) argv.insert(argv.end(), {"--subsystems", args.subsystems});
  if (!args.peer_name.empty()) {
    argv.insert(argv.end(), {"--peer-name", args.peer_name, "--peer-threads",
                             std::to_string(args.peer_threads)});
  }
  for (Gid to : args.to) argv.insert(argv.end(), {"--to", to.ToString()});
  if (args.random_size) argv.push_back("--random-size");
  if (args.unexpected_cap != 0) {
    argv.insert(argv.end(), {"--unexpected-cap", std::to_string(args.unexpected_cap)});
  }
  if (args.send_queue_depth != 0) {
    argv.insert(argv.end(), {"--send-queue-depth", std::to_string(args.send_queue_depth)});
  }
  if (args.duration_ms != 0) {
    argv.insert(argv.end(), {"--duration-ms", std::to_string(args.duration_ms)});
  }
  if (args.track) argv.push_back("--track");
  if (args.copy) argv.push_back("--copy");
  if (args.pairwise) argv.push_back("--pairwise");
  if (args.linger) argv.push_back("--linger");
  if (args.pause_before) {
    argv.insert(argv.end(), {"--pause-before", std::to_string(*args.pause_before)});
  }
  if (args.kill_self) argv.push_back("--kill-self");
  argv.insert(argv.end(), args.extra.begin(), args.extra.end());
  return argv;
}

Result<MsgWorker> MsgWorker::Start(const Daemon& daemon, const MsgWorkerArgs& args,
                                   milliseconds ready_timeout) {
  return Launch(MsgWorkerCommand(daemon.address(), args), args.threads, {}, ready_timeout);
}

Result<MsgWorker> MsgWorker::Launch(const std::vector<std::string>& argv, uint32_t threads,
                                    std::vector<std::string> env, milliseconds ready_timeout) {
  SpawnOptions spawn;
  spawn.pipe_stdin = true;
  spawn.env = std::move(env);
  TOCL_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Spawn(argv, spawn));
  MsgWorker worker(std::move(child));
  if (!worker.WaitForLine("ready", ready_timeout)) {
    std::string command;
    for (const std::string& arg : argv) command += (command.empty() ? "" : " ") + arg;
    return Unavailable(fmt::format("{} not ready after {} ms ({}); output:\n{}", command,
                                   ready_timeout.count(),
                                   worker.child_.Exited() ? "exited" : "running", worker.Output()));
  }
  std::istringstream lines(worker.Output());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("process ", 0) == 0) {
      TOCL_ASSIGN_OR_RETURN(worker.process_, Gid::Parse(line.substr(8)));
    } else if (line.rfind("thread ", 0) == 0) {
      TOCL_ASSIGN_OR_RETURN(Gid thread, Gid::Parse(line.substr(7)));
      worker.threads_.push_back(thread);
    }
  }
  if (!worker.process_.is_process() || worker.threads_.size() != threads) {
    return Internal(argv.front() + " printed no gids; output:\n" + worker.Output());
  }
  return worker;
}

std::optional<std::string> MsgWorker::Line(std::string_view prefix) const {
  std::istringstream lines(Output());
  std::string line;
  while (std::getline(lines, line)) {
    if (line == prefix) return std::string();
    if (line.size() > prefix.size() && line.compare(0, prefix.size(), prefix) == 0 &&
        line[prefix.size()] == ' ') {
      return line.substr(prefix.size() + 1);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> MsgWorker::LastValue(std::string_view prefix, std::string_view key) const {
  std::istringstream lines(Output());
  std::string line;
  std::optional<uint64_t> value;
  const std::string needle = " " + std::string(key) + "=";
  while (std::getline(lines, line)) {
    if (line.size() <= prefix.size() || line.compare(0, prefix.size(), prefix) != 0 ||
        line[prefix.size()] != ' ') {
      continue;
    }
    size_t at = line.find(needle);
    if (at == std::string::npos) continue;
    const char* digits = line.c_str() + at + needle.size();
    if (!std::isdigit(static_cast<unsigned char>(*digits))) continue;
    value = std::strtoull(digits, nullptr, 10);
  }
  return value;
}

bool MsgWorker::WaitForLine(std::string_view prefix, milliseconds timeout) const {
  return WaitUntil([&] { return Line(prefix).has_value() || child_.Exited(); }, timeout) &&
         Line(prefix).has_value();
}

bool MsgWorker::WaitForValue(std::string_view prefix, std::string_view key, uint64_t value,
                             milliseconds timeout) const {
  auto reached = [&] { return LastValue(prefix, key).value_or(0) >= value; };
  return WaitUntil([&] { return reached() || child_.Exited(); }, timeout) && reached();
}

Result<int> MsgWorker::Finish(milliseconds timeout) {
  child_.CloseStdin();
  return child_.Wait(timeout);
}

RuntimeOptions RuntimeOptionsFor(const Daemon& daemon, std::string name, std::string subsystems) {
  RuntimeOptions options;
  options.daemon_address = daemon.address();
  options.name = std::move(name);
  options.subsystems = std::move(subsystems);
  return options;
}

Result<std::unique_ptr<Runtime>> StartRuntime(const Daemon& daemon, std::string name,
                                              std::string subsystems) {
  return Runtime::Start(RuntimeOptionsFor(daemon, std::move(name), std::move(subsystems)));
}

Result<std::unique_ptr<Runtime>> StartRuntime(RuntimeOptions options) {
  return Runtime::Start(std::move(options));
}

Result<RuntimePair> StartRuntimePair(const Daemon& daemon, const std::string& name,
                                     std::string subsystems) {
  RuntimePair pair;
  TOCL_ASSIGN_OR_RETURN(pair.receiver, StartRuntime(daemon, name + "-receiver", subsystems));
  TOCL_ASSIGN_OR_RETURN(pair.sender, StartRuntime(daemon, name + "-sender", subsystems));
  TOCL_ASSIGN_OR_RETURN(pair.r, pair.receiver->EnrollThread("r"));
  TOCL_ASSIGN_OR_RETURN(pair.s, pair.sender->EnrollThread("s"));
  return pair;
}

uint64_t FramesReceived(const Runtime& runtime) {
  uint64_t frames = 0;
  for (const NetworkStats& network : runtime.Networks()) frames += network.frames_received;
  return frames;
}

std::vector<std::byte> PatternBytes(size_t size, uint32_t seed) {
  std::vector<std::byte> bytes(size);
  uint32_t x = seed * 2654435761u + 1;
  for (std::byte& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return bytes;
}

std::string Text(const Buffer& buffer) {
  return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
}

std::vector<std::string> ShmSegments() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    std::string name = entry.path().filename().string();
    // "tocl-..." or "tocl.PID...."
    if (name.size() > 5 && name.rfind("tocl", 0) == 0 && (name[4] == '-' || name[4] == '.')) {
      names.push_back(name);
    }
  }
  return names;
}

std::vector<std::string> ShmSegmentsOf(pid_t pid) {
  const std::string wanted = std::to_string(pid);
  std::vector<std::string> names;
  for (const std::string& name : ShmSegments()) {
    // The numbers in the name, each compared whole: pid 12 is not in "tocl-123".
    for (size_t i = 0; i < name.size();) {
      if (!std::isdigit(static_cast<unsigned char>(name[i]))) {
        ++i;
        continue;
      }
      size_t end = i;
      while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
      if (name.compare(i, end - i, wanted) == 0 && end - i == wanted.size()) {
        names.push_back(name);
        break;
      }
      i = end;
    }
  }
  return names;
}

Result<std::string> TcpEndpointOf(DirectoryClient& client, Gid process) {
  TOCL_ASSIGN_OR_RETURN(Entity entity, client.Lookup(process));
  for (const Endpoint& endpoint : entity.endpoints) {
    if (endpoint.subsystem == "tcp") return endpoint.address;
  }
  return NotFound(fmt::format("{} published no tcp endpoint ({} endpoints)", process.ToString(),
                              entity.endpoints.size()));
}

}  // namespace tocl::testing
