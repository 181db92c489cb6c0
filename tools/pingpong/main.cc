// tocl-pingpong: two processes whose threads exchange messages, printing
// the round-trip latency (the messaging part of `make demo`).
//
//   tocl-pingpong [--daemon ADDR] [--subsystems shm|tcp|shm,tcp] [--threads N]
//                 [--count N] [--size BYTES]
//
// The program starts a second copy of itself (--pong), which enrolls N
// threads that echo every message back; the first process enrolls N
// threads, each pinging its partner `count` times. Exit 0 when every
// message came back intact, 1 otherwise, 2 on a usage error.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tocl/runtime.h"
#include "tocl/version.h"

namespace {

struct Options {
  std::string daemon;
  std::string subsystems;
  int threads = 2;
  int count = 10000;
  size_t size = 8;
  bool pong = false;
  int pong_fd = -1;
};

constexpr tocl::Tag kPing = 1;
constexpr tocl::Tag kStop = 2;

tocl::RuntimeOptions MakeRuntimeOptions(const Options& options, const char* name) {
  tocl::RuntimeOptions runtime_options;
  runtime_options.daemon_address = options.daemon;
  runtime_options.subsystems = options.subsystems;
  runtime_options.name = name;
  return runtime_options;
}

// The echo side: prints its thread gids (one per line) on `pong_fd`, then
// sends back whatever arrives until each thread is told to stop.
int Pong(const Options& options) {
  auto runtime = tocl::Runtime::Start(MakeRuntimeOptions(options, "pong"));
  if (!runtime.ok()) {
    fmt::print(stderr, "tocl-pingpong: {}\n", runtime.status().ToString());
    return 1;
  }
  std::vector<tocl::Gid> gids;
  for (int i = 0; i < options.threads; ++i) {
    auto gid = (*runtime)->EnrollThread(fmt::format("pong-{}", i));
    if (!gid.ok()) return 1;
    gids.push_back(*gid);
  }
  std::string lines;
  for (auto gid : gids) lines += gid.ToString() + "\n";
  if (write(options.pong_fd, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) {
    return 1;
  }
  close(options.pong_fd);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (auto gid : gids) {
    threads.emplace_back([&, gid] {
      for (;;) {
        auto message = (*runtime)->Recv(gid);
        if (!message.ok()) {
          ++failures;
          return;
        }
        if (message->tag() == kStop) return;
        tocl::Gid from = message->source();
        // The received buffer goes back as it is: no copy.
        if (!(*runtime)->Send(gid, from, kPing, std::move(*message)).ok()) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  (void)(*runtime)->Shutdown();
  return failures == 0 ? 0 : 1;
}

int Ping(const Options& options, const char* self_path) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  std::vector<std::string> args = {self_path,   "--pong",
                                   "--pong-fd", std::to_string(fds[1]),
                                   "--threads", std::to_string(options.threads)};
  if (!options.daemon.empty()) args.insert(args.end(), {"--daemon", options.daemon});
  if (!options.subsystems.empty()) args.insert(args.end(), {"--subsystems", options.subsystems});
  pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(self_path, argv.data());
    _exit(127);
  }
  close(fds[1]);
  auto runtime = tocl::Runtime::Start(MakeRuntimeOptions(options, "ping"));
  if (!runtime.ok()) {
    fmt::print(stderr, "tocl-pingpong: {}\n", runtime.status().ToString());
    kill(child, SIGTERM);
    waitpid(child, nullptr, 0);
    return 1;
  }
  std::string text;
  char chunk[256];
  for (ssize_t n; (n = read(fds[0], chunk, sizeof(chunk))) > 0;) text.append(chunk, n);
  close(fds[0]);
  std::vector<tocl::Gid> partners;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    auto gid = tocl::Gid::Parse(text.substr(start, end - start));
    if (gid.ok()) partners.push_back(*gid);
  }
  if (static_cast<int>(partners.size()) != options.threads) {
    fmt::print(stderr, "tocl-pingpong: the pong process did not start\n");
    waitpid(child, nullptr, 0);
    return 1;
  }
  std::atomic<int> failures{0};
  std::vector<std::vector<double>> rtts(options.threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      auto me = (*runtime)->EnrollThread(fmt::format("ping-{}", t));
      if (!me.ok()) {
        ++failures;
        return;
      }
      std::vector<std::byte> payload(options.size);
      for (int i = 0; i < options.count; ++i) {
        std::memcpy(payload.data(), &i, std::min(sizeof(i), payload.size()));
        auto start = std::chrono::steady_clock::now();
        if (!(*runtime)->Send(*me, partners[t], kPing, payload).ok()) {
          ++failures;
          return;
        }
        auto reply = (*runtime)->RecvFor(*me, std::chrono::seconds(10), partners[t], kPing);
        auto stop = std::chrono::steady_clock::now();
        if (!reply.ok() || reply->size() != payload.size() ||
            std::memcmp(reply->data(), payload.data(), payload.size()) != 0) {
          ++failures;
          return;
        }
        rtts[t].push_back(std::chrono::duration<double, std::micro>(stop - start).count());
      }
      (void)(*runtime)->Send(*me, partners[t], kStop, std::span<const std::byte>());
    });
  }
  for (auto& thread : threads) thread.join();
  (void)(*runtime)->Shutdown();
  int status = 0;
  waitpid(child, &status, 0);
  std::vector<double> all;
  for (auto& r : rtts) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end());
  if (!all.empty()) {
    fmt::print(
        "{} threads x {} round trips of {} B over {}: one-way latency p50 {:.2f} us, "
        "min {:.2f} us, p99 {:.2f} us\n",
        options.threads, options.count, options.size,
        options.subsystems.empty() ? "shm,tcp" : options.subsystems, all[all.size() / 2] / 2,
        all.front() / 2, all[all.size() * 99 / 100] / 2);
  }
  bool ok = failures == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) {
    fmt::print(stderr, "tocl-pingpong: {} thread(s) failed; the pong process {} {}\n",
               failures.load(), WIFEXITED(status) ? "exited with" : "was killed by signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app("two processes whose threads exchange messages, with their latency");
  app.set_version_flag("--version", "tocl-pingpong " TOCL_VERSION_STRING);
  app.add_option("--daemon", options.daemon, "the daemon (default: $TOCL_DAEMON)");
  app.add_option("--subsystems", options.subsystems, "networks to use: shm, tcp or shm,tcp");
  app.add_option("--threads", options.threads, "pairs of threads")->check(CLI::Range(1, 64));
  app.add_option("--count", options.count, "round trips per pair")->check(CLI::Range(1, 100000000));
  app.add_option("--size", options.size, "payload bytes")->check(CLI::Range(0, 65472));
  app.add_flag("--pong", options.pong)->group("");
  app.add_option("--pong-fd", options.pong_fd)->group("");
  CLI11_PARSE(app, argc, argv);
  return options.pong ? Pong(options) : Ping(options, "/proc/self/exe");
}
