#include "worker_lines.h"

#include <fmt/core.h>

#include <cstdlib>
#include <sstream>

namespace tocl::testing {

const std::string kLongWorker = TOCL_LONG_WORKER_PATH;

std::string WorkerEvent::Field(const std::string& key) const {
  auto it = fields.find(key);
  return it == fields.end() ? std::string() : it->second;
}

uint64_t WorkerEvent::Number(const std::string& key) const {
  return std::strtoull(Field(key).c_str(), nullptr, 10);
}

double WorkerEvent::Real(const std::string& key) const {
  return std::strtod(Field(key).c_str(), nullptr);
}

std::vector<WorkerEvent> ParseWorkerEvents(const std::string& output, const std::string& name) {
  std::vector<WorkerEvent> events;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    WorkerEvent event;
    if (!(words >> event.name) || (!name.empty() && event.name != name)) continue;
    std::string key;
    while (words >> key) {
      std::string value;
      if (key == "status") {
        std::getline(words >> std::ws, value);
      } else {
        words >> value;
      }
      event.fields[key] = value;
    }
    events.push_back(std::move(event));
  }
  return events;
}

Result<LongWorker> LongWorker::Start(NetnsCluster& cluster, int host, std::vector<std::string> args,
                                     const std::string& ready_event, bool pipe_stdin,
                                     std::chrono::milliseconds timeout,
                                     const std::string& networks) {
  return Launch(cluster, host, kLongWorker, std::move(args), {{"TOCL_NETWORKS", networks}},
                ready_event, pipe_stdin, timeout);
}

Result<LongWorker> LongWorker::StartProgram(NetnsCluster& cluster, int host,
                                            const std::string& program,
                                            std::vector<std::string> args,
                                            const std::string& ready_event,
                                            std::chrono::milliseconds timeout) {
  return Launch(cluster, host, program, std::move(args), {}, ready_event, false, timeout);
}

Result<LongWorker> LongWorker::Launch(NetnsCluster& cluster, int host, const std::string& program,
                                      std::vector<std::string> args, const EnvList& env,
                                      const std::string& ready_event, bool pipe_stdin,
                                      std::chrono::milliseconds timeout) {
  const std::string name = program.substr(program.rfind('/') + 1);
  const std::string command =
      fmt::format("{} {} in host {}", name, args.empty() ? "" : args[0], host);
  args.insert(args.begin(), program);
  SpawnOptions spawn;
  spawn.pipe_stdin = pipe_stdin;
  TOCL_ASSIGN_OR_RETURN(ChildProcess process, cluster.Spawn(host, args, env, spawn));
  LongWorker worker(std::move(process));
  if (!worker.WaitFor(ready_event, {}, timeout)) {
    return Unavailable(
        fmt::format("{} did not print '{}' ({}); it printed:\n{}", command, ready_event,
                    worker.process_.Exited() ? "it exited" : "timed out", worker.Output()));
  }
  for (const WorkerEvent& event : worker.Events("")) {
    if (event.name == "started") worker.pid_ = static_cast<pid_t>(event.Number("pid"));
    if (event.name != "gid") continue;
    auto gid = Gid::Parse(event.Field("gid"));
    if (!gid.ok() || event.Number("thread") != worker.gids_.size()) {
      return Internal(fmt::format("{}: a bad line: gid thread {} gid {}", command,
                                  event.Field("thread"), event.Field("gid")));
    }
    worker.gids_.push_back(*gid);
  }
  if (worker.pid_ <= 0) return Internal(command + " printed no pid:\n" + worker.Output());
  return worker;
}

std::string LongWorker::GidList() const {
  std::string list;
  for (Gid gid : gids_) list += (list.empty() ? "" : ",") + gid.ToString();
  return list;
}

std::vector<WorkerEvent> LongWorker::Events(const std::string& name) const {
  return ParseWorkerEvents(Output(), name);
}

std::optional<WorkerEvent> LongWorker::WaitFor(const std::string& name,
                                               const std::map<std::string, std::string>& match,
                                               std::chrono::milliseconds timeout) const {
  std::optional<WorkerEvent> found;
  WaitUntilOrExit(
      [&] {
        for (WorkerEvent& event : Events(name)) {
          bool matches = true;
          for (const auto& [key, value] : match) matches &= event.Field(key) == value;
          if (matches) {
            found = std::move(event);
            return true;
          }
        }
        return false;
      },
      timeout);
  return found;
}

bool LongWorker::WaitUntilOrExit(const std::function<bool()>& predicate,
                                 std::chrono::milliseconds timeout) const {
  bool satisfied = false;
  WaitUntil(
      [&] {
        // Exited first: what it printed before it exited is read after.
        const bool exited = process_.Exited();
        satisfied = predicate();
        return satisfied || exited;
      },
      timeout);
  return satisfied;
}

}  // namespace tocl::testing
