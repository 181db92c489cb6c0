#include "raw_directory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "child_process.h"  // WaitUntil

namespace tocl::testing {
namespace {

constexpr auto kCallTimeout = std::chrono::seconds(10);

void SetDeadline(grpc::ClientContext& context, std::chrono::milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace

std::shared_ptr<grpc::Channel> NewRawChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<pb::Directory::Stub> NewRawStub(const std::string& address) {
  return pb::Directory::NewStub(NewRawChannel(address));
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return fmt::format("code {}", static_cast<int>(code));
  }
}

std::string Describe(const grpc::Status& status) {
  return fmt::format("{}: {}", CodeName(status.error_code()), status.error_message());
}

pb::EnrollRegister MakeRegister(const std::string& name,
                                const std::vector<std::pair<std::string, std::string>>& attributes,
                                int64_t os_pid) {
  pb::EnrollRegister reg;
  reg.set_name(name);
  reg.set_os_pid(os_pid != 0 ? os_pid : ::getpid());
  for (const auto& [key, value] : attributes) {
    pb::Attribute* attribute = reg.add_attributes();
    attribute->set_key(key);
    attribute->set_value(value);
  }
  return reg;
}

pb::ThreadRegistration MakeThread(
    Gid gid, const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& attributes) {
  pb::ThreadRegistration thread;
  thread.set_gid(gid.raw());
  thread.set_name(name);
  for (const auto& [key, value] : attributes) {
    pb::Attribute* attribute = thread.add_attributes();
    attribute->set_key(key);
    attribute->set_value(value);
  }
  return thread;
}

RawEnrollment::~RawEnrollment() {
  if (!finished_) context_.TryCancel();
}

pb::RegisterThreadsRequest RawEnrollment::ThreadsRequest(
    std::vector<pb::ThreadRegistration> threads) const {
  pb::RegisterThreadsRequest request;
  request.set_process(gid().raw());
  request.set_session_token(token());
  for (pb::ThreadRegistration& thread : threads) *request.add_threads() = std::move(thread);
  return request;
}

bool RawEnrollment::Send(const pb::EnrollRequest& request) {
  return stream_->Write(request);
}

grpc::Status RawEnrollment::Goodbye(const std::string& reason) {
  pb::EnrollRequest request;
  request.mutable_goodbye()->set_reason(reason);
  stream_->Write(request);
  stream_->WritesDone();
  pb::EnrollResponse ignored;
  while (stream_->Read(&ignored)) {
  }
  finished_ = true;
  return stream_->Finish();
}

EnrollAttempt RawEnroll(pb::Directory::Stub& stub, const pb::EnrollRequest& first,
                        std::chrono::milliseconds timeout) {
  std::unique_ptr<RawEnrollment> enrollment(new RawEnrollment());
  // The deadline bounds the whole stream; tests hold enrollments far shorter.
  SetDeadline(enrollment->context_, std::chrono::minutes(10));
  enrollment->stream_ = stub.EnrollProcess(&enrollment->context_);
  EnrollAttempt attempt;
  if (!enrollment->stream_->Write(first)) {
    enrollment->finished_ = true;
    attempt.status = enrollment->stream_->Finish();
    if (attempt.status.ok()) {
      attempt.status = grpc::Status(grpc::StatusCode::UNKNOWN, "the daemon ended the stream");
    }
    return attempt;
  }
  // Read with a bound of our own: a daemon that never answers fails the test
  // instead of hanging it.
  pb::EnrollResponse response;
  bool got = false;
  {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;  // guarded by mu
    std::thread watchdog([&] {
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, timeout, [&] { return done; })) enrollment->context_.TryCancel();
    });
    got = enrollment->stream_->Read(&response);
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
  }
  if (!got || !response.has_enrolled()) {
    enrollment->finished_ = true;
    if (got) enrollment->context_.TryCancel();
    attempt.status = enrollment->stream_->Finish();
    if (attempt.status.ok()) {
      attempt.status =
          grpc::Status(grpc::StatusCode::UNKNOWN, "the daemon ended the stream without 'enrolled'");
    }
    return attempt;
  }
  enrollment->enrolled_ = response.enrolled();
  attempt.enrollment = std::move(enrollment);
  return attempt;
}

