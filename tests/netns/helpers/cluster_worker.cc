// tocl-cluster-worker: both ends of the multi-host cluster tests and of
// `tocl-bench spawn`, through the public API only. Prints one line per
// event ("EVENT key value ...", see worker_lines.h); exit 0 on success, 1 on
// a failure (an "error" line says what), 2 on usage errors.
//
//   serve                 a process others spawn into: registers the entries
//                         "echo" (sends its payload back to the spawner, tag
//                         kTagEcho, and returns) and "park" (returns when it
//                         receives a message); says hello to its parent (tag
//                         kTagHello) when it was spawned by a thread; then
//                         answers kTagEcho messages and exits with N on an
//                         "exit N" message (kTagExit).
//   spawn-process --host H --program P [--count K] [--enroll-timeout-ms T]
//                         spawns `P serve` on host H K times; for each: its
//                         latency to enrolled, the hello, an echo, a
//                         notification by tag, "exit 7", the notice.
//   spawn-thread --process G [--count K] [--entry E]
//                         spawns K "echo" threads in G; prints each latency
//                         (spawn call, and until the echo arrived).
//   notify --target G [--callback]  prints the notice when G goes away.
//   members --query Q [--seconds S]  follows the members of Q (WatchMembers)
//                         for S seconds (60): one "member" line per callback.
//   send --to G           sends one message; prints the status.
//   ping --to G [--count K]  K round trips with a `serve` process's echo
//                         (the baseline of `tocl-bench spawn`); one line each.
//   exec --program P [--count K]  posix_spawn `P noop` and wait for it, K
//                         times: what starting the program costs by itself.
//   noop                  exits at once (no runtime).
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tocl/exit_notice.h"
#include "tocl/membership.h"
#include "tocl/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr tocl::Tag kTagHello = 1;
constexpr tocl::Tag kTagEchoThread = 2;
constexpr tocl::Tag kTagExit = 3;
constexpr tocl::Tag kTagEcho = 4;
constexpr tocl::Tag kTagNotice = 9;
constexpr auto kReplyTimeout = std::chrono::seconds(10);

std::mutex print_mu;

