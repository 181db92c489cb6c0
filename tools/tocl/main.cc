// tocl: the command line of the tocl directory (hosts, processes, threads,
// queries and their changes, pool and network statistics). See
// tools/README.md.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "command_suggestion.h"
#include "commands.h"
#include "exit_code.h"
#include "keygen_command.h"
#include "process_commands.h"
#include "tocl/directory_client.h"
#include "tocl/version.h"

namespace {

using tocl::cli::CommonOptions;

void AddCommonOptions(CLI::App* command, CommonOptions* options) {
  command
      ->add_option("--daemon", options->daemon,
                   "The daemon: unix:/path, a socket path or host:port ($TOCL_DAEMON)")
      ->capture_default_str();
  command->add_flag("--json", options->json, "One JSON object per line (JSON Lines)");
  command
      ->add_option("--credentials", options->credentials,
                   "This host's cluster credentials (tocl keygen), for a daemon at host:port "
                   "with credentials: mutual TLS ($TOCL_CREDENTIALS)")
      ->capture_default_str();
}

// CLI11 2.1 reads "-1" into an unsigned integer as its largest value.
CLI::Validator NotNegative() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        return text.starts_with('-') ? fmt::format("{} is negative", text) : "";
      },
      "", "NotNegative");
}

// CLI11 exits with its own codes (105, 106, ...); tocl's usage errors are 2
// and its messages one "tocl: " line. Help is not an error.
int ReportParseError(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);
  return tocl::cli::Fail(tocl::cli::kExitUsage,
                         fmt::format("{} (see 'tocl --help')", error.what()));
}

