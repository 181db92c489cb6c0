// The `tocl` command line against a real toclsd: tables, --json lines and
// exit codes (0 ok, 1 nothing found, 2 usage and connection errors).
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "daemon_harness.h"
#include "status_assertions.h"
#include "tocl/directory_client.h"
#include "tocl/version.h"

namespace tocl::testing {
namespace {

using nlohmann::json;

struct CliRun {
  int exit_code = -1;  // or 128 + signal
  std::string out;
  std::string err;
};

// Runs `tocl args...` to completion with stdout and stderr captured apart;
// killed after 30 s.
CliRun RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> argv_text = {CliPath()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_text) argv.push_back(arg.data());
  argv.push_back(nullptr);

  int out_pipe[2];
  int err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec: the test is
    // multi-threaded (gRPC).
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  CliRun run;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open_count = 2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (open_count > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    const int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    REQUIRE(ready >= 0);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  for (const pollfd& entry : fds) {
    if (entry.fd >= 0) ::close(entry.fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  UNSCOPED_INFO("tocl " << fmt::format("{}", fmt::join(args, " ")) << " -> exit " << run.exit_code
                        << "\nstdout:\n"
                        << run.out << "stderr:\n"
                        << run.err);
  return run;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<json> JsonLines(const std::string& text) {
  std::vector<json> objects;
  for (const std::string& line : Lines(text)) {
    json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
    INFO("line: " << line);
    REQUIRE(object.is_object());
    objects.push_back(std::move(object));
  }
  return objects;
}

// The line of `lines` that starts with `gid` and a blank.
std::string RowOf(const std::vector<std::string>& lines, const std::string& gid) {
  for (const std::string& line : lines) {
    if (line.starts_with(gid + " ")) return line;
  }
  return {};
}

// An error is one line on stderr that starts with "tocl: ".
void RequireOneErrorLine(const CliRun& run) {
  REQUIRE(run.err.starts_with("tocl: "));
  REQUIRE(Lines(run.err).size() == 1);
}

const std::regex kIsoUtc(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");

// A daemon with one enrolled process ("cli-test", this test process) that
// has three threads (two workers, one merger) and a tcp endpoint.
struct Directory {
  Daemon daemon;
  std::unique_ptr<DirectoryClient> client;
  std::unique_ptr<ProcessSession> session;
  Gid process;
  std::vector<Gid> threads;

  Directory() {
    REQUIRE_OK(daemon.Start());
    client = REQUIRE_VALUE(daemon.Connect());
    EnrollOptions enroll;
    enroll.name = "cli-test";
    enroll.attributes = {{"role", "indexer"}, {"shard", "7"}};
    session = REQUIRE_VALUE(client->Enroll(enroll));
    process = session->gid();
    std::vector<ThreadInfo> infos;
    for (uint32_t i = 1; i <= 3; ++i) {
      const bool merger = i == 3;
      infos.push_back({Gid::Thread(process, i),
                       merger ? "merge-1" : fmt::format("worker-{}", i),
                       {{"role", merger ? "merger" : "worker"}, {"shard", "7"}}});
      threads.push_back(infos.back().gid);
    }
    REQUIRE_OK(session->RegisterThreads(infos));
    REQUIRE_OK(session->PublishEndpoint("tcp", std::string("\x7f\x00\x00\x01\x1c\xe6", 6)));
  }

  std::vector<std::string> With(std::vector<std::string> args) const {
    args.push_back("--daemon");
    args.push_back(daemon.address());
    return args;
  }
};

TEST_CASE("tocl prints hosts, processes, threads and query matches as aligned tables",
          "[cli][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();

  CliRun hosts = RunCli(directory.With({"hosts"}));
  REQUIRE(hosts.exit_code == 0);
  REQUIRE(hosts.err.empty());
  auto lines = Lines(hosts.out);
  REQUIRE(lines.size() >= 2);
  REQUIRE(lines[0].starts_with("GID"));
  REQUIRE_FALSE(RowOf(lines, directory.process.host().ToString()).empty());

  CliRun ps = RunCli(directory.With({"ps"}));
  REQUIRE(ps.exit_code == 0);
  lines = Lines(ps.out);
  REQUIRE(std::regex_match(lines[0], std::regex("GID +NAME +PID +STATE +STARTED +ATTRIBUTES")));
  const std::string row = RowOf(lines, process);
  REQUIRE_FALSE(row.empty());
  // Every column starts where its header does.
  const std::pair<std::string, std::string> columns[] = {{"NAME", "cli-test"},
                                                         {"PID", std::to_string(::getpid())},
                                                         {"STATE", "running"},
                                                         {"ATTRIBUTES", "role=indexer,shard=7"}};
  for (const auto& [header, cell] : columns) {
    INFO(cell << " under " << header);
    REQUIRE(row.find(cell) == lines[0].find(header));
  }

  CliRun threads = RunCli(directory.With({"threads", "--process", process}));
  REQUIRE(threads.exit_code == 0);
  lines = Lines(threads.out);
  REQUIRE(lines.size() == 4);
  REQUIRE(lines[0].starts_with("GID"));
  for (const Gid thread : directory.threads) REQUIRE_FALSE(RowOf(lines, thread.ToString()).empty());

  CliRun query = RunCli(directory.With({"query", "kind=thread and role=merger"}));
  REQUIRE(query.exit_code == 0);
  lines = Lines(query.out);
  REQUIRE(lines.size() == 2);
  REQUIRE(lines[0].starts_with("GID"));
  REQUIRE(lines[1].starts_with(directory.threads[2].ToString() + " "));
  REQUIRE(lines[1].find("merge-1") != std::string::npos);

  CliRun lookup = RunCli(directory.With({"lookup", process}));
  REQUIRE(lookup.exit_code == 0);
  REQUIRE(lookup.out.find("role=indexer") != std::string::npos);
  REQUIRE(lookup.out.find("tcp 0x7f0000011ce6") != std::string::npos);

  CliRun watch = RunCli(directory.With({"watch", "--since", "0", "--count", "2"}));
  REQUIRE(watch.exit_code == 0);
  lines = Lines(watch.out);
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[0].starts_with("SEQ"));

  // Once the process has left, ps shows it only with --all.
  REQUIRE_OK(directory.session->Close("done"));
  // An empty listing is an answer, not an error: exit 0, a note on stderr.
  CliRun running = RunCli(directory.With({"ps"}));
  REQUIRE(running.exit_code == 0);
  REQUIRE(running.out.empty());
  CHECK(running.err == "tocl: no running processes (see --all)\n");
  CliRun all = RunCli(directory.With({"ps", "--all"}));
  REQUIRE(all.exit_code == 0);
  REQUIRE(RowOf(Lines(all.out), process).find("exited") != std::string::npos);
}

TEST_CASE("tocl --json prints one object per line with the documented fields",
          "[cli][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();

  CliRun ps = RunCli(directory.With({"ps", "--json"}));
  REQUIRE(ps.exit_code == 0);
  const auto objects = JsonLines(ps.out);
  REQUIRE(objects.size() == 1);
  const json& p = objects[0];
  CHECK(p["gid"] == process);
  CHECK(p["kind"] == "process");
  CHECK(p["name"] == "cli-test");
  CHECK(p["state"] == "running");
  CHECK(p["pid"] == ::getpid());
  CHECK(p["attributes"] == json{{"role", "indexer"}, {"shard", "7"}});
  CHECK(p["endpoints"] == json::array({{{"subsystem", "tcp"}, {"address", "7f0000011ce6"}}}));
  CHECK(std::regex_match(p["started_at"].get<std::string>(), kIsoUtc));
  CHECK(p["exited_at"].is_null());
  CHECK(p["exit_reason"] == "");

  CliRun threads = RunCli(directory.With({"threads", "--json", "--process", process}));
  REQUIRE(threads.exit_code == 0);
  const auto thread_objects = JsonLines(threads.out);
  REQUIRE(thread_objects.size() == 3);
  for (size_t i = 0; i < thread_objects.size(); ++i) {
    CHECK(thread_objects[i]["gid"] == directory.threads[i].ToString());
    CHECK(thread_objects[i]["kind"] == "thread");
    CHECK(thread_objects[i]["pid"].is_null());
    CHECK(thread_objects[i]["attributes"]["shard"] == "7");
  }

  CliRun hosts = RunCli(directory.With({"hosts", "--json"}));
  REQUIRE(hosts.exit_code == 0);
  REQUIRE(JsonLines(hosts.out).at(0)["kind"] == "host");

  CliRun query = RunCli(directory.With({"query", "--json", "role=merger"}));
  REQUIRE(query.exit_code == 0);
  REQUIRE(JsonLines(query.out).size() == 1);

  CliRun lookup = RunCli(directory.With({"lookup", "--json", directory.threads[0].ToString()}));
  REQUIRE(lookup.exit_code == 0);
  REQUIRE(JsonLines(lookup.out).at(0)["name"] == "worker-1");

  CliRun watch = RunCli(directory.With({"watch", "--json", "--since", "0", "--count", "2"}));
  REQUIRE(watch.exit_code == 0);
  const auto events = JsonLines(watch.out);
  REQUIRE(events.size() == 2);
  CHECK(events[0]["seq"].get<uint64_t>() < events[1]["seq"].get<uint64_t>());
  CHECK(events[0]["op"].is_string());
  CHECK(std::regex_match(events[0]["at"].get<std::string>(), kIsoUtc));

  REQUIRE_OK(directory.session->Close("done"));
  CliRun exited = RunCli(directory.With({"lookup", "--json", process}));
  REQUIRE(exited.exit_code == 0);
  const json gone = JsonLines(exited.out).at(0);
  CHECK(gone["state"] == "exited");
  CHECK(std::regex_match(gone["exited_at"].get<std::string>(), kIsoUtc));
  CHECK(gone["exit_reason"] == "done");
}

TEST_CASE("tocl exits 1 when an id is unknown or a query matches nothing, 0 for an empty listing",
          "[cli][integration]") {
  Directory directory;
  const Gid unknown =
      Gid::Process(directory.process.host_index(), directory.process.process_index() + 1000);

  CliRun lookup = RunCli(directory.With({"lookup", unknown.ToString()}));
  REQUIRE(lookup.exit_code == 1);
  REQUIRE(lookup.out.empty());
  RequireOneErrorLine(lookup);

  CliRun query = RunCli(directory.With({"query", "name=no-such-entity"}));
  REQUIRE(query.exit_code == 1);
  REQUIRE(query.out.empty());
  RequireOneErrorLine(query);

  CliRun threads = RunCli(directory.With({"threads", "--json", "--process", unknown.ToString()}));
  REQUIRE(threads.exit_code == 0);
  REQUIRE(threads.out.empty());
  RequireOneErrorLine(threads);
}

TEST_CASE("tocl exits 2 with one line on stderr for usage errors", "[cli][integration]") {
  Directory directory;

  CliRun bad_gid = RunCli(directory.With({"lookup", "h1.x7"}));
  REQUIRE(bad_gid.exit_code == 2);
  RequireOneErrorLine(bad_gid);
  REQUIRE(bad_gid.err.find("h1.x7") != std::string::npos);

  CliRun bad_process = RunCli(directory.With({"threads", "--process", "h1"}));
  REQUIRE(bad_process.exit_code == 2);
  RequireOneErrorLine(bad_process);

  CliRun bad_query = RunCli(directory.With({"query", "kind=thread and and"}));
  REQUIRE(bad_query.exit_code == 2);
  RequireOneErrorLine(bad_query);
  REQUIRE(bad_query.err.find("position 16") != std::string::npos);

  for (const std::vector<std::string>& args : {std::vector<std::string>{"ps", "--bogus"},
                                               {},
                                               {"frobnicate"},
                                               {"lookup"},
                                               {"query", "--limit", "0", "kind=host"},
                                               {"watch", "--count", "-1"}}) {
    CliRun run = RunCli(directory.With(args));
    REQUIRE(run.exit_code == 2);
    REQUIRE(run.out.empty());
    RequireOneErrorLine(run);
  }

  CliRun help = RunCli({"ps", "--help"});
  REQUIRE(help.exit_code == 0);
  REQUIRE(help.out.find("--daemon") != std::string::npos);
}

TEST_CASE("tocl pools prints the reported pool statistics as a table and as JSON",
          "[cli][pool][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();
  const std::vector<PoolClassStats> report = {
      {.network = "shm",
       .class_bytes = 64 << 10,
       .in_use = 3,
       .free = 61,
       .provided = 0,
       .grown = 1,
       .bytes_registered = 4 << 20},
      {.network = "tcp",
       .class_bytes = 1 << 20,
       .in_use = 12345,
       .free = 0,
       .provided = 8,
       .grown = 2,
       .bytes_registered = 1536 << 10},
  };
  REQUIRE_OK(directory.session->ReportPoolStats(report));
  REQUIRE(WaitUntil([&] { return directory.client->PoolStats(directory.process).ok(); },
                    std::chrono::seconds(10)));

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"pools"}, std::vector<std::string>{"pools", process}}) {
    CliRun pools = RunCli(directory.With(args));
    REQUIRE(pools.exit_code == 0);
    REQUIRE(pools.err.empty());
    const auto lines = Lines(pools.out);
    REQUIRE(lines.size() == 3);
    REQUIRE(std::regex_match(
        lines[0],
        std::regex("PROCESS +NETWORK +CLASS +IN_USE +FREE +PROVIDED +GROWN +REGISTERED")));
    const std::vector<std::vector<std::pair<std::string, std::string>>> rows = {
        {{"NETWORK", "shm"},
         {"CLASS", "64K "},
         {"IN_USE", "3 "},
         {"FREE", "61 "},
         {"GROWN", "1 "},
         {"REGISTERED", "4M"}},
        {{"NETWORK", "tcp"},
         {"CLASS", "1M "},
         {"IN_USE", "12345 "},
         {"PROVIDED", "8 "},
         {"REGISTERED", "1.5M"}},
    };
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string& row = lines[i + 1];
      REQUIRE(row.starts_with(process + " "));
      for (const auto& [header, cell] : rows[i]) {
        INFO(cell << " under " << header << " in: " << row);
        CHECK(row.substr(lines[0].find(header)).starts_with(cell));
      }
    }
  }

