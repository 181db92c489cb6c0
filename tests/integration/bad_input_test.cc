// What toclsd does with input the client library would never send: every
// bad request gets a clear gRPC error, the daemon keeps serving, and the
// database is unchanged (same head sequence number, same row counts).
#include <catch2/catch.hpp>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "database_file.h"
#include "raw_directory.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

// Checks that `expr` (a grpc::Status) failed with `code`, and says what it got.
#define CHECK_CODE(expr, code)                         \
  do {                                                 \
    const grpc::Status grpc_status_ = (expr);          \
    INFO(#expr " -> " << Describe(grpc_status_));      \
    CHECK(grpc_status_.error_code() == (code));        \
    CHECK_FALSE(grpc_status_.error_message().empty()); \
  } while (false)

using Attrs = std::vector<std::pair<std::string, std::string>>;

// What must not move when a request is rejected.
struct Snapshot {
  uint64_t head_seq = 0;
  RowCounts rows;
};

// A daemon with two enrolled processes, A and B, each with thread t1.
class TwoProcesses {
 public:
  TwoProcesses() {
    REQUIRE_OK(daemon_.Start());
    stub_ = NewRawStub(daemon_.address());
    a_ = Enroll("process-a");
    b_ = Enroll("process-b");
    for (RawEnrollment* process : {a_.get(), b_.get()}) {
      grpc::Status status = RawRegisterThreads(
          *stub_, process->ThreadsRequest({MakeThread(Thread(*process, 1), "t1")}));
      INFO(Describe(status));
      REQUIRE(status.ok());
    }
    before_ = Take();
  }

 protected:
  std::unique_ptr<RawEnrollment> Enroll(const std::string& name) {
    EnrollAttempt attempt = RawEnroll(*stub_, MakeRegister(name));
    INFO("enroll " << name << " -> " << Describe(attempt.status));
    REQUIRE(attempt.status.ok());
    return std::move(attempt.enrollment);
  }

  static Gid Thread(const RawEnrollment& process, uint32_t index) {
    return Gid::Thread(process.gid(), index);
  }

  Snapshot Take() {
    Snapshot snapshot;
    grpc::Status ping = RawPing(*stub_, &snapshot.head_seq);
    INFO(Describe(ping));
    REQUIRE(ping.ok());
    snapshot.rows = REQUIRE_VALUE(CountRows(daemon_.db_path()));
    return snapshot;
  }

  // The daemon still answers and nothing was written since the fixture (or
  // the last Rebase()) took its snapshot.
  void CheckUnchanged() {
    REQUIRE(daemon_.running());
    Snapshot after = Take();
    CHECK(after.head_seq == before_.head_seq);
    INFO("before: " << before_.rows.ToString() << "\nafter:  " << after.rows.ToString());
    CHECK(after.rows == before_.rows);
  }

  void Rebase() { before_ = Take(); }

  Daemon daemon_;
  std::unique_ptr<pb::Directory::Stub> stub_;
  std::unique_ptr<RawEnrollment> a_;
  std::unique_ptr<RawEnrollment> b_;
  Snapshot before_;
};

pb::EnrollRegister RegisterWith(const Attrs& attributes) {
  return MakeRegister("attribute-test", attributes);
}

std::string Repeat(char c, size_t n) {
  return std::string(n, c);
}

Attrs ManyAttributes(size_t n) {
  Attrs attributes;
  for (size_t i = 0; i < n; ++i) attributes.emplace_back("key" + std::to_string(i), "v");
  return attributes;
}

TEST_CASE_METHOD(TwoProcesses, "lookups of malformed ids are rejected as invalid arguments",
                 "[integration][bad-input]") {
  CHECK_CODE(RawLookup(*stub_, 0), grpc::StatusCode::INVALID_ARGUMENT);
  // A thread index without a process index.
  CHECK_CODE(RawLookup(*stub_, (uint64_t{1} << 48) | 5), grpc::StatusCode::INVALID_ARGUMENT);
  // A process without a host.
  CHECK_CODE(RawLookup(*stub_, uint64_t{3} << 24), grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawLookup(*stub_, ~uint64_t{0} >> 16), grpc::StatusCode::INVALID_ARGUMENT);
  CheckUnchanged();
}

TEST_CASE_METHOD(TwoProcesses, "lookups of unknown ids are not found", "[integration][bad-input]") {
  CHECK_CODE(RawLookup(*stub_, Gid::Process(1, 999'999).raw()), grpc::StatusCode::NOT_FOUND);
  CHECK_CODE(RawLookup(*stub_, Thread(*a_, 9'999).raw()), grpc::StatusCode::NOT_FOUND);
  CHECK_CODE(RawLookup(*stub_, Gid::Host(7).raw()), grpc::StatusCode::NOT_FOUND);
  CHECK_CODE(RawLookup(*stub_, Gid::Thread(7, 1, 1).raw()), grpc::StatusCode::NOT_FOUND);
  // The known ones are found, so NOT_FOUND above is about the ids.
  CHECK(RawLookup(*stub_, Thread(*a_, 1).raw()).ok());
  CHECK(RawLookup(*stub_, Gid::Host(1).raw()).ok());
  CheckUnchanged();
}

TEST_CASE_METHOD(TwoProcesses, "attributes over the documented limits are rejected",
                 "[integration][bad-input]") {
  const std::string long_key = "k" + Repeat('x', kMaxAttributeKeyBytes);  // 257 bytes
  const std::string long_value = Repeat('v', kMaxAttributeValueBytes + 1);

  CHECK_CODE(RawEnroll(*stub_, RegisterWith({{long_key, "v"}})).status,
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawEnroll(*stub_, RegisterWith({{"big", long_value}})).status,
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawRegisterThreads(
                 *stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), "t2", {{long_key, "v"}})})),
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(
      RawRegisterThreads(
          *stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), "t2", {{"big", long_value}})})),
      grpc::StatusCode::INVALID_ARGUMENT);

  // One attribute too many: a limit on one request is INVALID_ARGUMENT.
  auto is_limit_error = [](const grpc::Status& status) {
    return status.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
  };
  grpc::Status too_many_enroll =
      RawEnroll(*stub_, RegisterWith(ManyAttributes(kMaxAttributesPerEntity + 1))).status;
  INFO(Describe(too_many_enroll));
  CHECK(is_limit_error(too_many_enroll));
  grpc::Status too_many_thread = RawRegisterThreads(
      *stub_, a_->ThreadsRequest(
                  {MakeThread(Thread(*a_, 2), "t2", ManyAttributes(kMaxAttributesPerEntity + 1))}));
  INFO(Describe(too_many_thread));
  CHECK(is_limit_error(too_many_thread));

  // A bad thread anywhere in a batch rejects the whole batch.
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({
                                            MakeThread(Thread(*a_, 2), "t2"),
                                            MakeThread(Thread(*a_, 3), "t3", {{"big", long_value}}),
                                        })),
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawLookup(*stub_, Thread(*a_, 2).raw()), grpc::StatusCode::NOT_FOUND);
  CheckUnchanged();

  // Exactly at the limits is fine, and comes back intact.
  Attrs at_limit = ManyAttributes(kMaxAttributesPerEntity - 1);
  const std::string longest_key = Repeat('k', kMaxAttributeKeyBytes);
  const std::string longest_value = Repeat('v', kMaxAttributeValueBytes);
  at_limit.emplace_back(longest_key, longest_value);
  grpc::Status accepted =
      RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 4), "t4", at_limit)}));
  INFO(Describe(accepted));
  REQUIRE(accepted.ok());
  pb::Entity entity;
  REQUIRE(RawLookup(*stub_, Thread(*a_, 4).raw(), &entity).ok());
  CHECK(entity.attributes_size() == static_cast<int>(kMaxAttributesPerEntity));
  bool found_longest = false;
  for (const pb::Attribute& attribute : entity.attributes()) {
    if (attribute.key() == longest_key) found_longest = attribute.value() == longest_value;
  }
  CHECK(found_longest);
}

