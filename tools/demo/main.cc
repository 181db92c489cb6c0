// tocl-demo: registers a host's worth of processes and threads with the
// directory, shows lookups and queries over them, then shows that the
// directory marks the processes exited once they leave. See tools/README.md.
//
// Every entity of one run carries the attribute run=<random id>, so a
// directory that keeps earlier runs (a persistent state dir) does not mix
// them in.
#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "demo_child.h"
#include "demo_process.h"
#include "pipe.h"
#include "support/daemon_connection.h"
#include "support/entity_text.h"
#include "tocl/directory_client.h"
#include "tocl/version.h"

namespace tocl::demo {
namespace {

constexpr int kIndexers = 3;
constexpr int kMergerThreads = 8;
// Children connect, enroll and register within this.
constexpr auto kStartTimeout = std::chrono::seconds(15);
// Children leave, and the directory records it, within this.
constexpr auto kExitTimeout = std::chrono::seconds(10);
// Between two looks at the directory while waiting for it to change.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

Deadline After(std::chrono::steady_clock::duration timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

std::string NewRunId() {
  std::random_device random;
  return fmt::format("{:08x}", random());
}

// Three indexers (one shard each, worker threads) and a merger.
std::vector<DemoProcess> HostOfProcesses(const std::string& run) {
  std::vector<DemoProcess> processes;
  for (int shard = 0; shard < kIndexers; ++shard) {
    DemoProcess indexer{fmt::format("indexer-{}", shard),
                        {{"role", "indexer"}, {"shard", std::to_string(shard)}, {"run", run}},
                        {}};
    for (int i = 1; i <= 4 + shard; ++i) {
      indexer.threads.push_back(
          {fmt::format("worker-{}", i),
           {{"role", "worker"}, {"shard", std::to_string(shard)}, {"run", run}}});
    }
    processes.push_back(std::move(indexer));
  }
  DemoProcess merger{"merger-0", {{"role", "merger"}, {"run", run}}, {}};
  for (int i = 1; i <= kMergerThreads; ++i) {
    merger.threads.push_back(
        {fmt::format("merge-{}", i),
         {{"role", "merger"}, {"inputs", std::to_string(kIndexers)}, {"run", run}}});
  }
  processes.push_back(std::move(merger));
  return processes;
}

void PrintSection(std::string_view title) {
  fmt::print("\n== {} ==\n", title);
}

// Prints the matches of `expression` (restricted to this run) and checks
// how many there are.
Status ShowQuery(DirectoryClient& client, std::string_view expression, const std::string& run,
                 cli::Table (*make_table)(std::span<const Entity>), size_t expected) {
  const std::string restricted = fmt::format("{} and run={}", expression, run);
  TOCL_ASSIGN_OR_RETURN(std::vector<Entity> matches, client.QueryAll(restricted));
  PrintSection(fmt::format("query: {}", restricted));
  make_table(matches).Print();
  if (matches.size() != expected) {
    return FailedPrecondition(fmt::format("query '{}' found {} entities, expected {}", restricted,
                                          matches.size(), expected));
  }
  return Status::Ok();
}

// Looks at the directory until `expression` matches `expected` entities.
Result<std::vector<Entity>> WaitForMatches(DirectoryClient& client, const std::string& expression,
                                           size_t expected, Deadline deadline) {
  while (true) {
    TOCL_ASSIGN_OR_RETURN(std::vector<Entity> matches, client.QueryAll(expression));
    if (matches.size() == expected) return matches;
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded(fmt::format("query '{}' still finds {} entities, not {}", expression,
                                          matches.size(), expected));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Status RunDemo(const std::string& daemon) {
  const std::string run = NewRunId();
  const std::vector<DemoProcess> processes = HostOfProcesses(run);

  // Fork before this process makes any gRPC object: gRPC does not survive fork().
  DemoChildren children;
  for (const DemoProcess& process : processes) {
    TOCL_ASSIGN_OR_RETURN(auto child, DemoChild::Start(daemon, process, children));
    children.push_back(std::move(child));
  }
  const Deadline start_deadline = After(kStartTimeout);
  std::vector<Gid> gids;
  for (auto& child : children) {
    TOCL_ASSIGN_OR_RETURN(Gid gid, child->WaitReady(start_deadline));
    gids.push_back(gid);
  }

  TOCL_ASSIGN_OR_RETURN(auto client, cli::ConnectToDaemon(daemon));
  fmt::print("tocl-demo: run {} at {}: {} processes enrolled\n", run, client->address(),
             children.size());

  TOCL_RETURN_IF_ERROR(ShowQuery(*client, "kind=process", run, cli::ProcessTable, children.size()));

  const Gid merger_thread = Gid::Thread(gids.back(), 1);
  TOCL_ASSIGN_OR_RETURN(Entity thread, client->Lookup(merger_thread));
  PrintSection(fmt::format("lookup {}", merger_thread.ToString()));
  cli::EntityDetailTable(thread).Print();

  TOCL_RETURN_IF_ERROR(
      ShowQuery(*client, "kind=thread and role=merger", run, cli::EntityTable, kMergerThreads));
  TOCL_RETURN_IF_ERROR(ShowQuery(*client, "name~indexer-*", run, cli::EntityTable, kIndexers));
  TOCL_RETURN_IF_ERROR(ShowQuery(*client, "kind=process and shard=1", run, cli::EntityTable, 1));
  TOCL_RETURN_IF_ERROR(
      ShowQuery(*client, fmt::format("pid={}", children[1]->pid()), run, cli::EntityTable, 1));

  const Deadline exit_deadline = After(kExitTimeout);
  for (auto& child : children) TOCL_RETURN_IF_ERROR(child->Stop(exit_deadline));
  const std::string exited = fmt::format("state=exited and kind=process and run={}", run);
  TOCL_ASSIGN_OR_RETURN(std::vector<Entity> gone,
                        WaitForMatches(*client, exited, children.size(), exit_deadline));
  PrintSection(fmt::format("after the processes left, query: {}", exited));
  cli::ProcessTable(gone).Print();
  fmt::print("\ntocl-demo: run {} ok\n", run);
  return Status::Ok();
}

}  // namespace
}  // namespace tocl::demo

int main(int argc, char** argv) {
  CLI::App app{"Registers demo processes and threads with a tocl daemon and queries them.",
               "tocl-demo"};
  app.set_version_flag("--version", "tocl-demo " TOCL_VERSION_STRING);
  std::string daemon = tocl::DirectoryClient::DefaultAddress();
  app.add_option("--daemon", daemon, "The daemon: unix:/path, a socket path or host:port")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);
    fmt::print(stderr, "tocl-demo: {} (see 'tocl-demo --help')\n", error.what());
    return 2;
  }
  // A child that is gone must be an error on its pipe, not a SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  const tocl::Status status = tocl::demo::RunDemo(daemon);
  std::fflush(stdout);
  if (!status.ok()) {
    fmt::print(stderr, "tocl-demo: {}\n", status.message());
    return 1;
  }
  return 0;
}
