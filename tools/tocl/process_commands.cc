#include "process_commands.h"

#include <fmt/format.h>
#include <string.h>  // sigabbrev_np

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <thread>

#include "exit_code.h"
#include "json_output.h"
#include "support/daemon_connection.h"
#include "support/entity_text.h"
#include "support/table.h"
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace tocl::cli {
namespace {

// `tocl logs --follow` asks again this often while the process runs: a
// person is watching, and ReadLog is one small round trip.
constexpr auto kFollowInterval = std::chrono::milliseconds(200);

volatile std::sig_atomic_t interrupted = 0;

extern "C" void OnInterrupt(int /*signal*/) {
  interrupted = 1;
}

void StopOnInterrupt() {
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

Result<Gid> ParseGidOfKind(std::string_view command, std::string_view text, bool process_only) {
  auto gid = Gid::Parse(text);
  if (!gid.ok()) return gid.status().WithContext(command);
  if (process_only && !gid->is_process()) {
    return InvalidArgument(
        fmt::format("{} wants a process id like h1.p2, not '{}'{}", command, text,
                    gid->is_thread() ? " (threads end when their entry returns)" : ""));
  }
  return *gid;
}

Result<std::pair<std::string, std::string>> SplitKeyValue(std::string_view flag,
                                                          std::string_view text) {
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos || equals == 0) {
    return InvalidArgument(fmt::format("{} wants KEY=VALUE, not '{}'", flag, text));
  }
  return std::pair{std::string(text.substr(0, equals)), std::string(text.substr(equals + 1))};
}

// How an ended entity ended, for people.
std::string Ending(const Entity& entity) {
  if (entity.state == EntityState::kUnreachable) {
    return fmt::format("{} is unreachable: its host {} is down", entity.gid.ToString(),
                       entity.gid.host().ToString());
  }
  std::string text = fmt::format("{} exited", entity.gid.ToString());
  if (entity.exit_signal) {
    const char* name = sigabbrev_np(*entity.exit_signal);
    text += fmt::format(": killed by signal {} (SIG{})", *entity.exit_signal, name ? name : "?");
  } else if (entity.exit_status) {
    text += fmt::format(": status {}", *entity.exit_status);
  }
  if (!entity.exit_reason.empty()) text += fmt::format(" ({})", entity.exit_reason);
  return text;
}

bool Ended(const Entity& entity) {
  return entity.state != EntityState::kRunning;
}

// Whether `event` ends a wait for `target`: its own exit, its process's exit
// (threads), or its host going down.
bool EndsWait(const ChangeEvent& event, Gid target) {
  if (event.op == ChangeOp::kUnreachable) return event.gid == target.host();
  if (event.op != ChangeOp::kExited) return false;
  return event.gid == target || (target.is_thread() && event.gid == target.process());
}

}  // namespace

Result<int> ParseSignal(std::string_view text) {
  if (text.empty()) return InvalidArgument("empty signal");
  int number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error == std::errc() && end == text.data() + text.size()) {
    if (number < 1 || number > 64) {
      return InvalidArgument(fmt::format("signal {} is not 1..64", number));
    }
    return number;
  }
  std::string name(text);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (name.starts_with("SIG")) name.erase(0, 3);
  for (int signal = 1; signal < 32; ++signal) {
    const char* abbreviation = sigabbrev_np(signal);
    if (abbreviation != nullptr && name == abbreviation) return signal;
  }
  return InvalidArgument(
      fmt::format("unknown signal '{}' (a number, or a name like TERM, KILL, INT, HUP)", text));
}

int RunSpawn(const CommonOptions& options, const SpawnCommand& spawn) {
  if (spawn.command.empty()) return Fail(kExitUsage, "spawn wants a program: tocl spawn -- PROG");
  if (!spawn.host.empty() && !spawn.where.empty()) {
    return Fail(kExitUsage, "spawn takes --host or --where, not both");
  }
  SpawnOptions request;
  request.executable = spawn.command.front();
  request.args.assign(spawn.command.begin() + 1, spawn.command.end());
  request.env = spawn.env;
  request.name = spawn.name;
  request.where = spawn.where;
  request.working_directory = spawn.working_directory;
  request.enroll_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(0.0, spawn.enroll_timeout_seconds) * 1000));
  for (const std::string& text : spawn.attributes) {
    auto pair = SplitKeyValue("--attr", text);
    if (!pair.ok()) return Fail(kExitUsage, pair.status().message());
    request.attributes[pair->first] = pair->second;
  }
  if (!spawn.host.empty()) {
    auto host = Gid::Parse(spawn.host);
    if (!host.ok()) return Fail(host.status().WithContext("--host"));
    if (!host->is_host()) {
      return Fail(kExitUsage, fmt::format("--host wants a host id like h2, not '{}'", spawn.host));
    }
    request.host = *host;
  }
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  auto spawned = (*client)->SpawnProcess(request);
  if (!spawned.ok()) return Fail(spawned.status());
  if (options.json) {
    PrintJsonLine({{"gid", spawned->gid.ToString()},
                   {"pid", spawned->os_pid},
                   {"stdout", spawned->stdout_path},
                   {"stderr", spawned->stderr_path}});
  } else {
    Table table({"GID", "PID", "STDOUT", "STDERR"});
    table.AddRow({spawned->gid.ToString(), fmt::format("{}", spawned->os_pid), spawned->stdout_path,
                  spawned->stderr_path});
    table.Print();
  }
  return kExitOk;
}

