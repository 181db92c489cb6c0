// tocl-enroll-worker: a minimal tocl process for integration tests.
//
//   tocl-enroll-worker --daemon unix:/tmp/x/toclsd.sock --threads 2000 --batch 250 --name w3
//   [--hold]
//
// Enrolls with the daemon, registers N threads (t1..tN) in batches of B,
// checks with Lookup and Query that every one of them is there, and prints
//   gid h1.p5          once enrolled
//   registered 2000    once every thread is registered and verified
//   holding            (--hold) then keeps the session open until stdin closes
// on stdout. Exit code 0 on success, 1 on any failure (reason on stderr),
// 2 on usage errors.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tocl/directory_client.h"

namespace {

struct Options {
  std::string daemon;
  std::string name = "enroll-worker";
  uint32_t threads = 0;
  uint32_t batch = 100;
  bool hold = false;
};

int Fail(const tocl::Status& status, std::string_view what) {
  fmt::print(stderr, "tocl-enroll-worker: {}: {}\n", what, status.ToString());
  return 1;
}

void Say(const std::string& line) {
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

tocl::Status Verify(tocl::DirectoryClient& client, const std::vector<tocl::ThreadInfo>& threads,
                    tocl::Gid process) {
  for (const tocl::ThreadInfo& thread : threads) {
    auto entity = client.Lookup(thread.gid);
    if (!entity.ok()) return entity.status().WithContext("lookup " + thread.gid.ToString());
    if (entity->kind != tocl::EntityKind::kThread || entity->name != thread.name ||
        entity->state != tocl::EntityState::kRunning) {
      return tocl::Internal(fmt::format("lookup {}: got {} '{}' ({})", thread.gid.ToString(),
                                        tocl::EntityKindName(entity->kind), entity->name,
                                        tocl::EntityStateName(entity->state)));
    }
  }
  auto listed = client.QueryAll(fmt::format("kind=thread and process={}", process.ToString()));
  if (!listed.ok()) return listed.status().WithContext("query");
  if (listed->size() != threads.size()) {
    return tocl::Internal(fmt::format("query lists {} threads of {}, registered {}", listed->size(),
                                      process.ToString(), threads.size()));
  }
  return tocl::Status::Ok();
}

int Run(const Options& options) {
  auto client = tocl::DirectoryClient::Connect(options.daemon);
  if (!client.ok()) return Fail(client.status(), "connect " + options.daemon);

  tocl::EnrollOptions enroll;
  enroll.name = options.name;
  enroll.attributes = {{"role", "enroll-worker"}};
  auto session = (*client)->Enroll(enroll);
  if (!session.ok()) return Fail(session.status(), "enroll");
  const tocl::Gid process = (*session)->gid();
  Say("gid " + process.ToString());

  std::vector<tocl::ThreadInfo> threads;
  threads.reserve(options.threads);
  for (uint32_t i = 1; i <= options.threads; ++i) {
    tocl::ThreadInfo& thread = threads.emplace_back();
    thread.gid = tocl::Gid::Thread(process, i);
    thread.name = fmt::format("{}-t{}", options.name, i);
    thread.attributes = {{"worker", options.name},
                         {"batch", std::to_string((i - 1) / options.batch)}};
  }
  for (size_t start = 0; start < threads.size(); start += options.batch) {
    size_t count = std::min<size_t>(options.batch, threads.size() - start);
    tocl::Status registered = (*session)->RegisterThreads(std::span(threads).subspan(start, count));
    if (!registered.ok()) return Fail(registered, fmt::format("register batch at {}", start));
  }
  tocl::Status verified = Verify(**client, threads, process);
  if (!verified.ok()) return Fail(verified, "verify");
  Say(fmt::format("registered {}", threads.size()));

  if (options.hold) {
    Say("holding");
    char buffer[256];
    while (true) {
      ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
  }
  tocl::Status closed = (*session)->Close("worker done");
  if (!closed.ok()) return Fail(closed, "close");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"A tocl process for integration tests: enrolls and registers threads."};
  app.add_option("--daemon", options.daemon, "daemon address (unix:/path or host:port)")
      ->required();
  app.add_option("--threads", options.threads, "threads to register");
  app.add_option("--batch", options.batch, "threads per RegisterThreads call")
      ->check(CLI::Range(1u, 10000u));
  app.add_option("--name", options.name, "process name");
  app.add_flag("--hold", options.hold, "keep the session open until stdin closes");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  return Run(options);
}