  CliRun json_run = RunCli(directory.With({"pools", "--json", process}));
  REQUIRE(json_run.exit_code == 0);
  const auto objects = JsonLines(json_run.out);
  REQUIRE(objects.size() == 1);
  CHECK(objects[0]["process"] == process);
  CHECK(std::regex_match(objects[0]["reported_at"].get<std::string>(), kIsoUtc));
  CHECK(objects[0]["classes"] == json::array({{{"network", "shm"},
                                               {"class_bytes", 65536},
                                               {"in_use", 3},
                                               {"free", 61},
                                               {"provided", 0},
                                               {"grown", 1},
                                               {"bytes_registered", 4194304}},
                                              {{"network", "tcp"},
                                               {"class_bytes", 1048576},
                                               {"in_use", 12345},
                                               {"free", 0},
                                               {"provided", 8},
                                               {"grown", 2},
                                               {"bytes_registered", 1572864}}}));
}

TEST_CASE("tocl pools exits 1 for an unknown or silent process and 2 for a bad id",
          "[cli][pool][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();
  const Gid unknown =
      Gid::Process(directory.process.host_index(), directory.process.process_index() + 1000);

  CliRun none = RunCli(directory.With({"pools"}));
  REQUIRE(none.exit_code == 0);  // an empty listing
  REQUIRE(none.out.empty());
  RequireOneErrorLine(none);
  CHECK(none.err == "tocl: no process has reported pool statistics\n");

  CliRun silent = RunCli(directory.With({"pools", "--json", process}));
  REQUIRE(silent.exit_code == 1);
  REQUIRE(silent.out.empty());
  CHECK(silent.err ==
        fmt::format("tocl: process {} has not reported pool statistics yet\n", process));

  CliRun missing = RunCli(directory.With({"pools", unknown.ToString()}));
  REQUIRE(missing.exit_code == 1);
  REQUIRE(missing.out.empty());
  CHECK(missing.err == fmt::format("tocl: no process {}\n", unknown.ToString()));

  for (const std::string bad : {"h1", "h1.p2.t3", "h1.x2"}) {
    CliRun run = RunCli(directory.With({"pools", bad}));
    REQUIRE(run.exit_code == 2);
    REQUIRE(run.out.empty());
    RequireOneErrorLine(run);
    CHECK(run.err.find(bad) != std::string::npos);
  }

  REQUIRE_OK(directory.session->Close("done"));
  Status gone;
  REQUIRE(WaitUntil(
      [&] {
        gone = directory.client->PoolStats(directory.process).status();
        return gone.message().ends_with("has exited");
      },
      std::chrono::seconds(10)));
  CliRun exited = RunCli(directory.With({"pools", process}));
  REQUIRE(exited.exit_code == 1);
  CHECK(exited.err == fmt::format("tocl: process {} has exited\n", process));
}

// What cli-test reports for `tocl networks`: shm, and two tcp networks with
// peers (one bandwidth measured, one not yet; one peer failed).
std::vector<NetworkStats> NetworkReport() {
  std::vector<NetworkStats> report(3);
  report[0].name = "shm";
  report[0].kind = "shm";
  report[0].frames_sent = 10;
  report[0].bytes_sent = 640;
  report[1].name = "tcp.0";
  report[1].kind = "tcp";
  report[1].device = "eth0";
  report[1].address = "10.0.0.1:41234";
  report[1].frames_sent = 1204;
  report[1].bytes_sent = uint64_t{3} << 30;
  report[1].frames_received = 998;
  report[1].bytes_received = 1536;
  report[1].failures = 1;
  report[1].peers = {{.peer = Gid::Process(2, 5),
                      .bandwidth = 812.4e6,
                      .fragments_sent = 1024,
                      .fragments_resent = 0,
                      .failed = false},
                     {.peer = Gid::Process(3, 1),
                      .bandwidth = 0,
                      .fragments_sent = 40,
                      .fragments_resent = 17,
                      .failed = true}};
  report[2].name = "tcp.1";
  report[2].kind = "tcp";
  report[2].device = "eth1";
  report[2].address = std::string("\x0a\x00\x01\x01\xa0\x12", 6);
  report[2].peers = {{.peer = Gid::Process(2, 5),
                      .bandwidth = 117.5e6,
                      .fragments_sent = 300,
                      .fragments_resent = 2,
                      .failed = false}};
  return report;
}

// Checks that each {header, cell} of `cells` is the start of `row` under
// `header` in `header_line`.
void CheckCells(const std::string& header_line, const std::string& row,
                const std::vector<std::pair<std::string, std::string>>& cells) {
  for (const auto& [header, cell] : cells) {
    INFO(cell << " under " << header << " in: " << row);
    const size_t column = header_line.find(header);
    REQUIRE(column != std::string::npos);
    CHECK(row.substr(column).starts_with(cell));
  }
}

TEST_CASE("tocl networks prints the reported networks and their peers as tables and as JSON",
          "[cli][network][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();
  REQUIRE_OK(directory.session->ReportNetworkStats(NetworkReport()));
  REQUIRE(WaitUntil([&] { return directory.client->NetworkStats(directory.process).ok(); },
                    std::chrono::seconds(10)));

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"networks"}, std::vector<std::string>{"networks", process}}) {
    CliRun networks = RunCli(directory.With(args));
    REQUIRE(networks.exit_code == 0);
    REQUIRE(networks.err.empty());
    const auto lines = Lines(networks.out);
    REQUIRE(lines.size() == 9);
    REQUIRE(std::regex_match(lines[0],
                             std::regex("PROCESS +NETWORK +KIND +DEVICE +ADDRESS +FRAMES_SENT "
                                        "+BYTES_SENT +FRAMES_RECV +BYTES_RECV +FAILURES")));
    for (size_t i = 1; i <= 3; ++i) REQUIRE(lines[i].starts_with(process + " "));
    CheckCells(lines[0], lines[1],
               {{"NETWORK", "shm "},
                {"KIND", "shm "},
                {"DEVICE", "- "},
                {"ADDRESS", "- "},
                {"FRAMES_SENT", "10 "},
                {"BYTES_SENT", "640 "},
                {"FRAMES_RECV", "0 "},
                {"FAILURES", "0"}});
    CheckCells(lines[0], lines[2],
               {{"NETWORK", "tcp.0 "},
                {"KIND", "tcp "},
                {"DEVICE", "eth0 "},
                {"ADDRESS", "10.0.0.1:41234 "},
                {"FRAMES_SENT", "1204 "},
                {"BYTES_SENT", "3G "},
                {"FRAMES_RECV", "998 "},
                {"BYTES_RECV", "1.5K "},
                {"FAILURES", "1"}});
    CheckCells(lines[0], lines[3], {{"DEVICE", "eth1 "}, {"ADDRESS", "0x0a000101a012 "}});
    REQUIRE(lines[4].empty());
    REQUIRE(std::regex_match(
        lines[5], std::regex("PROCESS +NETWORK +PEER +BANDWIDTH +FRAGMENTS +RESENT +FAILED")));
    CheckCells(lines[5], lines[6],
               {{"PROCESS", process + " "},
                {"NETWORK", "tcp.0 "},
                {"PEER", "h2.p5 "},
                {"BANDWIDTH", "812.4 MB/s "},
                {"FRAGMENTS", "1024 "},
                {"RESENT", "0 "},
                {"FAILED", "no"}});
    CheckCells(lines[5], lines[7],
               {{"NETWORK", "tcp.0 "},
                {"PEER", "h3.p1 "},
                {"BANDWIDTH", "unknown "},
                {"RESENT", "17 "},
                {"FAILED", "yes"}});
    CheckCells(lines[5], lines[8],
               {{"NETWORK", "tcp.1 "}, {"PEER", "h2.p5 "}, {"BANDWIDTH", "117.5 MB/s "}});
  }

  CliRun json_run = RunCli(directory.With({"networks", "--json", process}));
  REQUIRE(json_run.exit_code == 0);
  const auto objects = JsonLines(json_run.out);
  REQUIRE(objects.size() == 1);
  CHECK(objects[0]["process"] == process);
  CHECK(std::regex_match(objects[0]["reported_at"].get<std::string>(), kIsoUtc));
  const json& networks = objects[0]["networks"];
  REQUIRE(networks.size() == 3);
  CHECK(networks[0] == json({{"name", "shm"},
                             {"kind", "shm"},
                             {"device", ""},
                             {"address", ""},
                             {"frames_sent", 10},
                             {"bytes_sent", 640},
                             {"frames_received", 0},
                             {"bytes_received", 0},
                             {"failures", 0},
                             {"peers", json::array()},
                             {"provider", ""},
                             {"vi_cap", 0},
                             {"vis_opened", 0},
                             {"vis_closed", 0},
                             {"vis", json::array()}}));
  CHECK(networks[1]["address"] == "31302e302e302e313a3431323334");
  CHECK(networks[1]["bytes_sent"] == uint64_t{3} << 30);
  CHECK(networks[1]["peers"] == json::array({{{"peer", "h2.p5"},
                                              {"bandwidth", 812.4e6},
                                              {"fragments_sent", 1024},
                                              {"fragments_resent", 0},
                                              {"failed", false}},
                                             {{"peer", "h3.p1"},
                                              {"bandwidth", nullptr},
                                              {"fragments_sent", 40},
                                              {"fragments_resent", 17},
                                              {"failed", true}}}));
  CHECK(networks[2]["address"] == "0a000101a012");
  CHECK(networks[2]["peers"][0]["bandwidth"] == 117.5e6);
}