EnrollAttempt RawEnroll(pb::Directory::Stub& stub, const pb::EnrollRegister& reg,
                        std::chrono::milliseconds timeout) {
  pb::EnrollRequest request;
  *request.mutable_register_() = reg;
  return RawEnroll(stub, request, timeout);
}

grpc::Status RawPing(pb::Directory::Stub& stub, uint64_t* head_seq) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::PingResponse response;
  grpc::Status status = stub.Ping(&context, pb::PingRequest(), &response);
  if (status.ok() && head_seq != nullptr) *head_seq = response.head_seq();
  return status;
}

grpc::Status RawLookup(pb::Directory::Stub& stub, uint64_t raw_gid, pb::Entity* entity) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::LookupRequest request;
  request.set_gid(raw_gid);
  pb::LookupResponse response;
  grpc::Status status = stub.Lookup(&context, request, &response);
  if (status.ok() && entity != nullptr) *entity = response.entity();
  return status;
}

grpc::Status RawQuery(pb::Directory::Stub& stub, const std::string& expression,
                      const std::string& page_token, pb::QueryResponse* response) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::QueryRequest request;
  request.set_expression(expression);
  request.set_page_token(page_token);
  pb::QueryResponse ignored;
  return stub.Query(&context, request, response != nullptr ? response : &ignored);
}

pb::SpawnProcessRequest SpawnRequest(const std::string& executable,
                                     const std::vector<std::string>& args) {
  pb::SpawnProcessRequest request;
  request.set_executable(executable);
  for (const std::string& arg : args) request.add_args(arg);
  return request;
}

grpc::Status RawSpawn(pb::Directory::Stub& stub, const pb::SpawnProcessRequest& request,
                      pb::SpawnProcessResponse* response) {
  grpc::ClientContext context;
  SetDeadline(context, std::chrono::seconds(20));
  pb::SpawnProcessResponse ignored;
  return stub.SpawnProcess(&context, request, response != nullptr ? response : &ignored);
}

grpc::Status RawKill(pb::Directory::Stub& stub, Gid gid, int signal) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::KillRequest request;
  request.set_gid(gid.raw());
  request.set_signal(signal);
  pb::KillResponse response;
  return stub.Kill(&context, request, &response);
}

Gid WaitForHost(pb::Directory::Stub& stub, const std::string& expression,
                std::chrono::milliseconds timeout) {
  Gid host;
  WaitUntil(
      [&] {
        pb::QueryResponse hosts;
        if (RawQuery(stub, expression, {}, &hosts).ok() && hosts.entities_size() == 1 &&
            !hosts.entities(0).address().empty()) {
          host = Gid::FromRaw(hosts.entities(0).gid());
        }
        return host.valid();
      },
      timeout);
  return host;
}

grpc::Status RawRegisterThreads(pb::Directory::Stub& stub,
                                const pb::RegisterThreadsRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::WriteResponse response;
  return stub.RegisterThreads(&context, request, &response);
}

grpc::Status RawUnregisterThreads(pb::Directory::Stub& stub,
                                  const pb::UnregisterThreadsRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::WriteResponse response;
  return stub.UnregisterThreads(&context, request, &response);
}

grpc::Status RawPublishEndpoint(pb::Directory::Stub& stub,
                                const pb::PublishEndpointRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::WriteResponse response;
  return stub.PublishEndpoint(&context, request, &response);
}

grpc::Status RawGetPoolStats(pb::Directory::Stub& stub, uint64_t raw_process,
                             pb::GetPoolStatsResponse* response) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::GetPoolStatsRequest request;
  request.set_process(raw_process);
  pb::GetPoolStatsResponse ignored;
  return stub.GetPoolStats(&context, request, response != nullptr ? response : &ignored);
}

grpc::Status RawGetNetworkStats(pb::Directory::Stub& stub, uint64_t raw_process,
                                pb::GetNetworkStatsResponse* response) {
  grpc::ClientContext context;
  SetDeadline(context, kCallTimeout);
  pb::GetNetworkStatsRequest request;
  request.set_process(raw_process);
  pb::GetNetworkStatsResponse ignored;
  return stub.GetNetworkStats(&context, request, response != nullptr ? response : &ignored);
}

}  // namespace tocl::testing
