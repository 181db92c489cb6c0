// Stores for the directory unit tests that play hosts of a cluster: real
// stores on temporary files, processes enrolled and threads registered the
// way the service does it, and replication from one to another.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"
#include "temp_dir.h"

namespace tocl::directory {

// The store of host `host_id` in `dir` (h<id>.db), named node-<id>.
inline std::unique_ptr<Store> OpenHost(const testing::TempDir& dir, uint32_t host_id) {
  StoreOptions options;
  options.path = dir.path() + "/h" + std::to_string(host_id) + ".db";
  options.host_name = "node-" + std::to_string(host_id);
  options.host_id = host_id;
  Result<std::unique_ptr<Store>> store = Store::Open(options);
  REQUIRE(store.status().message() == "");
  return std::move(store).value();
}

// A process called `name` with the attribute role=worker.
inline Enrollment Enroll(Store& store, const std::string& name) {
  pb::EnrollRegister request;
  request.set_name(name);
  request.set_os_pid(4242);
  pb::Attribute* attribute = request.add_attributes();
  attribute->set_key("role");
  attribute->set_value("worker");
  Result<Enrollment> enrollment = store.EnrollProcess(request);
  REQUIRE(enrollment.status().message() == "");
  return *enrollment;
}

// Threads first .. first + count - 1 of `process`, named t<i>, each with
// the attribute shard=<i % 3>.
inline void RegisterThreads(Store& store, const Enrollment& process, uint32_t first,
                            uint32_t count) {
  pb::RegisterThreadsRequest request;
  request.set_process(process.gid.raw());
  request.set_session_token(process.session_token);
  for (uint32_t i = first; i < first + count; ++i) {
    pb::ThreadRegistration* thread = request.add_threads();
    thread->set_gid(Gid::Thread(process.gid, i).raw());
    thread->set_name("t" + std::to_string(i));
    pb::Attribute* attribute = thread->add_attributes();
    attribute->set_key("shard");
    attribute->set_value(std::to_string(i % 3));
  }
  REQUIRE(store.RegisterThreads(request).status().message() == "");
}

// Pulls everything `origin` has after the replica's progress into `replica`,
// as a Replicate stream would; returns the seq applied to.
inline uint64_t Replicate(Store& origin, Store& replica) {
  uint64_t since = replica.ReplicaProgress(origin.host()).value_or(0);
  for (;;) {
    Result<std::vector<pb::ChangeEvent>> events = origin.OwnChangesSince(since, 100);
    REQUIRE(events.status().message() == "");
    if (events->empty()) return since;
    since = events->back().seq();
    REQUIRE(replica.ApplyReplicated(origin.host(), *events, since).message() == "");
  }
}

}  // namespace tocl::directory