// A first word that names no subcommand: CLI11 would say "The following
// arguments were not expected"; say which command was meant, if one is near.
std::optional<int> RejectUnknownCommand(CLI::App& app, int argc, char** argv) {
  static constexpr std::string_view kOptionsWithValues[] = {"--daemon", "--credentials"};
  const char* const* args = argv + 1;
  const std::optional<std::string_view> word =
      tocl::cli::CommandWord(std::span(args, static_cast<size_t>(argc - 1)), kOptionsWithValues);
  if (!word) return std::nullopt;
  std::vector<std::string> commands;
  for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    commands.push_back(command->get_name());
  }
  if (std::find(commands.begin(), commands.end(), *word) != commands.end()) return std::nullopt;
  const std::optional<std::string> nearest = tocl::cli::NearestCommand(*word, commands);
  return tocl::cli::Fail(
      tocl::cli::kExitUsage,
      nearest ? fmt::format("unknown command '{}'; did you mean '{}'?", *word, *nearest)
              : fmt::format("unknown command '{}' (see 'tocl --help')", *word));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Looks at the tocl directory (hosts, processes, threads, their changes, pool and network "
      "statistics) and spawns, signals and waits for processes and threads of the cluster.",
      "tocl"};
  app.set_version_flag("--version", "tocl " TOCL_VERSION_STRING);
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success (an empty listing too), 1 not found / no match (lookup, query, "
      "pools or networks of one process), 2 usage or connection error, 3 other daemon error.");

  CommonOptions options;
  options.daemon = tocl::DirectoryClient::DefaultAddress();
  if (const char* credentials = std::getenv("TOCL_CREDENTIALS")) options.credentials = credentials;
  // Before the subcommand too: `tocl --daemon ADDR ps` and `tocl ps --daemon ADDR`.
  AddCommonOptions(&app, &options);

  CLI::App* hosts = app.add_subcommand("hosts", "List all hosts");
  AddCommonOptions(hosts, &options);

  bool all = false;
  CLI::App* ps = app.add_subcommand("ps", "List processes (running ones unless --all)");
  AddCommonOptions(ps, &options);
  ps->add_flag("--all,-a", all, "Exited processes too");

  std::string process;
  CLI::App* threads = app.add_subcommand("threads", "List threads (running ones unless --all)");
  AddCommonOptions(threads, &options);
  threads->add_option("--process,-p", process, "Only the threads of this process (h1.p2)");
  threads->add_flag("--all,-a", all, "Exited threads too");

  std::string gid;
  CLI::App* lookup = app.add_subcommand("lookup", "Show one entity by its id");
  AddCommonOptions(lookup, &options);
  lookup->add_option("GID", gid, "h3, h3.p17 or h3.p17.t5")->required();

  std::string expression;
  size_t limit = 1000;
  CLI::App* query = app.add_subcommand("query", "List the entities matching an expression");
  AddCommonOptions(query, &options);
  query->add_option("EXPR", expression, "e.g. 'kind=thread and role=merger'")->required();
  query->add_option("--limit,-n", limit, "At most this many entities")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1'000'000}));

  uint64_t since = 0;
  uint64_t count = 0;
  CLI::App* watch = app.add_subcommand("watch", "Print change events as they happen");
  AddCommonOptions(watch, &options);
  CLI::Option* since_option =
      watch
          ->add_option("--since", since,
                       "Start after this sequence number (0: all history; default: now)")
          ->check(NotNegative());
  watch->add_option("--count", count, "Stop after this many events (0: until Ctrl-C)")
      ->capture_default_str()
      ->check(NotNegative());

  std::string pools_process;
  CLI::App* pools =
      app.add_subcommand("pools", "Show the buffer-pool statistics processes reported");
  AddCommonOptions(pools, &options);
  pools->add_option("PROCESS", pools_process, "Only this process (h1.p2); default: all");

  std::string networks_process;
  CLI::App* networks = app.add_subcommand(
      "networks", "Show the networks processes reported, their traffic and measured bandwidth");
  AddCommonOptions(networks, &options);
  networks->add_option("PROCESS", networks_process, "Only this process (h1.p2); default: all");

  tocl::cli::SpawnCommand spawn_command;
  CLI::App* spawn = app.add_subcommand(
      "spawn", "Start a program on a host of the cluster; prints its id once it has enrolled");
  AddCommonOptions(spawn, &options);
  spawn->add_option("--host", spawn_command.host, "On this host (h2)");
  spawn->add_option("--where", spawn_command.where,
                    "On the least loaded host matching this query, e.g. 'gpu=1' or "
                    "'host=h2 or host=h3'");
  spawn->add_option("--name", spawn_command.name, "The process's name (default: the program's)");
  spawn->add_option("--attr", spawn_command.attributes, "An attribute KEY=VALUE (repeatable)");
  spawn->add_option("--env", spawn_command.env, "An environment entry KEY=VALUE (repeatable)");
  spawn->add_option("--cwd", spawn_command.working_directory, "Working directory on the host");
  spawn
      ->add_option("--enroll-timeout", spawn_command.enroll_timeout_seconds,
                   "Seconds it has to enroll before it is killed (default: the daemon's, 10)")
      ->check(CLI::NonNegativeNumber);
  spawn->add_option("PROGRAM", spawn_command.command, "-- PROGRAM ARGS...")->required();
  spawn->prefix_command(false);

  std::string thread_process, thread_entry, thread_payload;
  CLI::App* spawn_thread = app.add_subcommand(
      "spawn-thread", "Start a thread running a registered entry point in a running process");
  AddCommonOptions(spawn_thread, &options);
  spawn_thread->add_option("PROCESS", thread_process, "The process (h2.p5)")->required();
  spawn_thread->add_option("ENTRY", thread_entry, "The entry's name (tocl::register_entry)")
      ->required();
  spawn_thread->add_option("PAYLOAD", thread_payload, "Bytes handed to the entry (text)");

  std::string kill_gid, kill_signal = "TERM";
  CLI::App* kill = app.add_subcommand("kill", "Send a signal to a process anywhere in the cluster");
  AddCommonOptions(kill, &options);
  kill->add_option("GID", kill_gid, "The process (h2.p5)")->required();
  kill->add_option("--signal,-s", kill_signal, "TERM, KILL, INT, HUP, ... or a number")
      ->capture_default_str();

  std::string wait_gid;
  double wait_timeout = 0;
  CLI::App* wait = app.add_subcommand(
      "wait", "Wait until a thread, process or host exits or becomes unreachable");
  AddCommonOptions(wait, &options);
  wait->add_option("GID", wait_gid, "h2, h2.p5 or h2.p5.t1")->required();
  wait->add_option("--timeout", wait_timeout, "Give up after this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);

  std::string logs_gid;
  bool logs_stderr = false, logs_follow = false;
  CLI::App* logs = app.add_subcommand("logs", "Print a spawned process's stdout (or stderr)");
  AddCommonOptions(logs, &options);
  logs->add_option("GID", logs_gid, "The process (h2.p5)")->required();
  logs->add_flag("--stderr", logs_stderr, "Its stderr instead of its stdout");
  logs->add_flag("--follow,-f", logs_follow, "Go on printing until it exits");

  tocl::cli::KeygenCommand keygen_command;
  CLI::App* keygen = app.add_subcommand(
      "keygen",
      "Make cluster credentials: a CA, a certificate and key per host, and the data-plane "
      "secret, in DIR/ca and DIR/<host> (no daemon needed)");
  keygen->add_option("DIR", keygen_command.directory, "Where to write them (created 0700)")
      ->required();
  keygen
      ->add_option("--host", keygen_command.hosts,
                   "NAME[=EXTRA,EXTRA...]: a host, and more DNS names or IPs its certificate "
                   "lists (repeatable; a host that has credentials in DIR already is refused)")
      // One value per --host, so `--host h1 DIR` does not take DIR for a host.
      ->expected(1)
      ->take_all()
      ->required();
  keygen->add_option("--days", keygen_command.days, "How long the certificates are valid")
      ->capture_default_str()
      ->check(CLI::Range(1, 36500));

  if (std::optional<int> unknown = RejectUnknownCommand(app, argc, argv)) return *unknown;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return ReportParseError(app, error);
  }
  // What tocl runs in-process (a Runtime for spawn-thread) reads
  // $TOCL_CREDENTIALS like the connections do.
  if (!options.credentials.empty()) ::setenv("TOCL_CREDENTIALS", options.credentials.c_str(), 1);
  // gRPC's own log lines (a failed TLS handshake prints one) would break
  // the one-line error rule; the error message carries gRPC's reason. Read
  // when gRPC starts, below; a GRPC_VERBOSITY the user set wins.
  ::setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);

  if (*keygen) return tocl::cli::RunKeygen(keygen_command);

  if (*hosts) return tocl::cli::RunHosts(options);
  if (*ps) return tocl::cli::RunPs(options, all);
  if (*threads) return tocl::cli::RunThreads(options, process, all);
  if (*lookup) return tocl::cli::RunLookup(options, gid);
  if (*query) return tocl::cli::RunQuery(options, expression, limit);
  if (*pools) return tocl::cli::RunPools(options, pools_process);
  if (*networks) return tocl::cli::RunNetworks(options, networks_process);
  if (*spawn) return tocl::cli::RunSpawn(options, spawn_command);
  if (*spawn_thread) {
    return tocl::cli::RunSpawnThread(options, thread_process, thread_entry, thread_payload);
  }
  if (*kill) return tocl::cli::RunKill(options, kill_gid, kill_signal);
  if (*wait) return tocl::cli::RunWait(options, wait_gid, wait_timeout);
  if (*logs) return tocl::cli::RunLogs(options, logs_gid, logs_stderr, logs_follow);
  if (*watch) {
    const std::optional<uint64_t> start =
        since_option->count() > 0 ? std::optional<uint64_t>(since) : std::nullopt;
    return tocl::cli::RunWatch(options, start, count);
  }
  return tocl::cli::kExitUsage;  // unreachable: a subcommand is required
}