TEST_CASE_METHOD(TwoProcesses, "attribute keys with bad syntax or reserved names are rejected",
                 "[integration][bad-input]") {
  const std::vector<std::string> bad_keys = {
      "", "1abc", "a b", "a=b", "-x", ".x", "k\n", "role;drop", "\xc3\xa9t\xc3\xa9"};
  const std::vector<std::string> reserved = {"kind",    "name", "state", "host",
                                             "process", "pid",  "gid"};
  std::vector<std::string> all = bad_keys;
  all.insert(all.end(), reserved.begin(), reserved.end());
  for (const std::string& key : all) {
    INFO("key '" << key << "'");
    CHECK_CODE(RawEnroll(*stub_, RegisterWith({{key, "v"}})).status,
               grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_CODE(RawRegisterThreads(
                   *stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), "t2", {{key, "v"}})})),
               grpc::StatusCode::INVALID_ARGUMENT);
  }
  // The same key twice on one entity.
  CHECK_CODE(RawEnroll(*stub_, RegisterWith({{"role", "a"}, {"role", "b"}})).status,
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawRegisterThreads(
                 *stub_, a_->ThreadsRequest(
                             {MakeThread(Thread(*a_, 2), "t2", {{"role", "a"}, {"role", "b"}})})),
             grpc::StatusCode::INVALID_ARGUMENT);
  CheckUnchanged();
}

