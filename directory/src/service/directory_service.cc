#include "service/directory_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <optional>

#include "service/grpc_status.h"
#include "store/limits.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"

namespace tocl::directory {
namespace {

constexpr size_t kWatchBatch = 512;
// How often a Watch with nothing to send checks for cancellation.
constexpr auto kWatchPoll = std::chrono::milliseconds(200);

Status CheckPoolStatsReport(const pb::PoolStatsReport& report) {
  if (static_cast<size_t>(report.classes_size()) > kMaxPoolClassesPerReport) {
    return InvalidArgument(
        fmt::format("{} classes (at most {})", report.classes_size(), kMaxPoolClassesPerReport));
  }
  for (const pb::PoolClassStats& stats : report.classes()) {
    const size_t size = stats.network().size();
    if (size == 0 || size > kMaxPoolNetworkBytes) {
      return InvalidArgument(
          fmt::format("a network name of {} bytes (1 to {})", size, kMaxPoolNetworkBytes));
    }
  }
  return Status::Ok();
}

// Errors name a network by its index: its name may hold anything that is
// not to be written to the log.
Status CheckNetworkStats(int index, const pb::NetworkStats& network) {
  if (network.name().empty() || network.name().size() > kMaxNetworkNameBytes) {
    return InvalidArgument(fmt::format("network {}: a name of {} bytes (1 to {})", index,
                                       network.name().size(), kMaxNetworkNameBytes));
  }
  if (network.kind().empty() || network.kind().size() > kMaxNetworkNameBytes) {
    return InvalidArgument(fmt::format("network {}: a kind of {} bytes (1 to {})", index,
                                       network.kind().size(), kMaxNetworkNameBytes));
  }
  if (network.device().size() > kMaxNetworkDeviceBytes) {
    return InvalidArgument(fmt::format("network {}: a device name of {} bytes (at most {})", index,
                                       network.device().size(), kMaxNetworkDeviceBytes));
  }
  if (network.address().size() > kMaxNetworkAddressBytes) {
    return InvalidArgument(fmt::format("network {}: an address of {} bytes (at most {})", index,
                                       network.address().size(), kMaxNetworkAddressBytes));
  }
  if (static_cast<size_t>(network.peers_size()) > kMaxNetworkPeersPerReport) {
    return InvalidArgument(fmt::format("network {}: {} peers (at most {})", index,
                                       network.peers_size(), kMaxNetworkPeersPerReport));
  }
  for (const pb::NetworkPeerStats& peer : network.peers()) {
    const Gid gid = Gid::FromRaw(peer.peer());
    if (!gid.is_process()) {
      return InvalidArgument(
          fmt::format("network {}: peer {} is not a process id", index, gid.ToString()));
    }
    if (!std::isfinite(peer.bandwidth()) || peer.bandwidth() < 0) {
      return InvalidArgument(fmt::format("network {}: a bandwidth of {} to {}", index,
                                         peer.bandwidth(), gid.ToString()));
    }
  }
  return Status::Ok();
}

Status CheckNetworkStatsReport(const pb::NetworkStatsReport& report) {
  if (static_cast<size_t>(report.networks_size()) > kMaxNetworksPerReport) {
    return InvalidArgument(
        fmt::format("{} networks (at most {})", report.networks_size(), kMaxNetworksPerReport));
  }
  for (int i = 0; i < report.networks_size(); ++i) {
    TOCL_RETURN_IF_ERROR(CheckNetworkStats(i, report.networks(i)));
    for (int j = 0; j < i; ++j) {
      if (report.networks(j).name() == report.networks(i).name()) {
        return InvalidArgument(fmt::format("network {} has the name of network {}", i, j));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

void DirectoryService::BeginShutdown() {
  shutting_down_.store(true, std::memory_order_release);
  store_.WakeWatchers();
  sessions_.CancelAll();
}

grpc::Status DirectoryService::EnrollProcess(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<pb::EnrollResponse, pb::EnrollRequest>* stream) {
  pb::EnrollRequest request;
  if (!stream->Read(&request)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the stream ended before 'register'");
  }
  if (!request.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of an enroll stream must be 'register'");
  }
  const pb::EnrollRegister& reg = request.register_();
  Result<Enrollment> enrollment =
      reg.resume_gid() != 0
          ? store_.ResumeProcess(Gid::FromRaw(reg.resume_gid()), reg.resume_token())
          : store_.EnrollProcess(reg);
  if (!enrollment.ok()) {
    spdlog::info("enroll of '{}' (pid {}) refused: {}", reg.name(), reg.os_pid(),
                 enrollment.status().ToString());
    return ToGrpcStatus(enrollment.status());
  }
  const Gid gid = enrollment->gid;
  const uint64_t generation = sessions_.Attach(gid, context);
  spdlog::info("process {} '{}' (pid {}) {}", gid.ToString(), reg.name(), reg.os_pid(),
               enrollment->resumed() ? "re-enrolled" : "enrolled");

  pb::EnrollResponse response;
  pb::Enrolled* enrolled = response.mutable_enrolled();
  enrolled->set_gid(gid.raw());
  enrolled->set_session_token(enrollment->session_token);
  enrolled->set_host_gid(store_.host().raw());
  enrolled->set_host_name(store_.host_name());
  enrolled->set_resumed(enrollment->resumed());

  std::string reason;
  bool said_goodbye = false;
  if (stream->Write(response)) {
    while (stream->Read(&request)) {
      if (request.has_goodbye()) {
        said_goodbye = true;
        reason = CleanExitReason(request.goodbye().reason());
        break;
      }
      if (request.has_pool_stats()) {
        KeepPoolStats(gid, generation, request.pool_stats());
        continue;
      }
      if (request.has_network_stats()) {
        KeepNetworkStats(gid, generation, request.network_stats());
        continue;
      }
      if (request.has_register_()) {
        reason = "protocol error: 'register' sent twice on one enroll stream";
        break;
      }
      // A kind of message newer than this daemon: ignored, so that newer
      // processes keep their session with an older daemon.
    }
  }
  if (reason.empty()) reason = "enroll stream broken (the process died or lost its daemon)";

  sessions_.Detach(gid, generation);
  if (shutting_down() && !said_goodbye) {
    // Keep the process running in the directory: it re-enrolls after restart.
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon is shutting down");
  }
  // Unless the process re-enrolled on a newer stream meanwhile (decided by
  // the store, in order with the resume).
  Status marked = store_.MarkStreamEnded(gid, enrollment->epoch, reason);
  if (!marked.ok()) {
    spdlog::error("could not mark process {} exited: {}", gid.ToString(), marked.ToString());
  } else {
    spdlog::info("process {} stream ended: {}", gid.ToString(), reason);
  }
  return grpc::Status::OK;
}

grpc::Status DirectoryService::RegisterThreads(grpc::ServerContext*,
                                               const pb::RegisterThreadsRequest* request,
                                               pb::WriteResponse* response) {
  Result<uint64_t> seq = store_.RegisterThreads(*request);
  if (!seq.ok()) return ToGrpcStatus(seq.status());
  response->set_seq(*seq);
  return grpc::Status::OK;
}

grpc::Status DirectoryService::UnregisterThreads(grpc::ServerContext*,
                                                 const pb::UnregisterThreadsRequest* request,
                                                 pb::WriteResponse* response) {
  Result<uint64_t> seq = store_.UnregisterThreads(*request);
  if (!seq.ok()) return ToGrpcStatus(seq.status());
  response->set_seq(*seq);
  return grpc::Status::OK;
}

grpc::Status DirectoryService::PublishEndpoint(grpc::ServerContext*,
                                               const pb::PublishEndpointRequest* request,
                                               pb::WriteResponse* response) {
  Result<uint64_t> seq = store_.PublishEndpoint(*request);
  if (!seq.ok()) return ToGrpcStatus(seq.status());
  response->set_seq(*seq);
  return grpc::Status::OK;
}

grpc::Status DirectoryService::Lookup(grpc::ServerContext*, const pb::LookupRequest* request,
                                      pb::LookupResponse* response) {
  Result<pb::Entity> entity = store_.Lookup(Gid::FromRaw(request->gid()));
  if (!entity.ok()) return ToGrpcStatus(entity.status());
  *response->mutable_entity() = std::move(*entity);
  return grpc::Status::OK;
}

grpc::Status DirectoryService::Query(grpc::ServerContext*, const pb::QueryRequest* request,
                                     pb::QueryResponse* response) {
  Result<pb::QueryResponse> result =
      store_.Query(request->expression(), request->limit(), request->page_token());
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status DirectoryService::Watch(grpc::ServerContext* context, const pb::WatchRequest* request,
                                     grpc::ServerWriter<pb::ChangeEvent>* writer) {
  uint64_t seq = request->since_seq();
  while (!context->IsCancelled() && !shutting_down()) {
    Result<std::vector<pb::ChangeEvent>> events = store_.ChangesSince(seq, kWatchBatch);
    if (!events.ok()) return ToGrpcStatus(events.status());
    for (const pb::ChangeEvent& event : *events) {
      if (!writer->Write(event)) return grpc::Status::OK;  // the watcher went away
      seq = event.seq();
    }
    if (events->empty()) store_.WaitForChange(seq, std::chrono::steady_clock::now() + kWatchPoll);
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon is shutting down");
}

grpc::Status DirectoryService::Ping(grpc::ServerContext*, const pb::PingRequest*,
                                    pb::PingResponse* response) {
  response->set_head_seq(store_.head_seq());
  return grpc::Status::OK;
}

void DirectoryService::KeepPoolStats(Gid process, uint64_t generation,
                                     const pb::PoolStatsReport& report) {
  Status valid = CheckPoolStatsReport(report);
  if (!valid.ok()) {
    spdlog::warn("process {}: pool statistics report ignored: {}", process.ToString(),
                 valid.message());
    return;
  }
  pb::ProcessPoolStats stats;
  stats.set_process(process.raw());
  stats.set_reported_at_us(NowMicros());
  *stats.mutable_classes() = report.classes();
  sessions_.SetPoolStats(process, generation, std::move(stats));
}

grpc::Status DirectoryService::GetPoolStats(grpc::ServerContext*,
                                            const pb::GetPoolStatsRequest* request,
                                            pb::GetPoolStatsResponse* response) {
  if (request->process() == 0) {
    for (pb::ProcessPoolStats& stats : sessions_.AllPoolStats()) {
      *response->add_processes() = std::move(stats);
    }
    return grpc::Status::OK;
  }
  const Gid process = Gid::FromRaw(request->process());
  if (!process.is_process()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        fmt::format("{} is not a process id", process.ToString()));
  }
  std::optional<pb::ProcessPoolStats> stats = sessions_.PoolStats(process);
  if (!stats) return ToGrpcStatus(NoStats(process, "pool"));
  *response->add_processes() = std::move(*stats);
  return grpc::Status::OK;
}

void DirectoryService::KeepNetworkStats(Gid process, uint64_t generation,
                                        const pb::NetworkStatsReport& report) {
  Status valid = CheckNetworkStatsReport(report);
  if (!valid.ok()) {
    spdlog::warn("process {}: network statistics report ignored: {}", process.ToString(),
                 valid.message());
    return;
  }
  pb::ProcessNetworkStats stats;
  stats.set_process(process.raw());
  stats.set_reported_at_us(NowMicros());
  *stats.mutable_networks() = report.networks();
  sessions_.SetNetworkStats(process, generation, std::move(stats));
}

grpc::Status DirectoryService::GetNetworkStats(grpc::ServerContext*,
                                               const pb::GetNetworkStatsRequest* request,
                                               pb::GetNetworkStatsResponse* response) {
  if (request->process() == 0) {
    for (pb::ProcessNetworkStats& stats : sessions_.AllNetworkStats()) {
      *response->add_processes() = std::move(stats);
    }
    return grpc::Status::OK;
  }
  const Gid process = Gid::FromRaw(request->process());
  if (!process.is_process()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        fmt::format("{} is not a process id", process.ToString()));
  }
  std::optional<pb::ProcessNetworkStats> stats = sessions_.NetworkStats(process);
  if (!stats) return ToGrpcStatus(NoStats(process, "network"));
  *response->add_processes() = std::move(*stats);
  return grpc::Status::OK;
}

Status DirectoryService::NoStats(Gid process, std::string_view what) const {
  Result<pb::Entity> entity = store_.Lookup(process);
  if (!entity.ok()) {
    if (entity.status().code() != StatusCode::kNotFound) return entity.status();
    return NotFound(fmt::format("no process {}", process.ToString()));
  }
  if (entity->state() == pb::EXITED) {
    return NotFound(fmt::format("process {} has exited", process.ToString()));
  }
  return NotFound(
      fmt::format("process {} has not reported {} statistics yet", process.ToString(), what));
}

}  // namespace tocl::directory
