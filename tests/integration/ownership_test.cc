// A process writes only under its own Gid (issue #7 §2): RegisterThreads,
// UnregisterThreads and PublishEndpoint for another process's Gid, with the
// caller's own session token, with none, with a made-up one, with the other
// process's token for the caller's Gid, with thread ids of another process
// inside the caller's own batch, or for a process of another host, are
// PERMISSION_DENIED, and nothing is written (the same head sequence number,
// the same rows, the other process's threads and endpoints untouched).
// bad_input_test.cc has the malformed requests.
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "database_file.h"
#include "raw_directory.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

// A daemon with processes A and B, each with thread t1 and a tcp endpoint.
class TwoOwners {
 public:
  TwoOwners() {
    REQUIRE_OK(daemon_.Start());
    stub_ = NewRawStub(daemon_.address());
    a_ = Enroll("owner-a");
    b_ = Enroll("owner-b");
    for (RawEnrollment* process : {a_.get(), b_.get()}) {
      const grpc::Status registered = RawRegisterThreads(
          *stub_, process->ThreadsRequest({MakeThread(Thread(*process, 1), "t1")}));
      INFO(Describe(registered));
      REQUIRE(registered.ok());
      const grpc::Status published = RawPublishEndpoint(
          *stub_, Endpoint(process->gid(), process->token(), process->gid().ToString()));
      INFO(Describe(published));
      REQUIRE(published.ok());
    }
    REQUIRE(RawPing(*stub_, &head_).ok());
    rows_ = REQUIRE_VALUE(CountRows(daemon_.db_path()));
  }

 protected:
  std::unique_ptr<RawEnrollment> Enroll(const std::string& name) {
    EnrollAttempt attempt = RawEnroll(*stub_, MakeRegister(name));
    INFO(Describe(attempt.status));
    REQUIRE(attempt.status.ok());
    return std::move(attempt.enrollment);
  }

  static Gid Thread(const RawEnrollment& process, uint32_t index) {
    return Gid::Thread(process.gid(), index);
  }

  static pb::PublishEndpointRequest Endpoint(Gid process, const std::string& token,
                                             const std::string& address) {
    pb::PublishEndpointRequest request;
    request.set_process(process.raw());
    request.set_session_token(token);
    request.mutable_endpoint()->set_subsystem("tcp");
    request.mutable_endpoint()->set_address(address);
    return request;
  }