int RunSpawnThread(const CommonOptions& options, const std::string& process,
                   const std::string& entry, const std::string& payload) {
  auto target = ParseGidOfKind("spawn-thread", process, /*process_only=*/true);
  if (!target.ok()) return Fail(kExitUsage, target.status().message());
  RuntimeOptions runtime_options;
  runtime_options.daemon_address = NormalizeDaemonAddress(options.daemon);
  runtime_options.name = "tocl-spawn-thread";
  runtime_options.stats_interval = std::chrono::milliseconds(0);
  auto runtime = Runtime::Start(runtime_options);
  if (!runtime.ok()) return Fail(runtime.status());
  auto self = (*runtime)->EnrollThread("tocl");
  if (!self.ok()) return Fail(self.status());
  auto thread = (*runtime)->SpawnThread(*self, *target, entry, std::as_bytes(std::span(payload)));
  if (!thread.ok()) return Fail(thread.status());
  if (options.json) {
    PrintJsonLine({{"gid", thread->ToString()}, {"process", target->ToString()}, {"entry", entry}});
  } else {
    fmt::print("{}\n", thread->ToString());
  }
  std::fflush(stdout);
  (void)(*runtime)->Shutdown();
  return kExitOk;
}

int RunKill(const CommonOptions& options, const std::string& gid_text, const std::string& signal) {
  auto target = ParseGidOfKind("kill", gid_text, /*process_only=*/true);
  if (!target.ok()) return Fail(kExitUsage, target.status().message());
  auto number = ParseSignal(signal);
  if (!number.ok()) return Fail(kExitUsage, number.status().message());
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  Status killed = (*client)->Kill(*target, *number);
  if (!killed.ok()) return Fail(killed);
  return kExitOk;
}

int RunWait(const CommonOptions& options, const std::string& gid_text, double timeout_seconds) {
  auto target = Gid::Parse(gid_text);
  if (!target.ok()) return Fail(target.status());
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  // The head first, then the entity: an ending between the two is in the
  // stream that starts after the head.
  auto head = (*client)->Ping();
  if (!head.ok()) return Fail(head.status());
  auto entity = (*client)->Lookup(*target);
  if (!entity.ok()) return Fail(entity.status());
  if (!Ended(*entity)) {
    StopOnInterrupt();
    const auto deadline =
        timeout_seconds > 0
            ? std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000))
            : std::chrono::steady_clock::time_point::max();
    bool ended = false;
    Status watched = (*client)->Watch(
        *head,
        [&](const ChangeEvent& event) {
          ended = EndsWait(event, *target);
          return !ended;
        },
        [&] { return interrupted != 0 || std::chrono::steady_clock::now() >= deadline; });
    if (!watched.ok()) return Fail(watched);
    if (!ended) {
      if (interrupted != 0) return Fail(kExitFailure, "interrupted");
      return Fail(kExitFailure,
                  fmt::format("{} still runs after {} s", target->ToString(), timeout_seconds));
    }
    entity = (*client)->Lookup(*target);
    if (!entity.ok()) return Fail(entity.status());
  }
  if (options.json) {
    PrintJsonLine(EntityToJson(*entity));
  } else {
    fmt::print("{}\n", Ending(*entity));
  }
  return kExitOk;
}

int RunLogs(const CommonOptions& options, const std::string& gid_text, bool stderr_stream,
            bool follow) {
  auto target = ParseGidOfKind("logs", gid_text, /*process_only=*/true);
  if (!target.ok()) return Fail(kExitUsage, target.status().message());
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  const LogStream stream = stderr_stream ? LogStream::kStderr : LogStream::kStdout;
  if (follow) StopOnInterrupt();
  uint64_t offset = 0;
  for (;;) {
    auto chunk = (*client)->ReadLog(*target, stream, offset);
    if (!chunk.ok()) return Fail(chunk.status());
    std::fwrite(chunk->data.data(), 1, chunk->data.size(), stdout);
    // Past the daemon's log_max_bytes the oldest output is gone: the data
    // starts later than asked.
    offset = chunk->offset + chunk->data.size();
    if (!chunk->data.empty() && offset < chunk->size) continue;  // more is there already
    std::fflush(stdout);
    if (!follow || chunk->process_exited || interrupted != 0) return kExitOk;
    std::this_thread::sleep_for(kFollowInterval);
  }
}

}  // namespace tocl::cli