TEST_CASE_METHOD(TwoProcesses, "empty, overlong and malformed names are rejected",
                 "[integration][bad-input]") {
  CHECK_CODE(RawEnroll(*stub_, MakeRegister("")).status, grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawEnroll(*stub_, MakeRegister(Repeat('n', kMaxNameBytes + 1))).status,
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawEnroll(*stub_, MakeRegister("line\nbreak")).status,
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawEnroll(*stub_, MakeRegister("negative-pid", {}, -5)).status,
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), "")})),
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(
      RawRegisterThreads(
          *stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), Repeat('n', kMaxNameBytes + 1))})),
      grpc::StatusCode::INVALID_ARGUMENT);
  CheckUnchanged();
}

TEST_CASE_METHOD(TwoProcesses,
                 "a batch with a duplicate or already registered thread changes nothing",
                 "[integration][bad-input]") {
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), "t2"),
                                                            MakeThread(Thread(*a_, 3), "t3"),
                                                            MakeThread(Thread(*a_, 2), "again")})),
             grpc::StatusCode::INVALID_ARGUMENT);
  // t1 is registered already.
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 1), "t1")})),
             grpc::StatusCode::ALREADY_EXISTS);
  // A new thread in front of the old one is not kept either: batches are atomic.
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 5), "t5"),
                                                            MakeThread(Thread(*a_, 1), "t1")})),
             grpc::StatusCode::ALREADY_EXISTS);
  CHECK_CODE(RawLookup(*stub_, Thread(*a_, 5).raw()), grpc::StatusCode::NOT_FOUND);
  // Ids that are not thread ids.
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(a_->gid(), "process")})),
             grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Gid(), "null")})),
             grpc::StatusCode::INVALID_ARGUMENT);
  pb::RegisterThreadsRequest not_a_process = a_->ThreadsRequest({MakeThread(Thread(*a_, 6), "t6")});
  not_a_process.set_process(Thread(*a_, 1).raw());
  CHECK_CODE(RawRegisterThreads(*stub_, not_a_process), grpc::StatusCode::INVALID_ARGUMENT);
  CheckUnchanged();
}

TEST_CASE_METHOD(TwoProcesses, "unregistering a batch with an unknown thread changes nothing",
                 "[integration][bad-input]") {
  grpc::ClientContext context;
  pb::UnregisterThreadsRequest request;
  request.set_process(a_->gid().raw());
  request.set_session_token(a_->token());
  request.add_threads(Thread(*a_, 1).raw());   // registered and running
  request.add_threads(Thread(*a_, 77).raw());  // never registered
  pb::WriteResponse response;
  CHECK_CODE(stub_->UnregisterThreads(&context, request, &response), grpc::StatusCode::NOT_FOUND);
  CheckUnchanged();
  pb::Entity thread;
  REQUIRE(RawLookup(*stub_, Thread(*a_, 1).raw(), &thread).ok());
  CHECK(thread.state() == pb::RUNNING);
}

