// The runtime's DirectoryLink against a real daemon: registrations and
// unregistrations that an earlier attempt already got through (its answer
// lost with a daemon that died) must count as done, not block the queue.
#include "runtime/directory_link.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "daemon_harness.h"
#include "status_assertions.h"
#include "tocl/directory_client.h"

namespace tocl::testing {
namespace {

using std::chrono::seconds;

EntityState StateOf(DirectoryClient& client, Gid gid) {
  auto entity = client.Lookup(gid);
  REQUIRE_OK(entity.status());
  return entity->state;
}

// The soak found the registrar re-sending a batch the daemon had taken (its
// unregistrations failed in the same round): the daemon refused it as
// already there, for good, and with it every thread queued behind. Here the
// repeats are made on purpose: without the fallback both Flushes time out.
TEST_CASE("a DirectoryLink counts a thread already registered, or already gone, as done",
          "[integration][runtime]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto link = REQUIRE_VALUE(runtime::DirectoryLink::Start(
      daemon.address(), ProcessNamed("registrar"), std::chrono::milliseconds(0), {}));
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

}  // namespace
}  // namespace tocl::testing