// A shm network and a via network with two VIs (the runtime does not report
// via networks yet: crafted like NetworkReport).
std::vector<NetworkStats> ViaReport() {
  std::vector<NetworkStats> report(2);
  report[0].name = "shm";
  report[0].kind = "shm";
  report[1].name = "via.0";
  report[1].kind = "via";
  report[1].device = "eth0";
  report[1].provider = "sockets";
  report[1].vi_cap = 64;
  report[1].vis_opened = 5;
  report[1].vis_closed = 3;
  report[1].vis = {{.peer = Gid::Process(1, 3),
                    .class_bytes = 256,
                    .state = "connected",
                    .posted = 64,
                    .credits = 60,
                    .queued = 0,
                    .sent = 10,
                    .received = 12},
                   {.peer = Gid::Process(2, 7),
                    .class_bytes = 65536,
                    .state = "connecting",
                    .posted = 16,
                    .credits = 0,
                    .queued = 2,
                    .sent = 0,
                    .received = 0}};
  return report;
}

TEST_CASE("tocl networks shows a via network's VI pool as tables and as JSON",
          "[cli][network][via][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();
  REQUIRE_OK(directory.session->ReportNetworkStats(ViaReport()));
  REQUIRE(WaitUntil([&] { return directory.client->NetworkStats(directory.process).ok(); },
                    std::chrono::seconds(10)));

  CliRun networks = RunCli(directory.With({"networks", process}));
  REQUIRE(networks.exit_code == 0);
  REQUIRE(networks.err.empty());
  const auto lines = Lines(networks.out);
  INFO(networks.out);
  // Networks; no peer table (no long messages); the via pools; their VIs.
  REQUIRE(lines.size() == 10);
  CheckCells(lines[0], lines[2], {{"NETWORK", "via.0 "}, {"KIND", "via "}, {"DEVICE", "eth0 "}});
  REQUIRE(lines[3].empty());
  REQUIRE(
      std::regex_match(lines[4], std::regex("PROCESS +NETWORK +PROVIDER +VI_CAP +OPENED +CLOSED")));
  CheckCells(lines[4], lines[5],
             {{"PROCESS", process + " "},
              {"NETWORK", "via.0 "},
              {"PROVIDER", "sockets "},
              {"VI_CAP", "64 "},
              {"OPENED", "5 "},
              {"CLOSED", "3"}});
  REQUIRE(lines[6].empty());
  REQUIRE(std::regex_match(lines[7], std::regex("PROCESS +NETWORK +PEER +CLASS +STATE +POSTED "
                                                "+CREDITS +QUEUED +SENT +RECEIVED")));
  CheckCells(lines[7], lines[8],
             {{"PROCESS", process + " "},
              {"NETWORK", "via.0 "},
              {"PEER", "h1.p3 "},
              {"CLASS", "256 B "},
              {"STATE", "connected "},
              {"POSTED", "64 "},
              {"CREDITS", "60 "},
              {"QUEUED", "0 "},
              {"SENT", "10 "},
              {"RECEIVED", "12"}});
  CheckCells(lines[7], lines[9],
             {{"PEER", "h2.p7 "},
              {"CLASS", "64 KiB "},
              {"STATE", "connecting "},
              {"CREDITS", "0 "},
              {"QUEUED", "2 "},
              {"RECEIVED", "0"}});

  CliRun json_run = RunCli(directory.With({"networks", "--json", process}));
  REQUIRE(json_run.exit_code == 0);
  const auto objects = JsonLines(json_run.out);
  REQUIRE(objects.size() == 1);
  const json& reported = objects[0]["networks"];
  REQUIRE(reported.size() == 2);
  CHECK(reported[0]["provider"] == "");
  CHECK(reported[0]["vis"] == json::array());
  CHECK(reported[1]["provider"] == "sockets");
  CHECK(reported[1]["vi_cap"] == 64);
  CHECK(reported[1]["vis_opened"] == 5);
  CHECK(reported[1]["vis_closed"] == 3);
  CHECK(reported[1]["vis"] == json::array({{{"peer", "h1.p3"},
                                            {"class_bytes", 256},
                                            {"state", "connected"},
                                            {"posted", 64},
                                            {"credits", 60},
                                            {"queued", 0},
                                            {"sent", 10},
                                            {"received", 12}},
                                           {{"peer", "h2.p7"},
                                            {"class_bytes", 65536},
                                            {"state", "connecting"},
                                            {"posted", 16},
                                            {"credits", 0},
                                            {"queued", 2},
                                            {"sent", 0},
                                            {"received", 0}}}));
}

