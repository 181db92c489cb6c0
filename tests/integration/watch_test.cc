// The change stream: events for what was registered, resumable from any
// sequence number, delivered promptly to a watcher that is waiting.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "raw_directory.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const Attributes kWatched{{"role", "watched"}};

// Watches from `since` until an event with seq >= `until` arrives (or 20 s).
std::vector<ChangeEvent> WatchUntil(DirectoryClient& client, uint64_t since, uint64_t until,
                                    Status* status) {
  std::vector<ChangeEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  *status = client.Watch(
      since,
      [&](const ChangeEvent& event) {
        events.push_back(event);
        return event.seq < until;
      },
      [&] { return std::chrono::steady_clock::now() > deadline; });
  return events;
}

TEST_CASE("a watcher sees the events of an enrollment and a registration in order",
          "[integration][watch]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  const uint64_t before = REQUIRE_VALUE(client->Ping());

  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("watched")));
  const Gid process = session->gid();
  REQUIRE_OK(session->RegisterThreads(MakeThreads(process, 1, 5, "w", kWatched)));
  const uint64_t after = REQUIRE_VALUE(client->Ping());
  REQUIRE(after >= before + 6);

  Status status;
  std::vector<ChangeEvent> events = WatchUntil(*client, before, after, &status);
  CHECK_OK(status);
  REQUIRE(events.size() == after - before);
  for (size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i << ": seq " << events[i].seq << " " << ChangeOpName(events[i].op) << " "
                  << events[i].gid.ToString());
    CHECK(events[i].seq > before);
    if (i > 0) CHECK(events[i].seq > events[i - 1].seq);
    CHECK(events[i].op == ChangeOp::kAdded);
    CHECK(events[i].entity.gid == events[i].gid);
  }
  CHECK(events.front().gid == process);
  CHECK(events.front().entity.kind == EntityKind::kProcess);
  CHECK(events.front().entity.name == "watched");
  for (uint32_t t = 1; t <= 5; ++t) {
    const ChangeEvent& event = events[t];
    CHECK(event.gid == Gid::Thread(process, t));
    CHECK(event.entity.kind == EntityKind::kThread);
    CHECK(event.entity.name == "w" + std::to_string(t));
    CHECK(event.entity.attributes.at("role") == "watched");
  }
  CHECK(events.back().seq == after);
}

TEST_CASE("a watch resumed from a sequence number gets exactly the later events",
          "[integration][watch]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  {
    auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("history")));
    const Gid process = session->gid();
    REQUIRE_OK(session->RegisterThreads(MakeThreads(process, 1, 6, "w", kWatched)));
    REQUIRE_OK(session->RegisterThreads(MakeThreads(process, 7, 6, "w", kWatched)));
    std::vector<Gid> leaving = {Gid::Thread(process, 2), Gid::Thread(process, 9)};
    REQUIRE_OK(session->UnregisterThreads(leaving, "done early"));
    REQUIRE_OK(session->PublishEndpoint("tcp", "127.0.0.1:9"));
    REQUIRE_OK(session->Close());
  }
  uint64_t head = 0;
  REQUIRE(WaitUntil(
      [&] {
        // Close() is done when the process's exit is in the log.
        auto exited = client->Query("kind=process and state=exited");
        return exited.ok() && exited->entities.size() == 1;
      },
      seconds(10)));
  head = REQUIRE_VALUE(client->Ping());

  Status status;
  const std::vector<ChangeEvent> full = WatchUntil(*client, 0, head, &status);
  CHECK_OK(status);
  REQUIRE(full.size() >= 16);
  REQUIRE(full.back().seq == head);
  bool saw_exit = false;
  bool saw_update = false;
  for (const ChangeEvent& event : full) {
    saw_exit |= event.op == ChangeOp::kExited;
    saw_update |= event.op == ChangeOp::kUpdated;
  }
  CHECK(saw_exit);
  CHECK(saw_update);

  for (size_t cut : {size_t{0}, full.size() / 3, full.size() / 2, full.size() - 2}) {
    const uint64_t since = full[cut].seq;
    INFO("resuming after seq " << since);
    const std::vector<ChangeEvent> later = WatchUntil(*client, since, head, &status);
    CHECK_OK(status);
    REQUIRE(later.size() == full.size() - cut - 1);
    for (size_t i = 0; i < later.size(); ++i) {
      const ChangeEvent& want = full[cut + 1 + i];
      CHECK(later[i].seq == want.seq);
      CHECK(later[i].op == want.op);
      CHECK(later[i].gid == want.gid);
    }
  }
}

