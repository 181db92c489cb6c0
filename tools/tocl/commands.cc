#include "commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "exit_code.h"
#include "json_output.h"
#include "network_table.h"
#include "pool_table.h"
#include "support/daemon_connection.h"
#include "support/entity_text.h"
#include "support/table.h"
#include "tocl/directory_client.h"

namespace tocl::cli {
namespace {

// Listings (hosts, ps, threads) are not meant to be cut short.
constexpr size_t kListingLimit = 1'000'000;
// Entities asked for per Query round trip.
constexpr size_t kPageSize = 1000;

struct Matches {
  std::vector<Entity> entities;
  bool truncated = false;  // more matches than the limit
};

using TableMaker = Table (*)(std::span<const Entity>);

// A failure during a call, said in terms of the daemon the user named.
Status InDaemonContext(const Status& status, const DirectoryClient& client) {
  if (status.code() != StatusCode::kUnavailable) return status;
  return Unavailable(fmt::format("lost the daemon at {}: {}", client.address(), status.message()));
}

// Follows result pages until `limit` entities or the last page.
Result<Matches> FetchMatches(DirectoryClient& client, std::string_view expression, size_t limit) {
  Matches matches;
  std::string token;
  do {
    const size_t wanted = std::min(limit - matches.entities.size(), kPageSize);
    auto page = client.Query(expression, static_cast<uint32_t>(wanted), token);
    if (!page.ok()) return InDaemonContext(page.status(), client);
    const bool got_none = page->entities.empty();
    for (Entity& entity : page->entities) {
      if (matches.entities.size() == limit) break;
      matches.entities.push_back(std::move(entity));
    }
    token = std::move(page->next_page_token);
    if (got_none) break;  // a page token with nothing behind it
  } while (!token.empty() && matches.entities.size() < limit);
  matches.truncated = !token.empty();
  return matches;
}

int PrintEntities(const CommonOptions& options, std::span<const Entity> entities,
                  TableMaker make_table) {
  if (options.json) {
    for (const Entity& entity : entities) PrintJsonLine(EntityToJson(entity));
  } else {
    make_table(entities).Print();
  }
  return kExitOk;
}

// What no rows mean. A listing (hosts, ps, threads, pools, networks) that
// is empty is an answer: exit 0, with a note on stderr. A search (query,
// lookup, the statistics of one process) that finds nothing is "no match":
// exit 1.
enum class WhenEmpty { kNote, kNoMatch };

int ReportEmpty(WhenEmpty when_empty, std::string_view nothing) {
  if (when_empty == WhenEmpty::kNoMatch) return Fail(kExitNoMatch, nothing);
  fmt::print(stderr, "tocl: {}\n", nothing);
  return kExitOk;
}

// Runs `expression` and prints the matches; `nothing` is the line for none.
int ListMatches(const CommonOptions& options, std::string_view expression, size_t limit,
                TableMaker make_table, std::string_view nothing, WhenEmpty when_empty) {
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  auto matches = FetchMatches(**client, expression, limit);
  if (!matches.ok()) return Fail(matches.status());
  if (matches->entities.empty()) return ReportEmpty(when_empty, nothing);
  PrintEntities(options, matches->entities, make_table);
  if (matches->truncated) {
    std::fflush(stdout);
    fmt::print(stderr, "tocl: showing the first {} matches; there are more (see --limit)\n", limit);
  }
  return kExitOk;
}

// Set from signal handlers, read by the watch loop's stop check.
volatile std::sig_atomic_t stop_requested = 0;

extern "C" void RequestStop(int /*signal*/) {
  stop_requested = 1;
}

void StopOnSignals() {
  struct sigaction action {};
  action.sa_handler = RequestStop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Columns of `tocl watch`; wide enough for typical values, wider ones push
// the line right (the stream cannot know its widest cell in advance).
constexpr std::array<size_t, 6> kWatchWidths = {8, 7, 14, 7, 24, 7};

std::vector<std::string> WatchRow(const ChangeEvent& event) {
  return {fmt::format("{}", event.seq),  std::string(ChangeOpName(event.op)),
          event.gid.ToString(),          std::string(EntityKindName(event.entity.kind)),
          EscapeCell(event.entity.name), std::string(EntityStateName(event.entity.state))};
}

void WriteLine(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
}

// Reads the optional PROCESS argument of `command` into `gid` (null when
// `text` is empty); on a bad one, says so and returns the exit code.
int ParseProcess(std::string_view command, const std::string& text, Gid* gid) {
  if (text.empty()) return kExitOk;
  auto parsed = Gid::Parse(text);
  if (!parsed.ok()) return Fail(parsed.status());
  if (!parsed->is_process()) {
    return Fail(kExitUsage,
                fmt::format("{} wants a process id like h1.p2, not '{}'", command, text));
  }
  *gid = *parsed;
  return kExitOk;
}

}  // namespace

int RunHosts(const CommonOptions& options) {
  return ListMatches(options, "kind=host", kListingLimit, HostTable, "no hosts", WhenEmpty::kNote);
}

int RunPs(const CommonOptions& options, bool all) {
  const std::string_view expression = all ? "kind=process" : "kind=process and state=running";
  return ListMatches(options, expression, kListingLimit, ProcessTable,
                     all ? "no processes" : "no running processes (see --all)", WhenEmpty::kNote);
}

int RunThreads(const CommonOptions& options, const std::string& process, bool all) {
  std::string expression = "kind=thread";
  if (!process.empty()) {
    auto gid = Gid::Parse(process);
    if (!gid.ok()) return Fail(gid.status().WithContext("--process"));
    if (!gid->is_process()) {
      return Fail(kExitUsage,
                  fmt::format("--process wants a process id like h1.p2, not '{}'", process));
    }
    expression += fmt::format(" and process={}", gid->ToString());
  }
  if (!all) expression += " and state=running";
  std::string nothing = process.empty() ? "no threads" : fmt::format("no threads in {}", process);
  if (!all) nothing = fmt::format("{} running (see --all)", nothing);
  return ListMatches(options, expression, kListingLimit, ThreadTable, nothing, WhenEmpty::kNote);
}

int RunLookup(const CommonOptions& options, const std::string& gid_text) {
  auto gid = Gid::Parse(gid_text);
  if (!gid.ok()) return Fail(gid.status());
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  auto entity = (*client)->Lookup(*gid);
  if (!entity.ok()) return Fail(InDaemonContext(entity.status(), **client));
  if (options.json) {
    PrintJsonLine(EntityToJson(*entity));
  } else {
    EntityDetailTable(*entity).Print();
  }
  return kExitOk;
}

int RunQuery(const CommonOptions& options, const std::string& expression, size_t limit) {
  return ListMatches(options, expression, limit, EntityTable,
                     fmt::format("no entity matches '{}'", expression), WhenEmpty::kNoMatch);
}

int RunWatch(const CommonOptions& options, std::optional<uint64_t> since, uint64_t count) {
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  if (!since) {
    // From now on: the daemon's newest sequence number.
    auto head = (*client)->Ping();
    if (!head.ok()) return Fail(InDaemonContext(head.status(), **client));
    since = *head;
  }
  StopOnSignals();
  if (!options.json) {
    const std::vector<std::string> header = {"SEQ", "OP", "GID", "KIND", "NAME", "STATE"};
    WriteLine(FormatRow(header, kWatchWidths));
    std::fflush(stdout);
  }
  uint64_t printed = 0;
  Status status = (*client)->Watch(
      *since,
      [&](const ChangeEvent& event) {
        if (options.json) {
          PrintJsonLine(ChangeEventToJson(event));
        } else {
          WriteLine(FormatRow(WatchRow(event), kWatchWidths));
        }
        std::fflush(stdout);
        ++printed;
        return count == 0 || printed < count;
      },
      [] { return stop_requested != 0; });
  if (!status.ok()) return Fail(InDaemonContext(status, **client));
  return kExitOk;
}

int RunPools(const CommonOptions& options, const std::string& process) {
  Gid gid;
  if (int bad = ParseProcess("pools", process, &gid); bad != kExitOk) return bad;
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  auto reports = (*client)->PoolStats(gid);
  if (!reports.ok()) return Fail(InDaemonContext(reports.status(), **client));
  // One process that has not reported is NotFound from the daemon (above).
  if (reports->empty()) {
    return ReportEmpty(WhenEmpty::kNote, "no process has reported pool statistics");
  }
  if (options.json) {
    for (const ProcessPoolStats& report : *reports) PrintJsonLine(PoolStatsToJson(report));
  } else {
    PoolTable(*reports).Print();
  }
  return kExitOk;
}

int RunNetworks(const CommonOptions& options, const std::string& process) {
  Gid gid;
  if (int bad = ParseProcess("networks", process, &gid); bad != kExitOk) return bad;
  auto client = ConnectToDaemon(options.daemon);
  if (!client.ok()) return Fail(client.status());
  auto reports = (*client)->NetworkStats(gid);
  if (!reports.ok()) return Fail(InDaemonContext(reports.status(), **client));
  if (reports->empty()) {
    return ReportEmpty(WhenEmpty::kNote, "no process has reported network statistics");
  }
  if (options.json) {
    for (const ProcessNetworkStats& report : *reports) PrintJsonLine(NetworkStatsToJson(report));
    return kExitOk;
  }
  NetworkTable(*reports).Print();
  // The peers and the VI pools only when there are any, each after a blank line.
  for (const Table& table :
       {NetworkPeerTable(*reports), ViPoolTable(*reports), ViTable(*reports)}) {
    if (table.empty()) continue;
    std::fputc('\n', stdout);
    table.Print();
  }
  return kExitOk;
}

}  // namespace tocl::cli