TEST_CASE("tocl networks exits 1 for a silent or unknown process, 2 for a bad id or no daemon",
          "[cli][network][integration]") {
  Directory directory;
  const std::string process = directory.process.ToString();
  const Gid unknown =
      Gid::Process(directory.process.host_index(), directory.process.process_index() + 1000);

  CliRun none = RunCli(directory.With({"networks"}));
  REQUIRE(none.exit_code == 0);  // an empty listing
  REQUIRE(none.out.empty());
  RequireOneErrorLine(none);
  CHECK(none.err == "tocl: no process has reported network statistics\n");

  CliRun silent = RunCli(directory.With({"networks", "--json", process}));
  REQUIRE(silent.exit_code == 1);
  REQUIRE(silent.out.empty());
  CHECK(silent.err ==
        fmt::format("tocl: process {} has not reported network statistics yet\n", process));

  CliRun missing = RunCli(directory.With({"networks", unknown.ToString()}));
  REQUIRE(missing.exit_code == 1);
  REQUIRE(missing.out.empty());
  CHECK(missing.err == fmt::format("tocl: no process {}\n", unknown.ToString()));

  for (const std::string bad : {"h1", "h1.p2.t3", "h1.x2"}) {
    CliRun run = RunCli(directory.With({"networks", bad}));
    REQUIRE(run.exit_code == 2);
    REQUIRE(run.out.empty());
    RequireOneErrorLine(run);
    CHECK(run.err.find(bad) != std::string::npos);
  }

  std::vector<NetworkStats> shm_only(1);
  shm_only[0].name = "shm";
  shm_only[0].kind = "shm";
  REQUIRE_OK(directory.session->ReportNetworkStats(shm_only));
  REQUIRE(WaitUntil([&] { return directory.client->NetworkStats(directory.process).ok(); },
                    std::chrono::seconds(10)));
  CliRun one = RunCli(directory.With({"networks", process}));
  REQUIRE(one.exit_code == 0);
  const auto lines = Lines(one.out);
  REQUIRE(lines.size() == 2);  // no peers: no second table
  REQUIRE(lines[1].starts_with(process + " "));
  CheckCells(lines[0], lines[1], {{"NETWORK", "shm "}, {"DEVICE", "- "}, {"FAILURES", "0"}});

  REQUIRE_OK(directory.session->Close("done"));
  Status gone;
  REQUIRE(WaitUntil(
      [&] {
        gone = directory.client->NetworkStats(directory.process).status();
        return gone.message().ends_with("has exited");
      },
      std::chrono::seconds(10)));
  CliRun exited = RunCli(directory.With({"networks", process}));
  REQUIRE(exited.exit_code == 1);
  CHECK(exited.err == fmt::format("tocl: process {} has exited\n", process));

  // The daemon gone.
  REQUIRE(directory.daemon.Stop().value_or(-1) == 0);
  CliRun stopped = RunCli(directory.With({"networks"}));
  REQUIRE(stopped.exit_code == 2);
  RequireOneErrorLine(stopped);
  CHECK(stopped.err.starts_with("tocl: cannot reach the daemon at "));
}