// A raw Watch stream read on its own thread; the test waits for what it
// collects and cancels it at the end.
class RawWatcher {
 public:
  RawWatcher(const std::string& address, uint64_t since) : stub_(NewRawStub(address)) {
    pb::WatchRequest request;
    request.set_since_seq(since);
    reader_ = stub_->Watch(&context_, request);
    thread_ = std::thread([this] {
      pb::ChangeEvent event;
      while (reader_->Read(&event)) {
        std::lock_guard lock(mu_);
        arrivals_.push_back({event, std::chrono::steady_clock::now()});
        changed_.notify_all();
      }
    });
  }
  ~RawWatcher() {
    context_.TryCancel();
    thread_.join();
    (void)reader_->Finish();
  }

  struct Arrival {
    pb::ChangeEvent event;
    std::chrono::steady_clock::time_point at;
  };

  // The arrival of the first event about `gid`, if one comes within `timeout`.
  std::optional<Arrival> WaitForGid(Gid gid, milliseconds timeout) {
    std::unique_lock lock(mu_);
    std::optional<Arrival> found;
    changed_.wait_for(lock, timeout, [&] {
      for (const Arrival& arrival : arrivals_) {
        if (arrival.event.gid() == gid.raw()) {
          found = arrival;
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  std::unique_ptr<pb::Directory::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pb::ChangeEvent>> reader_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Arrival> arrivals_;  // guarded by mu_
  std::thread thread_;
};

TEST_CASE("a watch waiting for changes receives a new event promptly", "[integration][watch]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("prompt")));
  const Gid process = session->gid();

  RawWatcher watcher(daemon.address(), REQUIRE_VALUE(client->Ping()));
  // The first event shows the watch is established and caught up; from
  // then on it waits for changes.
  REQUIRE_OK(session->RegisterThreads(MakeThreads(process, 1, 1, "w", kWatched)));
  REQUIRE(watcher.WaitForGid(Gid::Thread(process, 1), seconds(10)));

  for (uint32_t t = 2; t <= 4; ++t) {
    const Gid gid = Gid::Thread(process, t);
    REQUIRE_OK(session->RegisterThreads(MakeThreads(process, t, 1, "w", kWatched)));
    const auto acknowledged = std::chrono::steady_clock::now();
    auto arrival = watcher.WaitForGid(gid, seconds(10));
    REQUIRE(arrival);
    const auto latency =
        std::chrono::duration_cast<milliseconds>(arrival->at - acknowledged).count();
    INFO("event for " << gid.ToString() << " arrived " << latency << " ms after the ack");
    CHECK(latency < 1000);
    CHECK(arrival->event.op() == pb::CHANGE_OP_ADDED);
  }
}

TEST_CASE("a watcher that asks for exits only gets exits, past any number of other changes",
          "[integration][watch]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  const uint64_t before = REQUIRE_VALUE(client->Ping());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("filtered")));
  const Gid process = session->gid();
  // More than one page of the daemon's watch loop of changes it must skip.
  for (uint32_t first = 1; first <= 3000; first += 1000) {
    REQUIRE_OK(session->RegisterThreads(MakeThreads(process, first, 1000, "w", kWatched)));
  }
  const Gid leaving = Gid::Thread(process, 7);
  REQUIRE_OK(session->UnregisterThreads(std::vector<Gid>{leaving}, "done"));

  std::vector<ChangeEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  Status status = client->Watch(
      before,
      [&](const ChangeEvent& event) {
        events.push_back(event);
        return false;  // the first one is enough: it must be the exit
      },
      [&] { return std::chrono::steady_clock::now() > deadline; }, {ChangeOp::kExited});
  CHECK_OK(status);
  REQUIRE(events.size() == 1);
  CHECK(events.front().op == ChangeOp::kExited);
  CHECK(events.front().gid == leaving);
}

}  // namespace
}  // namespace tocl::testing
