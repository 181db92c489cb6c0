#include "service/session_registry.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tocl::directory {

uint64_t SessionRegistry::Attach(Gid process, grpc::ServerContext* context,
                                 std::optional<ProcessHandle> verified) {
  std::lock_guard lock(mu_);
  uint64_t generation = next_generation_++;
  Session session{generation, context, std::move(verified), std::nullopt, std::nullopt};
  auto it = sessions_.find(process);
  if (it == sessions_.end()) {
    sessions_.emplace(process, std::move(session));
  } else {
    spdlog::info("process {} re-enrolled on a new stream; closing the old one", process.ToString());
    it->second.context->TryCancel();  // safe: its handler detaches under mu_ before returning
    it->second = std::move(session);
  }
  return generation;
}

std::optional<Status> SessionRegistry::WithVerifiedProcess(
    Gid process, const std::function<Status(const ProcessHandle&)>& action) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(process);
  if (it == sessions_.end()) return std::nullopt;
  if (!it->second.verified) {
    return FailedPrecondition(fmt::format(
        "{} enrolled over TCP: its os pid was never verified, so this daemon does not signal it",
        process.ToString()));
  }
  return action(*it->second.verified);
}

bool SessionRegistry::Detach(Gid process, uint64_t generation) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(process);
  if (it == sessions_.end() || it->second.generation != generation) return false;
  sessions_.erase(it);
  return true;
}

template <typename Stats>
void SessionRegistry::SetStats(Gid process, uint64_t generation,
                               std::optional<Stats> Session::*field, Stats stats) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(process);
  if (it == sessions_.end() || it->second.generation != generation) return;
  it->second.*field = std::move(stats);
}

template <typename Stats>
std::optional<Stats> SessionRegistry::GetStats(Gid process,
                                               std::optional<Stats> Session::*field) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(process);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.*field;
}

template <typename Stats>
std::vector<Stats> SessionRegistry::AllStats(std::optional<Stats> Session::*field) const {
  std::lock_guard lock(mu_);
  std::vector<Stats> all;
  for (const auto& [gid, session] : sessions_) {
    if (session.*field) all.push_back(*(session.*field));
  }
  return all;
}

void SessionRegistry::SetPoolStats(Gid process, uint64_t generation,
                                   tocl::directory::v1::ProcessPoolStats stats) {
  SetStats(process, generation, &Session::pool_stats, std::move(stats));
}

std::optional<tocl::directory::v1::ProcessPoolStats> SessionRegistry::PoolStats(Gid process) const {
  return GetStats(process, &Session::pool_stats);
}

std::vector<tocl::directory::v1::ProcessPoolStats> SessionRegistry::AllPoolStats() const {
  return AllStats(&Session::pool_stats);
}

void SessionRegistry::SetNetworkStats(Gid process, uint64_t generation,
                                      tocl::directory::v1::ProcessNetworkStats stats) {
  SetStats(process, generation, &Session::network_stats, std::move(stats));
}

std::optional<tocl::directory::v1::ProcessNetworkStats> SessionRegistry::NetworkStats(
    Gid process) const {
  return GetStats(process, &Session::network_stats);
}

std::vector<tocl::directory::v1::ProcessNetworkStats> SessionRegistry::AllNetworkStats() const {
  return AllStats(&Session::network_stats);
}

void SessionRegistry::CancelAll() {
  std::lock_guard lock(mu_);
  for (auto& [gid, session] : sessions_) session.context->TryCancel();
}

}  // namespace tocl::directory