TEST_CASE("tocl suggests the command nearest to a mistyped one and prints the project's version",
          "[cli][integration]") {
  CliRun typo = RunCli({"hots"});
  CHECK(typo.exit_code == 2);
  CHECK(typo.out.empty());
  CHECK(typo.err == "tocl: unknown command 'hots'; did you mean 'hosts'?\n");
  // After common options, a swap of two letters, a command cut short.
  CHECK(RunCli({"--daemon", "unix:/nowhere", "--json", "qeury", "x"}).err ==
        "tocl: unknown command 'qeury'; did you mean 'query'?\n");
  CHECK(RunCli({"spawn-t", "h1.p1", "echo"}).err ==
        "tocl: unknown command 'spawn-t'; did you mean 'spawn-thread'?\n");
  CliRun far = RunCli({"frobnicate"});
  CHECK(far.exit_code == 2);
  CHECK(far.err == "tocl: unknown command 'frobnicate' (see 'tocl --help')\n");

  CliRun version = RunCli({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out == "tocl " TOCL_VERSION_STRING "\n");
}

TEST_CASE("tocl exits 2 with one line when the daemon cannot be reached", "[cli][integration]") {
  TempDir dir;
  const std::string address = "unix:" + dir.path() + "/toclsd.sock";
  CliRun missing = RunCli({"hosts", "--daemon", address});
  REQUIRE(missing.exit_code == 2);
  RequireOneErrorLine(missing);
  REQUIRE(missing.err.starts_with(fmt::format("tocl: cannot reach the daemon at {}: ", address)));

  // A bare socket path means the same.
  CliRun bare = RunCli({"ps", "--daemon", dir.path() + "/toclsd.sock"});
  REQUIRE(bare.exit_code == 2);
  REQUIRE(bare.err.starts_with(fmt::format("tocl: cannot reach the daemon at {}: ", address)));

  // A stopped daemon.
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  REQUIRE(daemon.Stop().value_or(-1) == 0);
  CliRun stopped = RunCli({"lookup", "h1", "--daemon", daemon.address()});
  REQUIRE(stopped.exit_code == 2);
  RequireOneErrorLine(stopped);
  REQUIRE(stopped.err.starts_with("tocl: cannot reach the daemon at "));
}

}  // namespace
}  // namespace tocl::testing
