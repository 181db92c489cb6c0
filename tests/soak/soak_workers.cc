#include "soak_workers.h"

#include <fmt/format.h>
#include <signal.h>

#include <cerrno>

namespace tocl::testing {
namespace {

const std::string kSoakWorker = TOCL_SOAK_WORKER_PATH;

}  // namespace

std::string SoakIncarnation::Label() const {
  return fmt::format("h{}#{}", host, number);
}

std::string LastLines(const std::string& text, size_t lines) {
  size_t at = text.size();
  while (lines > 0 && at > 0) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
    --lines;
  }
  return text.substr(at == 0 ? 0 : at + 1);
}

SoakWorkers::SoakWorkers(NetnsCluster& cluster, SoakWorkerSettings settings)
    : cluster_(cluster), settings_(settings) {}

Status SoakWorkers::StartAll() {
  for (int h = 1; h <= cluster_.hosts(); ++h) TOCL_RETURN_IF_ERROR(Start(h));
  return Status::Ok();
}

Status SoakWorkers::Start(int host) {
  if (Running(host)) {
    return FailedPrecondition(fmt::format("host {} already runs a soak worker", host));
  }
  int number = 1;
  for (const auto& incarnation : all_) number += incarnation->host == host ? 1 : 0;
  const std::string records = settings_.records_dir.empty()
                                  ? ""
                                  : fmt::format("{}/h{}#{}", settings_.records_dir, host, number);
  std::vector<std::string> args = {
      "--target-host", std::to_string(host % cluster_.hosts() + 1),
      "--threads",     std::to_string(settings_.threads),
      "--seed",        std::to_string(settings_.seed),
      "--rate",        std::to_string(settings_.rate),
      "--stats-ms",    std::to_string(settings_.stats_interval.count()),
      "--stall-ms",    std::to_string(settings_.stall_timeout.count()),
      "--drain-ms",    std::to_string(settings_.drain_timeout.count())};
  if (!records.empty()) args.insert(args.end(), {"--records", records});
  auto started = LongWorker::StartProgram(cluster_, host, kSoakWorker, args, "ready");
  if (!started.ok()) {
    return started.status().WithContext(fmt::format("soak worker h{}#{}", host, number));
  }
  auto incarnation = std::make_unique<SoakIncarnation>();
  incarnation->host = host;
  incarnation->number = number;
  incarnation->records = records;
  incarnation->started = std::chrono::steady_clock::now();
  incarnation->worker = std::make_unique<LongWorker>(std::move(started).value());
  current_[host] = incarnation.get();
  all_.push_back(std::move(incarnation));
  return Status::Ok();
}

Status SoakWorkers::Kill(int host) {
  if (!Running(host)) return FailedPrecondition(fmt::format("host {} runs no soak worker", host));
  SoakIncarnation& incarnation = *current_[host];
  // A worker that died by itself (a crash) must not pass for one we killed:
  // its successor would hide it.
  if (incarnation.worker->Exited()) {
    auto code = incarnation.worker->Wait(std::chrono::seconds(1));
    return Internal(fmt::format(
        "{} had already ended ({}) before the planned kill; its last "
        "lines:\n{}",
        incarnation.Label(), code.ok() ? ExitStatusText(*code) : code.status().ToString(),
        LastLines(incarnation.worker->Output(), 15)));
  }
  if (::kill(incarnation.worker->pid(), SIGKILL) != 0) {
    return Internal(fmt::format("kill -9 {} ({}): errno {}", incarnation.worker->pid(),
                                incarnation.Label(), errno));
  }
  incarnation.killed = true;
  current_.erase(host);
  auto reaped = incarnation.worker->Wait(std::chrono::seconds(10));
  if (!reaped.ok()) return reaped.status().WithContext("reaping " + incarnation.Label());
  if (*reaped != 128 + SIGKILL) {
    return Internal(fmt::format("{} ended with {} instead of the SIGKILL; its last lines:\n{}",
                                incarnation.Label(), ExitStatusText(*reaped),
                                LastLines(incarnation.worker->Output(), 15)));
  }
  return Status::Ok();
}

bool SoakWorkers::Running(int host) const {
  return current_.count(host) > 0;
}

SoakIncarnation& SoakWorkers::Current(int host) {
  return *current_.at(host);
}

std::map<int, WorkerEvent> SoakWorkers::LatestStats(int host) const {
  std::map<int, WorkerEvent> latest;
  auto it = current_.find(host);
  if (it == current_.end()) return latest;
  for (WorkerEvent& event : it->second->worker->Events("stat")) {
    latest[static_cast<int>(event.Number("thread"))] = std::move(event);
  }
  return latest;
}

Status SoakWorkers::StopAll(std::chrono::milliseconds timeout) {
  for (const auto& [host, incarnation] : current_) {
    if (::kill(incarnation->worker->pid(), SIGUSR1) != 0) {
      return Internal(fmt::format("kill -USR1 {} ({}): errno {}", incarnation->worker->pid(),
                                  incarnation->Label(), errno));
    }
  }
  // One deadline for all: they drain at the same time.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string trouble;
  for (const auto& [host, incarnation] : current_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto code = incarnation->worker->Wait(std::max(left, std::chrono::milliseconds(1)));
    if (code.ok() && *code == 0) continue;
    trouble += fmt::format("\n{} {}; its last lines:\n{}", incarnation->Label(),
                           code.ok() ? ExitStatusText(*code) : "did not exit in time",
                           LastLines(incarnation->worker->Output(), 15));
  }
  if (!trouble.empty()) return Internal("soak workers did not stop cleanly:" + trouble);
  return Status::Ok();
}

}  // namespace tocl::testing
