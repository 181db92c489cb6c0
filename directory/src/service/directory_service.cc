#include "service/directory_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "service/grpc_status.h"
#include "store/limits.h"

namespace tocl::directory {
namespace {

constexpr size_t kWatchBatch = 512;
// How often a Watch with nothing to send checks for cancellation.
constexpr auto kWatchPoll = std::chrono::milliseconds(200);

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
      reason = "protocol error: 'register' sent twice on one enroll stream";
      break;
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

}  // namespace tocl::directory