TEST_CASE_METHOD(TwoProcesses, "bad endpoints and oversized batches are rejected",
                 "[integration][bad-input]") {
  auto publish = [&](const std::string& subsystem, const std::string& address) {
    grpc::ClientContext context;
    pb::PublishEndpointRequest request;
    request.set_process(a_->gid().raw());
    request.set_session_token(a_->token());
    request.mutable_endpoint()->set_subsystem(subsystem);
    request.mutable_endpoint()->set_address(address);
    pb::WriteResponse response;
    return stub_->PublishEndpoint(&context, request, &response);
  };
  CHECK_CODE(publish("", "x"), grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(publish("TCP", "x"), grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(publish("tcp; drop", "x"), grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(publish(Repeat('s', 33), "x"), grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(publish("tcp", Repeat('a', 1025)), grpc::StatusCode::INVALID_ARGUMENT);

  std::vector<pb::ThreadRegistration> too_many;
  for (uint32_t i = 1; i <= 10'001; ++i) {
    too_many.push_back(MakeThread(Thread(*a_, 100 + i), "t"));
  }
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest(std::move(too_many))),
             grpc::StatusCode::INVALID_ARGUMENT);
  CheckUnchanged();
}

TEST_CASE_METHOD(TwoProcesses, "bad requests mixed into a storm of good ones do not disturb them",
                 "[integration][bad-input]") {
  // Writes are committed in groups: a failing request must roll back only
  // itself, never the good requests that share its transaction.
  constexpr int kRounds = 60;
  std::vector<Gid> good;
  std::vector<Gid> bad;
  std::vector<std::string> errors;
  std::mutex mu;
  auto run = [&](RawEnrollment& process, uint32_t base, bool make_bad) {
    auto stub = NewRawStub(daemon_.address());
    for (int round = 0; round < kRounds; ++round) {
      const Gid fresh = Thread(process, base + static_cast<uint32_t>(round));
      std::vector<pb::ThreadRegistration> batch = {MakeThread(fresh, "fresh")};
      // A bad batch ends with the already registered t1.
      if (make_bad) batch.push_back(MakeThread(Thread(process, 1), "t1"));
      grpc::Status status = RawRegisterThreads(*stub, process.ThreadsRequest(std::move(batch)));
      std::lock_guard lock(mu);
      if (make_bad) {
        bad.push_back(fresh);
        if (status.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
          errors.push_back("bad batch -> " + Describe(status));
        }
      } else if (status.ok()) {
        good.push_back(fresh);
      } else {
        errors.push_back("good batch -> " + Describe(status));
      }
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(run, std::ref(*a_), 1000, false);
  threads.emplace_back(run, std::ref(*b_), 1000, false);
  threads.emplace_back(run, std::ref(*a_), 5000, true);
  threads.emplace_back(run, std::ref(*b_), 5000, true);
  for (std::thread& thread : threads) thread.join();

  for (const std::string& error : errors) FAIL_CHECK(error);
  CHECK(good.size() == 2 * kRounds);
  for (Gid gid : good) {
    INFO(gid.ToString());
    CHECK(RawLookup(*stub_, gid.raw()).ok());
  }
  for (Gid gid : bad) {
    INFO(gid.ToString());
    CHECK_CODE(RawLookup(*stub_, gid.raw()), grpc::StatusCode::NOT_FOUND);
  }
  const RowCounts rows = REQUIRE_VALUE(CountRows(daemon_.db_path()));
  CHECK(rows.threads == before_.rows.threads + static_cast<int64_t>(good.size()));
}

TEST_CASE_METHOD(TwoProcesses, "a process cannot register threads for another process",
                 "[integration][bad-input]") {
  // A's token, A's process field, a thread under B.
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*b_, 7), "t7")})),
             grpc::StatusCode::PERMISSION_DENIED);
  // B's process field with A's token, and with no token.
  pb::RegisterThreadsRequest stolen = a_->ThreadsRequest({MakeThread(Thread(*b_, 7), "t7")});
  stolen.set_process(b_->gid().raw());
  CHECK_CODE(RawRegisterThreads(*stub_, stolen), grpc::StatusCode::PERMISSION_DENIED);
  stolen.clear_session_token();
  CHECK_CODE(RawRegisterThreads(*stub_, stolen), grpc::StatusCode::PERMISSION_DENIED);

  {
    grpc::ClientContext context;
    pb::UnregisterThreadsRequest request;
    request.set_process(b_->gid().raw());
    request.set_session_token(a_->token());
    request.add_threads(Thread(*b_, 1).raw());
    pb::WriteResponse response;
    CHECK_CODE(stub_->UnregisterThreads(&context, request, &response),
               grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext context;
    pb::PublishEndpointRequest request;
    request.set_process(b_->gid().raw());
    request.set_session_token(a_->token());
    request.mutable_endpoint()->set_subsystem("tcp");
    request.mutable_endpoint()->set_address("127.0.0.1:1");
    pb::WriteResponse response;
    CHECK_CODE(stub_->PublishEndpoint(&context, request, &response),
               grpc::StatusCode::PERMISSION_DENIED);
  }
  // Taking over B's enrollment with A's token.
  pb::EnrollRegister resume = MakeRegister("process-b");
  resume.set_resume_gid(b_->gid().raw());
  resume.set_resume_token(a_->token());
  CHECK_CODE(RawEnroll(*stub_, resume).status, grpc::StatusCode::PERMISSION_DENIED);

  CheckUnchanged();
  // B's thread was not touched.
  pb::Entity thread;
  REQUIRE(RawLookup(*stub_, Thread(*b_, 1).raw(), &thread).ok());
  CHECK(thread.state() == pb::RUNNING);
}