  // Each attempt is refused as a permission matter.
  void CheckAllDenied(
      const std::vector<std::pair<std::string, std::function<grpc::Status()>>>& attempts) {
    for (const auto& [what, attempt] : attempts) {
      const grpc::Status status = attempt();
      INFO(what << " -> " << Describe(status));
      CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
  }

  // Nothing was written, and B is as it was.
  void CheckNothingWritten() {
    uint64_t head = 0;
    REQUIRE(RawPing(*stub_, &head).ok());
    CHECK(head == head_);
    const RowCounts rows = REQUIRE_VALUE(CountRows(daemon_.db_path()));
    INFO("before: " << rows_.ToString() << "\nafter:  " << rows.ToString());
    CHECK(rows == rows_);
    pb::Entity b;
    REQUIRE(RawLookup(*stub_, b_->gid().raw(), &b).ok());
    REQUIRE(b.endpoints_size() == 1);
    CHECK(b.endpoints(0).address() == b_->gid().ToString());
    pb::Entity thread;
    REQUIRE(RawLookup(*stub_, Thread(*b_, 1).raw(), &thread).ok());
    CHECK(thread.state() == pb::RUNNING);
  }

  Daemon daemon_;
  std::unique_ptr<pb::Directory::Stub> stub_;
  std::unique_ptr<RawEnrollment> a_;
  std::unique_ptr<RawEnrollment> b_;
  uint64_t head_ = 0;
  RowCounts rows_;
};

const std::string kMadeUpToken(16, '\x5a');

TEST_CASE_METHOD(TwoOwners, "threads are registered only under the caller's own process",
                 "[integration][security]") {
  auto request = [&](Gid process, const std::string& token, std::vector<Gid> threads) {
    pb::RegisterThreadsRequest built;
    built.set_process(process.raw());
    built.set_session_token(token);
    for (Gid gid : threads) *built.add_threads() = MakeThread(gid, "intruder");
    return [this, built] { return RawRegisterThreads(*stub_, built); };
  };
  const Gid other_host_process = Gid::Process(2, a_->gid().process_index());
  CheckAllDenied({
      {"B's process, A's token", request(b_->gid(), a_->token(), {Thread(*b_, 9)})},
      {"B's process, no token", request(b_->gid(), "", {Thread(*b_, 9)})},
      {"B's process, a made-up token", request(b_->gid(), kMadeUpToken, {Thread(*b_, 9)})},
      {"A's process, B's token", request(a_->gid(), b_->token(), {Thread(*a_, 9)})},
      {"A's process and token, a thread of B", request(a_->gid(), a_->token(), {Thread(*b_, 9)})},
      {"A's process and token, A's thread then B's",
       request(a_->gid(), a_->token(), {Thread(*a_, 9), Thread(*b_, 9)})},
      {"another host's process, A's token",
       request(other_host_process, a_->token(), {Gid::Thread(other_host_process, 1)})},
  });
  CheckNothingWritten();
  CHECK(RawLookup(*stub_, Thread(*a_, 9).raw()).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(RawLookup(*stub_, Thread(*b_, 9).raw()).error_code() == grpc::StatusCode::NOT_FOUND);
}

TEST_CASE_METHOD(TwoOwners, "threads are unregistered only by the process they belong to",
                 "[integration][security]") {
  auto request = [&](Gid process, const std::string& token, std::vector<Gid> threads) {
    pb::UnregisterThreadsRequest built;
    built.set_process(process.raw());
    built.set_session_token(token);
    for (Gid gid : threads) built.add_threads(gid.raw());
    return [this, built] { return RawUnregisterThreads(*stub_, built); };
  };
  CheckAllDenied({
      {"B's process, A's token", request(b_->gid(), a_->token(), {Thread(*b_, 1)})},
      {"B's process, no token", request(b_->gid(), "", {Thread(*b_, 1)})},
      {"B's process, a made-up token", request(b_->gid(), kMadeUpToken, {Thread(*b_, 1)})},
      {"A's process, B's token", request(a_->gid(), b_->token(), {Thread(*a_, 1)})},
      {"A's process and token, B's thread", request(a_->gid(), a_->token(), {Thread(*b_, 1)})},
      {"A's process and token, A's thread and B's",
       request(a_->gid(), a_->token(), {Thread(*a_, 1), Thread(*b_, 1)})},
  });
  CheckNothingWritten();
  pb::Entity thread;
  REQUIRE(RawLookup(*stub_, Thread(*a_, 1).raw(), &thread).ok());
  CHECK(thread.state() == pb::RUNNING);
}

TEST_CASE_METHOD(TwoOwners, "endpoints are published only for the caller's own process",
                 "[integration][security]") {
  auto request = [&](Gid process, const std::string& token) {
    return [this, built = Endpoint(process, token, "10.9.9.9:1")] {
      return RawPublishEndpoint(*stub_, built);
    };
  };
  const Gid other_host_process = Gid::Process(2, a_->gid().process_index());
  CheckAllDenied({
      {"B's process, A's token", request(b_->gid(), a_->token())},
      {"B's process, no token", request(b_->gid(), "")},
      {"B's process, a made-up token", request(b_->gid(), kMadeUpToken)},
      {"A's process, B's token", request(a_->gid(), b_->token())},
      {"another host's process, A's token", request(other_host_process, a_->token())},
  });
  CheckNothingWritten();
  pb::Entity a;
  REQUIRE(RawLookup(*stub_, a_->gid().raw(), &a).ok());
  REQUIRE(a.endpoints_size() == 1);
  CHECK(a.endpoints(0).address() == a_->gid().ToString());
}

}  // namespace
}  // namespace tocl::testing
