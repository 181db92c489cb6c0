// The directory service through the raw generated gRPC stub, for tests that
// send what tocl::DirectoryClient never would (malformed ids, foreign
// tokens, broken enroll streams).
//
//   auto stub = NewRawStub(daemon.address());
//   EnrollAttempt attempt = RawEnroll(*stub, MakeRegister("p"));
//   REQUIRE(attempt.status.ok());
//   pb::RegisterThreadsRequest request = attempt.enrollment->ThreadsRequest({...});
//
// Not thread-safe per object; use one RawEnrollment per thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tocl/directory/v1/directory.grpc.pb.h"
#include "tocl/gid.h"

namespace tocl::testing {

namespace pb = ::tocl::directory::v1;

// A channel of its own (not shared with other channels to the same address),
// so dropping it closes its connection.
std::shared_ptr<grpc::Channel> NewRawChannel(const std::string& address);
std::unique_ptr<pb::Directory::Stub> NewRawStub(const std::string& address);

// "INVALID_ARGUMENT: message", for failure messages.
std::string Describe(const grpc::Status& status);
std::string CodeName(grpc::StatusCode code);

pb::EnrollRegister MakeRegister(
    const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& attributes = {},
    int64_t os_pid = 0 /* 0 = getpid() */);
pb::ThreadRegistration MakeThread(
    Gid gid, const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& attributes = {});

struct EnrollAttempt;

// An enroll stream that stays open until Goodbye() or destruction (which
// cancels it: the daemon then marks the process exited).
class RawEnrollment {
 public:
  ~RawEnrollment();
  RawEnrollment(const RawEnrollment&) = delete;
  RawEnrollment& operator=(const RawEnrollment&) = delete;

  Gid gid() const { return Gid::FromRaw(enrolled_.gid()); }
  const std::string& token() const { return enrolled_.session_token(); }
  const pb::Enrolled& enrolled() const { return enrolled_; }

  // A RegisterThreadsRequest for this process with its token.
  pb::RegisterThreadsRequest ThreadsRequest(std::vector<pb::ThreadRegistration> threads) const;

  // Sends one more message on the stream (e.g. a pool statistics report);
  // false when the stream is broken.
  bool Send(const pb::EnrollRequest& request);

  // Says goodbye and waits for the daemon to end the stream.
  grpc::Status Goodbye(const std::string& reason = "test done");

 private:
  friend EnrollAttempt RawEnroll(pb::Directory::Stub&, const pb::EnrollRequest&,
                                 std::chrono::milliseconds);
  RawEnrollment() = default;

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::EnrollRequest, pb::EnrollResponse>> stream_;
  pb::Enrolled enrolled_;
  bool finished_ = false;
};

struct EnrollAttempt {
  grpc::Status status;                        // ok, or how the daemon ended the stream
  std::unique_ptr<RawEnrollment> enrollment;  // set when status is ok
};

// Opens an enroll stream, sends `first` and waits for the reply.
EnrollAttempt RawEnroll(pb::Directory::Stub& stub, const pb::EnrollRequest& first,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10));
EnrollAttempt RawEnroll(pb::Directory::Stub& stub, const pb::EnrollRegister& reg,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Unary calls with a deadline.
grpc::Status RawPing(pb::Directory::Stub& stub, uint64_t* head_seq = nullptr);
grpc::Status RawLookup(pb::Directory::Stub& stub, uint64_t raw_gid, pb::Entity* entity = nullptr);
grpc::Status RawQuery(pb::Directory::Stub& stub, const std::string& expression,
                      const std::string& page_token = {}, pb::QueryResponse* response = nullptr);
// SpawnProcess for `executable` with `args`: the request, and the call
// (deadline 20 s: spawning waits for the program to enroll).
pb::SpawnProcessRequest SpawnRequest(const std::string& executable,
                                     const std::vector<std::string>& args = {});
grpc::Status RawSpawn(pb::Directory::Stub& stub, const pb::SpawnProcessRequest& request,
                      pb::SpawnProcessResponse* response = nullptr);
// Kill(gid, signal), deadline 10 s.
grpc::Status RawKill(pb::Directory::Stub& stub, Gid gid, int signal);

// The one host matching `expression` ("kind=host and name=gpu-node"), once
// the daemon behind `stub` knows it and its address (a joiner replicated to
// the seed); Gid() if that does not happen within `timeout`.
Gid WaitForHost(pb::Directory::Stub& stub, const std::string& expression,
                std::chrono::milliseconds timeout = std::chrono::seconds(20));
grpc::Status RawRegisterThreads(pb::Directory::Stub& stub,
                                const pb::RegisterThreadsRequest& request);
grpc::Status RawUnregisterThreads(pb::Directory::Stub& stub,
                                  const pb::UnregisterThreadsRequest& request);
grpc::Status RawPublishEndpoint(pb::Directory::Stub& stub,
                                const pb::PublishEndpointRequest& request);
grpc::Status RawGetPoolStats(pb::Directory::Stub& stub, uint64_t raw_process,
                             pb::GetPoolStatsResponse* response = nullptr);
grpc::Status RawGetNetworkStats(pb::Directory::Stub& stub, uint64_t raw_process,
                                pb::GetNetworkStatsResponse* response = nullptr);

}  // namespace tocl::testing
