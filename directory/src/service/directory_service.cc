#include "service/directory_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <csignal>
#include <optional>
#include <vector>

#include "grpc_tls/tls_credentials.h"
#include "service/grpc_status.h"
#include "service/placement.h"
#include "store/limits.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"

namespace tocl::directory {
namespace {

constexpr size_t kWatchBatch = 512;

constexpr auto kDefaultEnrollTimeout = std::chrono::seconds(10);
constexpr uint32_t kMaxEnrollTimeoutMs = 600'000;
// How long a forwarded Kill or ReadLog may take when its caller set no
// deadline (a forwarded spawn gets its enroll timeout on top).
constexpr auto kForwardTimeout = std::chrono::seconds(10);

grpc::Status Unimplemented(Gid host) {
  return grpc::Status(
      grpc::StatusCode::UNIMPLEMENTED,
      fmt::format("the daemon of {} does not spawn or supervise processes", host.ToString()));
}

// Who sent a call, for logs: the peer, and the daemon that forwarded it.
std::string DescribeCaller(const grpc::ServerContext& context) {
  std::string caller = context.peer();
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find(kForwardedByKey); it != metadata.end()) {
    // The mark is the sender's text ("h1"): only printable, short, in a log.
    std::string mark(it->second.data(), std::min<size_t>(it->second.size(), 32));
    for (char& c : mark) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    caller += fmt::format(" (forwarded by {})", mark);
  }
  return caller;
}

// A status from another daemon, with where it came from.
grpc::Status FromDaemon(Gid host, const grpc::Status& status) {
  if (status.ok()) return status;
  return grpc::Status(status.error_code(),
                      fmt::format("on {}: {}", host.ToString(), status.error_message()));
}
// How long a forwarded spawn waits for the new process to reach this
// daemon's replica before it answers.
constexpr auto kReplicaWait = std::chrono::milliseconds(2000);
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

// Bounds of a via network's fields (directory.proto); ProcessSession
// refuses the same before sending.
constexpr size_t kMaxViProviderBytes = 32;
constexpr uint32_t kMinViClassBytes = 256;
constexpr uint32_t kMaxViClassBytes = uint32_t{1} << 20;

// The via fields of network `index`. Like a name, a provider or a state may
// hold anything: errors give their sizes, not their text.
Status CheckViPool(int index, const pb::NetworkStats& network) {
  if (network.provider().size() > kMaxViProviderBytes) {
    return InvalidArgument(fmt::format("network {}: a provider name of {} bytes (at most {})",
                                       index, network.provider().size(), kMaxViProviderBytes));
  }
  if (static_cast<size_t>(network.vis_size()) > kMaxVisPerReport) {
    return InvalidArgument(fmt::format("network {}: {} VIs (at most {})", index, network.vis_size(),
                                       kMaxVisPerReport));
  }
  for (const pb::ViStats& vi : network.vis()) {
    const Gid gid = Gid::FromRaw(vi.peer());
    if (!gid.is_process()) {
      return InvalidArgument(fmt::format("network {}: the peer {} of a VI is not a process id",
                                         index, gid.ToString()));
    }
    if (vi.class_bytes() < kMinViClassBytes || vi.class_bytes() > kMaxViClassBytes ||
        !std::has_single_bit(vi.class_bytes())) {
      return InvalidArgument(
          fmt::format("network {}: a VI class of {} bytes to {} (a power of two, {} to {})", index,
                      vi.class_bytes(), gid.ToString(), kMinViClassBytes, kMaxViClassBytes));
    }
    if (vi.state().empty() || vi.state().size() > kMaxViStateBytes) {
      return InvalidArgument(fmt::format("network {}: a VI state of {} bytes to {} (1 to {})",
                                         index, vi.state().size(), gid.ToString(),
                                         kMaxViStateBytes));
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
  return CheckViPool(index, network);
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

Result<DirectoryService::VerifiedEnrollment> DirectoryService::VerifyEnrollingCaller(
    const grpc::ServerContext& context, const pb::EnrollRegister& reg) {
  if (reg.os_pid() <= 0) {
    return InvalidArgument(fmt::format(
        "os_pid {} is not a process id: a process enrolls with its own pid", reg.os_pid()));
  }
  const Gid resume = Gid::FromRaw(reg.resume_gid());
  const std::optional<int> fd = UnixConnectionFd(context);
  if (!fd) {
    // Over TCP: nothing tells the process's pid; it is recorded as claimed
    // and never signalled. A spawned child is given the unix socket.
    if (control_ != nullptr && !resume.is_null()) {
      TOCL_RETURN_IF_ERROR(control_->CheckEnrollingPid(resume, std::nullopt));
    }
    return VerifiedEnrollment{.os_pid = reg.os_pid()};
  }
  TOCL_ASSIGN_OR_RETURN(UnixPeer peer, UnixPeerOf(*fd));
  const std::optional<int64_t> accepted =
      accept_times_ != nullptr ? accept_times_->AcceptedAt(*fd) : std::nullopt;
  Result<ProcessHandle> process = PeerProcess(*fd, peer, accepted);
  if (!process.ok()) {
    const StatusCode code = process.status().code();
    // NotFound and FailedPrecondition mean the process has gone (the
    // client may try again); anything else (out of descriptors, the pid
    // taken by a newer process, no accept time) is said as it is.
    if (code == StatusCode::kNotFound || code == StatusCode::kFailedPrecondition) {
      return Unavailable(fmt::format("the enrolling process {} is gone: {}", peer.pid,
                                     process.status().message()));
    }
    return process.status().WithContext(fmt::format("the enrolling process {}", peer.pid));
  }
  if (reg.os_pid() != peer.pid) {
    // A process in a container's pid namespace knows itself by its pid
    // there, the last of its NSpid line. The process is pinned, so the
    // line is its own.
    Result<std::vector<pid_t>> namespace_pids = process->NamespacePids();
    if (!namespace_pids.ok() || namespace_pids->back() != reg.os_pid()) {
      return PermissionDenied(fmt::format(
          "os_pid {} is not the enrolling process: the kernel says this connection is pid {} "
          "(uid {}){}; a process enrolls itself, with its own pid",
          reg.os_pid(), peer.pid, peer.uid,
          namespace_pids.ok() && namespace_pids->size() > 1
              ? fmt::format(", pid {} in its own pid namespace", namespace_pids->back())
              : ""));
    }
  }
  if (control_ != nullptr && !resume.is_null()) {
    TOCL_RETURN_IF_ERROR(control_->CheckEnrollingPid(resume, peer.pid));
  }
  return VerifiedEnrollment{.process = std::move(*process), .os_pid = peer.pid};
}

Result<Enrollment> DirectoryService::StoreEnrollment(const pb::EnrollRegister& reg,
                                                     const VerifiedEnrollment& verified) {
  const pb::EnrollRegister* recorded = &reg;
  // A process of another pid namespace claimed its pid there; its row has
  // its pid in the daemon's namespace, as every row does: the one a resume
  // is checked against, and the one the daemon's own checks use
  // (SortOrphans at start).
  std::optional<pb::EnrollRegister> renumbered;
  if (verified.os_pid != reg.os_pid()) {
    renumbered = reg;
    renumbered->set_os_pid(verified.os_pid);
    recorded = &*renumbered;
  }
  if (reg.resume_gid() != 0) {
    return store_.ResumeProcess(Gid::FromRaw(reg.resume_gid()), reg.resume_token(), verified.os_pid,
                                recorded);
  }
  return store_.EnrollProcess(*recorded);
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
  Result<VerifiedEnrollment> verified = VerifyEnrollingCaller(*context, reg);
  Result<Enrollment> enrollment =
      verified.ok() ? StoreEnrollment(reg, *verified) : Result<Enrollment>(verified.status());
  if (!enrollment.ok()) {
    spdlog::info("enroll of '{}' (pid {}) from {} refused: {}", reg.name(), reg.os_pid(),
                 context->peer(), enrollment.status().ToString());
    return ToGrpcStatus(enrollment.status());
  }
  const Gid gid = enrollment->gid;
  const bool pid_verified = verified->process.has_value();
  const uint64_t generation = sessions_.Attach(gid, context, std::move(verified->process));
  // A spawned child's first enrollment is a resume of its reserved row, not
  // a re-enrollment.
  const bool spawned = control_ != nullptr && control_->OnEnrolled(gid);
  const bool resumed = enrollment->resumed() && !spawned;
  spdlog::info("process {} '{}' (pid {}{}{}) {}", gid.ToString(), reg.name(), verified->os_pid,
               verified->os_pid != reg.os_pid()
                   ? fmt::format(", {} in its pid namespace", reg.os_pid())
                   : "",
               pid_verified ? "" : ", not verified: enrolled over TCP",
               spawned   ? "enrolled (spawned by this daemon)"
               : resumed ? "re-enrolled"
                         : "enrolled");

  pb::EnrollResponse response;
  pb::Enrolled* enrolled = response.mutable_enrolled();
  enrolled->set_gid(gid.raw());
  enrolled->set_session_token(enrollment->session_token);
  enrolled->set_host_gid(store_.host().raw());
  enrolled->set_host_name(store_.host_name());
  enrolled->set_resumed(resumed);
  enrolled->set_data_plane_secret(data_plane_secret_);

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

  if (shutting_down() && !said_goodbye) {
    sessions_.Detach(gid, generation);
    // Keep the process running in the directory: it re-enrolls after restart.
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon is shutting down");
  }
  // A child this daemon spawned is marked exited by its supervisor, with
  // its exit status (and signalled through the spawner's pidfd meanwhile).
  if (control_ != nullptr && control_->OnStreamEnded(gid, enrollment->epoch, reason)) {
    sessions_.Detach(gid, generation);
    spdlog::info("process {} stream ended: {}", gid.ToString(), reason);
    return grpc::Status::OK;
  }
  // Unless the process re-enrolled on a newer stream meanwhile (decided by
  // the store, in order with the resume).
  Status marked = store_.MarkStreamEnded(gid, enrollment->epoch, reason);
  // Detached once the row says exited: a Kill in between reaches the
  // session's pidfd and hears that the process has exited.
  sessions_.Detach(gid, generation);
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
  uint32_t op_mask = 0;
  for (int op : request->ops()) {
    if (op < pb::CHANGE_OP_ADDED || op > pb::CHANGE_OP_REMOVED) {
      return ToGrpcStatus(InvalidArgument(fmt::format("unknown change operation {}", op)));
    }
    op_mask |= 1u << op;
  }
  while (!context->IsCancelled() && !shutting_down()) {
    // Read before the changes: every change up to it is in the result.
    const uint64_t head_before = store_.head_seq();
    Result<std::vector<pb::ChangeEvent>> events = store_.ChangesSince(seq, kWatchBatch, op_mask);
    if (!events.ok()) return ToGrpcStatus(events.status());
    for (const pb::ChangeEvent& event : *events) {
      if (!writer->Write(event)) return grpc::Status::OK;  // the watcher went away
      seq = event.seq();
    }
    // A short page covered every change up to head_before, those the filter
    // left out included: they are not read again.
    if (events->size() < kWatchBatch) seq = std::max(seq, head_before);
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

Result<Caller> DirectoryService::IdentifyCaller(const grpc::ServerContext& context,
                                                std::string_view what) const {
  Result<Caller> caller = callers_.Identify(context);
  if (!caller.ok()) {
    spdlog::warn("{} request from {} refused: {}", what, DescribeCaller(context),
                 caller.status().message());
    return PermissionDenied(fmt::format("{} request refused: {}", what, caller.status().message()));
  }
  return caller;
}

template <typename Call>
grpc::Status DirectoryService::Forward(const grpc::ServerContext& context, const Caller& caller,
                                       Gid host, std::chrono::milliseconds timeout,
                                       const Call& call) {
  if (DaemonStubs::Forwarded(context)) {
    // The forwarding daemon thinks `host` is this one: its view is stale.
    return ToGrpcStatus(FailedPrecondition(fmt::format(
        "a request forwarded to {} is for host {}; the daemons disagree about the cluster",
        store_.host().ToString(), host.ToString())));
  }
  Result<std::string> address = DaemonAddress(store_, host);
  if (!address.ok()) return ToGrpcStatus(address.status());
  auto client = DaemonStubs::ForwardContext(context, store_.host(), timeout);
  CallerCheck::AddForwardedCaller(caller, *client);
  return FromDaemon(host, call(daemons_.For(*address), client.get()));
}

Result<Gid> DirectoryService::TargetProcess(uint64_t raw, std::string_view thread_advice) {
  const Gid gid = Gid::FromRaw(raw);
  if (gid.is_thread()) {
    return InvalidArgument(fmt::format("{} is a thread: {} {}", gid.ToString(), thread_advice,
                                       gid.process().ToString()));
  }
  if (!gid.is_process()) {
    return InvalidArgument(fmt::format("{} is not a process id", gid.ToString()));
  }
  return gid;
}

void DirectoryService::AwaitReplica(Gid gid,
                                    std::chrono::system_clock::time_point caller_deadline) {
  // The caller is about to use the Gid (send to it, watch it) through this
  // daemon's replica, which learns of the new process a few milliseconds
  // after its own daemon answered. Never past the caller's own deadline.
  const auto caller_left = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      caller_deadline - std::chrono::system_clock::now() - std::chrono::milliseconds(50));
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::max(std::chrono::steady_clock::duration::zero(),
               std::min<std::chrono::steady_clock::duration>(kReplicaWait, caller_left));
  uint64_t seen = store_.head_seq();
  while (!store_.Lookup(gid).ok()) {
    if (std::chrono::steady_clock::now() >= deadline || shutting_down()) {
      spdlog::warn("spawned {} is not in this daemon's replica after {} ms; answering anyway",
                   gid.ToString(), kReplicaWait.count());
      return;
    }
    seen = store_.WaitForChange(seen, deadline);
  }
}

grpc::Status DirectoryService::SpawnProcess(grpc::ServerContext* context,
                                            const pb::SpawnProcessRequest* request,
                                            pb::SpawnProcessResponse* response) {
  // Any caller the daemon can identify may spawn what [spawn] allow lists;
  // the process is spawned for the caller's uid.
  Result<Caller> caller = IdentifyCaller(*context, "spawn");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (request->enroll_timeout_ms() > kMaxEnrollTimeoutMs) {
    return ToGrpcStatus(
        InvalidArgument(fmt::format("enroll_timeout_ms {} is over {} (10 minutes)",
                                    request->enroll_timeout_ms(), kMaxEnrollTimeoutMs)));
  }
  if (const Gid parent = Gid::FromRaw(request->parent());
      !parent.is_null() && !parent.is_thread()) {
    // The child reads it as Runtime::parent(), a thread it may send to.
    return ToGrpcStatus(InvalidArgument(fmt::format(
        "parent {} is not a thread id (the spawning thread, or none)", parent.ToString())));
  }
  Result<Gid> host = ChooseHost(store_, *request);
  if (!host.ok()) return ToGrpcStatus(host.status());
  std::chrono::milliseconds enroll_timeout =
      request->enroll_timeout_ms() == 0 ? kDefaultEnrollTimeout
                                        : std::chrono::milliseconds(request->enroll_timeout_ms());

  if (*host != store_.host()) {
    pb::SpawnProcessRequest forwarded = *request;
    forwarded.set_host(host->raw());
    forwarded.clear_where();
    grpc::Status forwarded_status =
        Forward(*context, *caller, *host, enroll_timeout + kForwardTimeout,
                [&](pb::Directory::Stub& stub, grpc::ClientContext* client) {
                  return stub.SpawnProcess(client, forwarded, response);
                });
    if (forwarded_status.ok()) AwaitReplica(Gid::FromRaw(response->gid()), context->deadline());
    return forwarded_status;
  }

  if (control_ == nullptr) return Unimplemented(store_.host());
  // A caller that stops waiting sooner gets the child killed when it stops.
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    enroll_timeout = std::max(std::chrono::milliseconds(1), std::min(enroll_timeout, left));
  }
  Result<pb::SpawnProcessResponse> spawned = control_->Spawn(*request, *caller, enroll_timeout);
  if (spawned.status().code() == StatusCode::kFailedPrecondition) {
    return grpc::Status(grpc::StatusCode::ABORTED, spawned.status().message());
  }
  if (!spawned.ok()) return ToGrpcStatus(spawned.status());
  *response = std::move(*spawned);
  return grpc::Status::OK;
}

grpc::Status DirectoryService::Kill(grpc::ServerContext* context, const pb::KillRequest* request,
                                    pb::KillResponse* response) {
  Result<Caller> caller = IdentifyCaller(*context, "kill");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  Result<Gid> process = TargetProcess(request->gid(), "threads cannot be killed, kill its process");
  if (!process.ok()) return ToGrpcStatus(process.status());
  const int signal = request->signal() == 0 ? SIGTERM : request->signal();
  if (signal < 1 || signal > 64) {
    return ToGrpcStatus(
        InvalidArgument(fmt::format("signal {} is outside 1..64", request->signal())));
  }
  const Gid host = process->host();
  if (host != store_.host()) {
    return Forward(*context, *caller, host, kForwardTimeout,
                   [&](pb::Directory::Stub& stub, grpc::ClientContext* client) {
                     return stub.Kill(client, *request, response);
                   });
  }
  if (control_ == nullptr) return Unimplemented(store_.host());
  Status killed = SignalLocal(*process, signal, *caller);
  if (killed.code() == StatusCode::kPermissionDenied) {
    spdlog::warn("kill of {} refused: {}", process->ToString(), killed.message());
  }
  return ToGrpcStatus(killed);
}

Status DirectoryService::SignalLocal(Gid process, int signal, const Caller& caller) {
  // The daemon's own child first: its pidfd outlives the child's session
  // (a child that closed its session and runs on is still signalled).
  if (std::optional<Status> child = control_->KillChild(process, signal, caller)) return *child;
  const std::optional<uid_t> spawned_for = control_->SpawnedFor(process);
  std::optional<Status> verified =
      sessions_.WithVerifiedProcess(process, [&](const ProcessHandle& target) -> Status {
        TOCL_ASSIGN_OR_RETURN(ProcessUids uids, target.Uids());
        TOCL_RETURN_IF_ERROR(MaySignal(caller, process, {uids, spawned_for}));
        TOCL_RETURN_IF_ERROR(target.Signal(signal).WithContext(process.ToString()));
        spdlog::info("sent signal {} to {} (pid {}) for {}", signal, process.ToString(),
                     target.pid(), caller.Describe());
        return Status::Ok();
      });
  if (verified) return *verified;
  // No open session: say why from its row.
  Result<pb::Entity> entity = store_.Lookup(process);
  if (entity.status().code() == StatusCode::kNotFound) {
    return NotFound(fmt::format("no process {}", process.ToString()));
  }
  TOCL_RETURN_IF_ERROR(entity.status());
  if (entity->state() == pb::EXITED) {
    return FailedPrecondition(
        fmt::format("{} has exited ({})", process.ToString(), entity->exit_reason()));
  }
  return FailedPrecondition(fmt::format(
      "{} has no enroll stream on this daemon (it has not re-enrolled since the daemon "
      "started, or its stream just ended): its pid is not verified, and this daemon signals only "
      "processes whose pid it verified or that it started",
      process.ToString()));
}

grpc::Status DirectoryService::ReadLog(grpc::ServerContext* context,
                                       const pb::ReadLogRequest* request,
                                       pb::ReadLogResponse* response) {
  // Logs can hold anything a program prints: read by whoever had the
  // process spawned (MayReadLog).
  Result<Caller> caller = IdentifyCaller(*context, "log");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  Result<Gid> process =
      TargetProcess(request->process(), "logs belong to processes, read the log of its process");
  if (!process.ok()) return ToGrpcStatus(process.status());
  if (!pb::LogStream_IsValid(request->stream())) {
    return ToGrpcStatus(InvalidArgument(fmt::format("unknown log stream {}", request->stream())));
  }
  const Gid host = process->host();
  if (host != store_.host()) {
    return Forward(*context, *caller, host, kForwardTimeout,
                   [&](pb::Directory::Stub& stub, grpc::ClientContext* client) {
                     return stub.ReadLog(client, *request, response);
                   });
  }
  if (control_ == nullptr) return Unimplemented(store_.host());
  Result<pb::ReadLogResponse> read = control_->ReadLog(*request, *caller);
  if (!read.ok()) return ToGrpcStatus(read.status());
  *response = std::move(*read);
  return grpc::Status::OK;
}

}  // namespace tocl::directory
