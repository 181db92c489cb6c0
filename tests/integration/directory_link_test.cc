// The runtime's DirectoryLink against a real daemon: registrations and
// unregistrations that an earlier attempt already got through (its answer
// lost with a daemon that died) must count as done, not block the queue.
#include "runtime/directory_link.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "daemon_harness.h"
#include "status_assertions.h"
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

EntityState StateOf(DirectoryClient& client, Gid gid) {
  auto entity = client.Lookup(gid);
  REQUIRE_OK(entity.status());
  return entity->state;
}

// A daemon, a client of it, and a DirectoryLink enrolled as "registrar"
// (no statistics).
struct Linked {
  Linked() {
    REQUIRE_OK(daemon.Start());
    client = REQUIRE_VALUE(daemon.Connect());
    link = REQUIRE_VALUE(runtime::DirectoryLink::Start(daemon.address(), ProcessNamed("registrar"),
                                                       std::chrono::milliseconds(0), {}));
  }
  Daemon daemon;
  std::unique_ptr<DirectoryClient> client;
  std::unique_ptr<runtime::DirectoryLink> link;
};

// The soak found the registrar re-sending a batch the daemon had taken (its
// unregistrations failed in the same round): the daemon refused it as
// already there, for good, and with it every thread queued behind. Here the
// repeats are made on purpose: without the fallback both Flushes time out.
TEST_CASE("a DirectoryLink counts a thread already registered, or already gone, as done",
          "[integration][runtime]") {
  Linked linked;
  DirectoryClient* client = linked.client.get();
  runtime::DirectoryLink* link = linked.link.get();
  const Gid first = Gid::Thread(link->process(), 1);
  const Gid second = Gid::Thread(link->process(), 2);
  const Gid never = Gid::Thread(link->process(), 3);

  link->QueueRegister({first, "first", {}});
  REQUIRE_OK(link->Flush(seconds(10)));
  CHECK(StateOf(*client, first) == EntityState::kRunning);

  // `first` again (as after a lost answer), then a new thread behind it.
  link->QueueRegister({first, "first", {}});
  link->QueueRegister({second, "second", {}});
  REQUIRE_OK(link->Flush(seconds(10)));
  CHECK(StateOf(*client, second) == EntityState::kRunning);

  // A thread the daemon never had (as if already unregistered), then one it has.
  link->QueueUnregister(never);
  link->QueueUnregister(first);
  REQUIRE_OK(link->Flush(seconds(10)));
  CHECK(StateOf(*client, first) == EntityState::kExited);
  CHECK(StateOf(*client, second) == EntityState::kRunning);
  CHECK(client->Lookup(never).status().code() == StatusCode::kNotFound);
  CHECK_OK(link->Close());
}

Attributes ManyAttributes(size_t count) {
  Attributes attributes;
  for (size_t i = 0; i < count; ++i) attributes["a" + std::to_string(i)] = "v";
  return attributes;
}

// A thread the daemon refuses (EnrollThread checks the same limits first,
// but the daemon has the last word) is left out with an error; it must not
// hold back the threads behind it, as it did (retried every second for
// ever, every later registration queued behind it).
TEST_CASE("a DirectoryLink leaves out a thread the daemon refuses and registers the others",
          "[integration][runtime]") {
  Linked linked;
  DirectoryClient* client = linked.client.get();
  runtime::DirectoryLink* link = linked.link.get();
  const Gid refused = Gid::Thread(link->process(), 1);
  const Gid behind = Gid::Thread(link->process(), 2);
  link->QueueRegister({refused, "too-many", ManyAttributes(kMaxAttributesPerEntity + 1)});
  link->QueueRegister({behind, "fine", {{"role", "r"}}});
  REQUIRE_OK(link->Flush(seconds(10)));
  CHECK(StateOf(*client, behind) == EntityState::kRunning);
  CHECK(client->Lookup(refused).status().code() == StatusCode::kNotFound);
  CHECK_OK(link->Close());
}

TEST_CASE("EnrollThread refuses more attributes than an entity may have, before the daemon does",
          "[integration][runtime]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options;
  options.daemon_address = daemon.address();
  options.name = "attributes";
  options.networks = "shm";
  auto runtime = REQUIRE_VALUE(Runtime::Start(std::move(options)));
  auto too_many = runtime->EnrollThread("t", ManyAttributes(kMaxAttributesPerEntity + 1));
  INFO(too_many.status().ToString());
  CHECK(too_many.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(too_many.status().message(), Catch::Contains("65 attributes (at most 64)"));
  // At the limit it is registered whole.
  const Gid at_limit =
      REQUIRE_VALUE(runtime->EnrollThread("t", ManyAttributes(kMaxAttributesPerEntity)));
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil(
      [&] {
        auto entity = client->Lookup(at_limit);
        return entity.ok() && entity->attributes.size() == kMaxAttributesPerEntity;
      },
      seconds(10)));
}

}  // namespace
}  // namespace tocl::testing