template <typename... Args>
void Say(fmt::format_string<Args...> format, Args&&... args) {
  std::lock_guard lock(print_mu);
  fmt::print(format, std::forward<Args>(args)...);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int Fail(std::string_view what, const tocl::Status& status) {
  Say("error what {} status {}", what, status.ToString());
  return 1;
}

std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string Text(const tocl::Buffer& buffer) {
  return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
}

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

std::string NoticeLine(const tocl::ExitNotice& notice) {
  // "status" takes the rest of the line (worker_lines.h), so the reason goes there.
  return fmt::format("notice gid {} what {} exit {} signal {} status {}", notice.gid.ToString(),
                     tocl::ExitWhatName(notice.what),
                     notice.exit_status ? std::to_string(*notice.exit_status) : "-",
                     notice.exit_signal ? std::to_string(*notice.exit_signal) : "-", notice.reason);
}

void RegisterEntries() {
  (void)tocl::register_entry("echo", [](tocl::ThreadContext& context) {
    (void)context.runtime.Send(context.self, context.spawner, kTagEchoThread, context.payload);
  });
  (void)tocl::register_entry(
      "park", [](tocl::ThreadContext& context) { (void)context.runtime.Recv(context.self); });
}

int Serve(tocl::Runtime& runtime, tocl::Gid self) {
  if (!runtime.parent().is_null()) {
    tocl::Status hello = runtime.Send(self, runtime.parent(), kTagHello, Bytes("hello"));
    if (!hello.ok()) return Fail("hello", hello);
  }
  Say("ready");
  for (;;) {
    auto message = runtime.Recv(self);
    if (!message.ok()) return Fail("recv", message.status());
    if (message->tag() == kTagExit) {
      const int code = std::atoi(Text(*message).c_str() + 5);  // "exit N"
      Say("exiting code {}", code);
      (void)runtime.Shutdown();
      std::_Exit(code);
    }
    if (message->tag() == kTagEcho) {
      tocl::Status sent = runtime.Send(self, message->source(), kTagEcho, message->span());
      if (!sent.ok()) return Fail("echo", sent);
    }
  }
}

int SpawnProcesses(tocl::Runtime& runtime, tocl::Gid self, uint32_t host,
                   const std::string& program, int count, int enroll_timeout_ms) {
  for (int i = 0; i < count; ++i) {
    tocl::SpawnOptions spawn;
    spawn.executable = program;
    spawn.args = {"serve"};
    spawn.host = tocl::Gid::Host(host);
    spawn.enroll_timeout = std::chrono::milliseconds(enroll_timeout_ms);
    const auto start = Clock::now();
    auto child = runtime.SpawnProcess(self, spawn);
    const int64_t spawn_us = MicrosSince(start);
    if (!child.ok()) return Fail("spawn-process", child.status());
    auto hello = runtime.RecvFor(self, kReplyTimeout, child->gid, kTagHello);
    if (!hello.ok()) return Fail("hello", hello.status());
    const int64_t hello_us = MicrosSince(start);
    Say("spawned gid {} pid {} us {} hello_us {} stdout {}", child->gid.ToString(), child->os_pid,
        spawn_us, hello_us, child->stdout_path);
    auto watch = runtime.Notify(self, child->gid, kTagNotice);
    if (!watch.ok()) return Fail("notify", watch.status());
    const std::string ping = fmt::format("ping {}", i);
    // The hello came from the child's main thread, the one that answers.
    const tocl::Gid child_main = hello->source();
    tocl::Status sent = runtime.Send(self, child_main, kTagEcho, Bytes(ping));
    if (!sent.ok()) return Fail("send", sent);
    auto echo = runtime.RecvFor(self, kReplyTimeout, child_main, kTagEcho);
    if (!echo.ok()) return Fail("echo", echo.status());
    if (Text(*echo) != ping) {
      return Fail("echo", tocl::Internal(fmt::format("got '{}', sent '{}'", Text(*echo), ping)));
    }
    Say("echo from {}", echo->source().ToString());
    sent = runtime.Send(self, child_main, kTagExit, Bytes("exit 7"));
    if (!sent.ok()) return Fail("send exit", sent);
    auto notice = runtime.RecvFor(self, kReplyTimeout, child->gid, kTagNotice);
    if (!notice.ok()) return Fail("notice", notice.status());
    auto parsed = tocl::ParseExitNotice(*notice);
    if (!parsed.ok()) return Fail("parse notice", parsed.status());
    Say("{}", NoticeLine(*parsed));
  }
  Say("done");
  return 0;
}

int SpawnThreads(tocl::Runtime& runtime, tocl::Gid self, tocl::Gid process, int count,
                 const std::string& entry) {
  for (int i = 0; i < count; ++i) {
    const std::string payload = fmt::format("payload {}", i);
    const auto start = Clock::now();
    auto thread = runtime.SpawnThread(self, process, entry, Bytes(payload));
    const int64_t spawn_us = MicrosSince(start);
    if (!thread.ok()) return Fail("spawn-thread", thread.status());
    if (entry == "echo") {
      auto echo = runtime.RecvFor(self, kReplyTimeout, *thread, kTagEchoThread);
      if (!echo.ok()) return Fail("echo", echo.status());
      if (Text(*echo) != payload) {
        return Fail("echo",
                    tocl::Internal(fmt::format("got '{}', sent '{}'", Text(*echo), payload)));
      }
    }
    Say("thread gid {} us {} echo_us {}", thread->ToString(), spawn_us, MicrosSince(start));
  }
  Say("done");
  return 0;
}

int Notify(tocl::Runtime& runtime, tocl::Gid self, tocl::Gid target, bool callback) {
  if (callback) {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<tocl::ExitNotice> notices;
    auto watch = runtime.Notify(target, [&](const tocl::ExitNotice& notice) {
      std::lock_guard lock(mu);
      notices.push_back(notice);
      cv.notify_all();
    });
    if (!watch.ok()) return Fail("notify", watch.status());
    Say("watching target {}", target.ToString());
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return !notices.empty(); })) {
      return Fail("notice", tocl::DeadlineExceeded("no notice in 60 s"));
    }
    Say("{}", NoticeLine(notices.front()));
    // Exactly one: a second one would arrive within the same breath.
    cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return notices.size() > 1; });
    Say("notices count {}", notices.size());
    return 0;
  }
  auto watch = runtime.Notify(self, target, kTagNotice);
  if (!watch.ok()) return Fail("notify", watch.status());
  Say("watching target {}", target.ToString());
  auto message = runtime.RecvFor(self, std::chrono::seconds(60), tocl::Gid(), kTagNotice);
  if (!message.ok()) return Fail("notice", message.status());
  auto notice = tocl::ParseExitNotice(*message);
  if (!notice.ok()) return Fail("parse notice", notice.status());
  Say("{}", NoticeLine(*notice));
  auto second = runtime.RecvFor(self, std::chrono::milliseconds(500), tocl::Gid(), kTagNotice);
  Say("notices count {}", second.ok() ? 2 : 1);
  return 0;
}

int Members(tocl::Runtime& runtime, const std::string& query, int seconds) {
  auto watch = runtime.WatchMembers(query, [](const tocl::MembershipEvent& event) {
    if (event.change == tocl::MembershipChange::kCurrent) return Say("member change current");
    Say("member change {} gid {} state {}", tocl::MembershipChangeName(event.change),
        event.entity.gid.ToString(), tocl::EntityStateName(event.entity.state));
  });
  if (!watch.ok()) return Fail("watch", watch.status());
  std::this_thread::sleep_for(std::chrono::seconds(seconds));  // the run's length, not a wait
  tocl::Status cancelled = runtime.CancelWatchMembers(*watch);
  if (!cancelled.ok()) return Fail("cancel", cancelled);
  Say("done");
  return 0;
}

