// tocl-spawn-worker: a tocl process with entries other processes start
// threads on (Runtime::SpawnThread), for the spawn-thread and notification
// integration tests.
//
//   tocl-spawn-worker --daemon unix:/tmp/x/toclsd.sock --name target
//   tocl-spawn-worker ... --until-signal     (spawned by a daemon: no stdin)
//   tocl-spawn-worker ... --exit-code 3
//
// Registers the entries, starts a tocl::Runtime and prints on stdout
//   process h1.p5
//   parent h1.p2.t1          (Runtime::parent(); "parent null" when none)
//   ready
// then waits for stdin to close (--until-signal: for SIGTERM or SIGINT;
// --exit-code: for nothing), shuts the runtime down (which wakes and waits
// for the entry threads still running) and prints
//   shutdown ok
// and exits with 0 (or the --exit-code).
// Entries (tags as the tests expect them):
//   echo   sends its payload to its spawner (tag 1), then sends the next
//          message it receives back to that message's source (tag 2), and
//          returns.
//   count  the payload is a decimal N: sends N messages "0".."N-1" to its
//          spawner (tag 3) and returns (N = 0: returns at once).
//   block  waits in Recv until the runtime shuts down, prints
//          "block-returned CODE" (the status code name Recv returned), and
//          returns.
// Exit codes: 0 success (or --exit-code), 2 usage, 4 the runtime did not
// start.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "tocl/runtime.h"

namespace {

std::mutex print_mu;

void PrintLine(const std::string& line) {
  std::lock_guard lock(print_mu);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

std::string_view Text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

void Echo(tocl::ThreadContext& context) {
  if (!context.runtime.Send(context.self, context.spawner, 1, context.payload).ok()) return;
  auto message = context.runtime.RecvFor(context.self, std::chrono::seconds(30));
  if (!message.ok()) return;
  (void)context.runtime.Send(context.self, message->source(), 2, message->span());
}

void Count(tocl::ThreadContext& context) {
  const std::string_view text = Text(context.payload);
  uint32_t count = 0;
  std::from_chars(text.data(), text.data() + text.size(), count);
  for (uint32_t i = 0; i < count; ++i) {
    if (!context.runtime.Send(context.self, context.spawner, 3, Bytes(std::to_string(i))).ok()) {
      return;
    }
  }
}

void Block(tocl::ThreadContext& context) {
  auto message = context.runtime.Recv(context.self);
  PrintLine(fmt::format("block-returned {}", tocl::StatusCodeName(message.status().code())));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a tocl process with entries to spawn threads on"};
  std::string daemon;
  std::string name = "spawn-worker";
  bool until_signal = false;
  std::optional<int> exit_code;
  app.add_option("--daemon", daemon, "the daemon's address")->required();
  app.add_option("--name", name, "the process's name");
  app.add_flag("--until-signal", until_signal,
               "run until SIGTERM or SIGINT, not until stdin closes");
  app.add_option("--exit-code", exit_code, "shut down at once and exit with this code");
  CLI11_PARSE(app, argc, argv);

  // Blocked before any thread starts, so every runtime thread inherits the
  // mask and sigwait below is the one to take them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (until_signal) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  for (auto [entry, fn] : {std::pair{"echo", &Echo}, {"count", &Count}, {"block", &Block}}) {
    if (tocl::Status status = tocl::register_entry(entry, fn); !status.ok()) {
      PrintLine(fmt::format("error {}", status.ToString()));
      return 2;
    }
  }
  tocl::RuntimeOptions options;
  options.daemon_address = daemon;
  options.name = name;
  auto runtime = tocl::Runtime::Start(options);
  if (!runtime.ok()) {
    PrintLine(fmt::format("start-failed {}", runtime.status().ToString()));
    return 4;
  }
  PrintLine(fmt::format("process {}", (*runtime)->gid().ToString()));
  PrintLine(fmt::format("parent {}", (*runtime)->parent().ToString()));
  PrintLine("ready");
  if (until_signal) {
    int signal = 0;
    sigwait(&stop_signals, &signal);
  } else if (!exit_code) {
    char buffer[256];
    while (::read(STDIN_FILENO, buffer, sizeof buffer) > 0) {
    }
  }
  tocl::Status status = (*runtime)->Shutdown();
  PrintLine(fmt::format("shutdown {}", status.ok() ? "ok" : status.ToString()));
  return exit_code.value_or(0);
}
