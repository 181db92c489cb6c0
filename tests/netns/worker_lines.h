// tocl-long-worker seen from the test: starting it in a host of a netns
// cluster and reading the lines it prints ("EVENT key value ...", see
// helpers/long_worker.cc). No Catch2 here.
//
//   auto receiver = LongWorker::Start(cluster, 2, {"recv"}, "ready");
//   auto got = receiver->WaitFor("got", {{"seq", "0"}}, std::chrono::seconds(30));
//   uint64_t bytes = got->Number("bytes");
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "child_process.h"
#include "netns_cluster.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::testing {

// One printed line: its first word and its key/value pairs ("status" takes
// the rest of the line).
struct WorkerEvent {
  std::string name;
  std::map<std::string, std::string> fields;

  std::string Field(const std::string& key) const;  // "" when absent
  uint64_t Number(const std::string& key) const;    // 0 when absent or not a number
  double Real(const std::string& key) const;
};

// The events called `name` (every event when empty) in `output`, in order.
std::vector<WorkerEvent> ParseWorkerEvents(const std::string& output, const std::string& name);

class LongWorker {
 public:
  // The networks Start opens by default: the cluster's two tcp networks,
  // no shm.
  static constexpr const char* kTwoTcpNetworks = "tcp:eth0,tcp:eth1";

  // Starts tocl-long-worker with `args` in the host's namespace over
  // `networks` (TOCL_NETWORKS, e.g. "tcp:eth0,via:eth1"), and waits until it
  // has printed `ready_event` (its pid and thread Gids are printed before).
  // With `pipe_stdin`, Go() closes its stdin (the go signal). The error
  // holds what it printed when it exits or does not get ready in time.
  static Result<LongWorker> Start(NetnsCluster& cluster, int host, std::vector<std::string> args,
                                  const std::string& ready_event, bool pipe_stdin = false,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                  const std::string& networks = kTwoTcpNetworks);

  // The same for another program that prints such lines ("started pid=",
  // "gid thread= gid=", then `ready_event`), over the host's default networks.
  static Result<LongWorker> StartProgram(
      NetnsCluster& cluster, int host, const std::string& program, std::vector<std::string> args,
      const std::string& ready_event, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  pid_t pid() const { return pid_; }                      // the worker's own pid (VmRSS)
  const std::vector<Gid>& gids() const { return gids_; }  // by thread index
  std::string GidList() const;                            // "h2.p1.t1,h2.p1.t2"
  std::string Output() const { return process_.Output(); }
  std::vector<WorkerEvent> Events(const std::string& name) const;

  // The first event called `name` whose fields include `match`, waiting up
  // to `timeout`; nullopt when the worker exits without it or time is up.
  std::optional<WorkerEvent> WaitFor(const std::string& name,
                                     const std::map<std::string, std::string>& match,
                                     std::chrono::milliseconds timeout) const;
  // Polls `predicate` (which may sample anything, e.g. memory) until it
  // holds; false when the worker exits or time is up first.
  bool WaitUntilOrExit(const std::function<bool()>& predicate,
                       std::chrono::milliseconds timeout) const;
  // Exit status (0 success), waiting up to `timeout`.
  Result<int> Wait(std::chrono::milliseconds timeout) { return process_.Wait(timeout); }
  bool Exited() const { return process_.Exited(); }  // ended (reaped or not)
  void Go() { process_.CloseStdin(); }

 private:
  LongWorker(ChildProcess process) : process_(std::move(process)) {}
  static Result<LongWorker> Launch(NetnsCluster& cluster, int host, const std::string& program,
                                   std::vector<std::string> args, const EnvList& env,
                                   const std::string& ready_event, bool pipe_stdin,
                                   std::chrono::milliseconds timeout);

  ChildProcess process_;
  pid_t pid_ = -1;
  std::vector<Gid> gids_;
};

}  // namespace tocl::testing