TEST_CASE_METHOD(TwoProcesses, "bad queries are rejected with the position of the error",
                 "[integration][bad-input]") {
  const std::vector<std::string> bad = {
      "kind=thread and (", "kind=",         "=thread",  "kind==thread",   "kind=fish",
      "role=merger or",    "(((kind=host",  ")",        "pid=abc",        "state=sleeping",
      "process=h1",        "kind=thread #", "name~\"x", "a=1 and and b=2"};
  for (const std::string& query : bad) {
    grpc::Status status = RawQuery(*stub_, query);
    INFO("query '" << query << "' -> " << Describe(status));
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("position"));
  }
  // The position is the byte offset of the offending token.
  CHECK_THAT(RawQuery(*stub_, "kind=fish").error_message(), Catch::Contains("position 5"));
  CHECK_THAT(RawQuery(*stub_, "kind=thread and (").error_message(), Catch::Contains("position 17"));
  CHECK_CODE(RawQuery(*stub_, "role=" + Repeat('x', 5000)), grpc::StatusCode::INVALID_ARGUMENT);

  // Values that look like SQL are only values.
  for (const std::string& query :
       {std::string(R"(name="x'); DROP TABLE threads; --")"),
        std::string(R"(role='1\' OR 1=1 --')"), std::string(R"(name~"*' OR '1'='1")")}) {
    pb::QueryResponse response;
    grpc::Status status = RawQuery(*stub_, query, {}, &response);
    INFO("query " << query << " -> " << Describe(status));
    CHECK(status.ok());
    CHECK(response.entities_size() == 0);
  }

  // Bad page tokens.
  for (const char* token : {"abc", "12x", " 1", "-", "99999999999999999999999"}) {
    INFO("page token '" << token << "'");
    CHECK_CODE(RawQuery(*stub_, "kind=thread", token), grpc::StatusCode::INVALID_ARGUMENT);
  }
  CheckUnchanged();
  // Still answering queries correctly.
  pb::QueryResponse threads;
  REQUIRE(RawQuery(*stub_, "kind=thread", {}, &threads).ok());
  CHECK(threads.entities_size() == 2);
}

TEST_CASE_METHOD(TwoProcesses, "an enroll stream that does not start with register is rejected",
                 "[integration][bad-input]") {
  pb::EnrollRequest goodbye;
  goodbye.mutable_goodbye()->set_reason("never said hello");
  CHECK_CODE(RawEnroll(*stub_, goodbye).status, grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_CODE(RawEnroll(*stub_, pb::EnrollRequest()).status, grpc::StatusCode::INVALID_ARGUMENT);
  // Resuming something that is not a process of this host.
  pb::EnrollRegister resume = MakeRegister("ghost");
  resume.set_resume_gid(Thread(*a_, 1).raw());
  resume.set_resume_token(a_->token());
  CHECK_CODE(RawEnroll(*stub_, resume).status, grpc::StatusCode::INVALID_ARGUMENT);
  CheckUnchanged();
  // A proper enrollment still works.
  EnrollAttempt good = RawEnroll(*stub_, MakeRegister("process-c"));
  INFO(Describe(good.status));
  REQUIRE(good.status.ok());
  CHECK(good.enrollment->gid().process_index() > b_->gid().process_index());
}

TEST_CASE_METHOD(TwoProcesses, "a process that has exited can no longer register threads",
                 "[integration][bad-input]") {
  grpc::Status bye = a_->Goodbye("done");
  INFO(Describe(bye));
  REQUIRE(bye.ok());
  pb::Entity process;
  REQUIRE(WaitUntil(
      [&] {
        return RawLookup(*stub_, a_->gid().raw(), &process).ok() && process.state() == pb::EXITED;
      },
      std::chrono::seconds(10)));
  CHECK(process.exit_reason() == "done");
  Rebase();
  CHECK_CODE(RawRegisterThreads(*stub_, a_->ThreadsRequest({MakeThread(Thread(*a_, 2), "t2")})),
             grpc::StatusCode::FAILED_PRECONDITION);
  CheckUnchanged();
}

}  // namespace
}  // namespace tocl::testing
