// The subcommands of `tocl`. Each one connects to the daemon, prints its
// result on stdout (a table, or JSON Lines with --json), prints errors as
// one "tocl: ..." line on stderr, and returns the process exit code
// (exit_code.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tocl::cli {

// Flags every subcommand takes.
struct CommonOptions {
  std::string daemon;  // --daemon: "unix:/path", a socket path or "host:port"
  bool json = false;   // --json: JSON Lines instead of a table
  // --credentials: this host's credentials directory for TCP daemons (mutual
  // TLS); main() puts it in $TOCL_CREDENTIALS, where every connection (the
  // library's, a Runtime's) finds it.
  std::string credentials;
};

// All hosts.
int RunHosts(const CommonOptions& options);
// Processes; exited ones too with `all`.
int RunPs(const CommonOptions& options, bool all);
// Threads, of one process when `process` ("h1.p2") is not empty; exited
// ones too with `all`.
int RunThreads(const CommonOptions& options, const std::string& process, bool all);
// One entity by its id text ("h1.p2.t3").
int RunLookup(const CommonOptions& options, const std::string& gid_text);
// Entities matching `expression`, at most `limit` of them.
int RunQuery(const CommonOptions& options, const std::string& expression, size_t limit);
// Change events with a sequence number above `since` (default: the newest
// one now, so only what happens from now on), until Ctrl-C (or SIGTERM) or
// `count` events (0: no limit). Flushes every line.
int RunWatch(const CommonOptions& options, std::optional<uint64_t> since, uint64_t count);

// The pool statistics processes reported to the daemon: of one process
// when `process` ("h1.p2") is not empty, else of every process that has
// reported.
int RunPools(const CommonOptions& options, const std::string& process);

// The network statistics processes reported to the daemon (networks, their
// peers, then the VI pools of via networks), of one process or of every
// process that has reported.
int RunNetworks(const CommonOptions& options, const std::string& process);

}  // namespace tocl::cli