int Ping(tocl::Runtime& runtime, tocl::Gid self, tocl::Gid to, int count) {
  for (int i = 0; i < count; ++i) {
    const std::string ping = fmt::format("ping {}", i);
    const auto start = Clock::now();
    tocl::Status sent = runtime.Send(self, to, kTagEcho, Bytes(ping));
    if (!sent.ok()) return Fail("send", sent);
    auto echo = runtime.RecvFor(self, kReplyTimeout, to, kTagEcho);
    if (!echo.ok()) return Fail("echo", echo.status());
    Say("pong us {}", MicrosSince(start));
  }
  Say("done");
  return 0;
}

extern "C" char** environ;

int ExecBaseline(const std::string& program, int count) {
  for (int i = 0; i < count; ++i) {
    std::string arg0 = program, arg1 = "noop";
    char* argv[] = {arg0.data(), arg1.data(), nullptr};
    const auto start = Clock::now();
    pid_t pid = 0;
    if (int error = posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, environ);
        error != 0) {
      return Fail("exec", tocl::Internal(fmt::format("posix_spawn: {}", std::strerror(error))));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    Say("exec us {} wait {}", MicrosSince(start), status);
  }
  Say("done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tocl-cluster-worker: the ends of the multi-host cluster tests"};
  app.require_subcommand(1);
  CLI::App* serve = app.add_subcommand("serve", "Be a process others spawn into");

  uint32_t host = 0;
  std::string program;
  int count = 1;
  int enroll_timeout_ms = 0;
  CLI::App* spawn_process = app.add_subcommand("spawn-process", "Spawn `PROGRAM serve` on a host");
  spawn_process->add_option("--host", host, "Host index")->required();
  spawn_process->add_option("--program", program, "The program")->required();
  spawn_process->add_option("--count", count);
  spawn_process->add_option("--enroll-timeout-ms", enroll_timeout_ms);

  std::string process_text, entry = "echo";
  CLI::App* spawn_thread = app.add_subcommand("spawn-thread", "Spawn threads in a process");
  spawn_thread->add_option("--process", process_text)->required();
  spawn_thread->add_option("--count", count);
  spawn_thread->add_option("--entry", entry);

  std::string target_text;
  bool callback = false;
  CLI::App* notify = app.add_subcommand("notify", "Wait for a notice about a gid");
  notify->add_option("--target", target_text)->required();
  notify->add_flag("--callback", callback);

  std::string query;
  int seconds = 60;
  CLI::App* members = app.add_subcommand("members", "Follow the members of a query");
  members->add_option("--query", query)->required();
  members->add_option("--seconds", seconds);

  std::string to_text;
  CLI::App* send = app.add_subcommand("send", "Send one message");
  send->add_option("--to", to_text)->required();
  CLI::App* ping = app.add_subcommand("ping", "Round trips with a serve process");
  ping->add_option("--to", to_text)->required();
  ping->add_option("--count", count);
  CLI::App* exec = app.add_subcommand("exec", "posix_spawn `PROGRAM noop` and wait");
  exec->add_option("--program", program)->required();
  exec->add_option("--count", count);
  CLI::App* noop = app.add_subcommand("noop", "Exit at once");
  CLI11_PARSE(app, argc, argv);
  if (*noop) return 0;
  if (*exec) return ExecBaseline(program, count);

  RegisterEntries();
  tocl::RuntimeOptions runtime_options;
  runtime_options.name = "cluster-worker";
  auto runtime = tocl::Runtime::Start(runtime_options);
  if (!runtime.ok()) return Fail("start", runtime.status());
  auto self = (*runtime)->EnrollThread("main");
  if (!self.ok()) return Fail("enroll", self.status());
  Say("started pid {} gid {} parent {}", ::getpid(), self->ToString(),
      (*runtime)->parent().ToString());
  Say("gid thread 0 gid {}", self->ToString());

  int code = 0;
  if (*serve) {
    code = Serve(**runtime, *self);
  } else if (*members) {
    code = Members(**runtime, query, seconds);
  } else if (*spawn_process) {
    code = SpawnProcesses(**runtime, *self, host, program, count, enroll_timeout_ms);
  } else {
    auto parse = [](const std::string& text) { return tocl::Gid::Parse(text); };
    if (*spawn_thread) {
      auto process = parse(process_text);
      if (!process.ok()) return Fail("--process", process.status());
      code = SpawnThreads(**runtime, *self, *process, count, entry);
    } else if (*notify) {
      auto target = parse(target_text);
      if (!target.ok()) return Fail("--target", target.status());
      code = Notify(**runtime, *self, *target, callback);
    } else if (*ping) {
      auto to = parse(to_text);
      if (!to.ok()) return Fail("--to", to.status());
      code = Ping(**runtime, *self, *to, count);
    } else if (*send) {
      auto to = parse(to_text);
      if (!to.ok()) return Fail("--to", to.status());
      tocl::Status sent = (*runtime)->Send(*self, *to, kTagEcho, Bytes("hello"));
      if (!sent.ok()) return Fail("send", sent);
      Say("sent to {}", to->ToString());
    }
  }
  (void)(*runtime)->Shutdown();
  return code;
}
