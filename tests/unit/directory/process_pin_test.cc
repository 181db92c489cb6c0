// Pinning a process by pid (PinProcessStartedBy, caller.h): what toclsd
// does on kernels without SO_PEERPIDFD. Real processes: forked children of
// the test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "service/accept_times.h"
#include "service/caller.h"
#include "service/process_handle.h"

namespace tocl::directory {
namespace {

// A forked child that waits for a signal; killed and reaped when it goes.
class PausedChild {
 public:
  PausedChild() : pid_(::fork()) {
    if (pid_ == 0) {
      for (;;) ::pause();
    }
    REQUIRE(pid_ > 0);
  }
  ~PausedChild() { Reap(); }
  PausedChild(const PausedChild&) = delete;
  PausedChild& operator=(const PausedChild&) = delete;

  pid_t pid() const { return pid_; }
  void Reap() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

TEST_CASE("a process that started after the connection was accepted is refused", "[pin]") {
  // A tick before now: the child, started after this, cannot share its tick.
  const int64_t accepted = BootTimeNs() - NsPerTick();
  PausedChild child;
  const Result<ProcessHandle> pinned = PinProcessStartedBy(child.pid(), accepted);
  INFO(pinned.status().ToString());
  CHECK(pinned.status().code() == StatusCode::kPermissionDenied);
  CHECK_THAT(pinned.status().message(), Catch::Contains(std::to_string(child.pid())) &&
                                            Catch::Contains("after its connection was accepted"));
}

TEST_CASE("a live process that started before the connection was accepted is pinned", "[pin]") {
  PausedChild child;
  // fork returned: the child's start time is set.
  const int64_t accepted = BootTimeNs();
  const Result<ProcessHandle> pinned = PinProcessStartedBy(child.pid(), accepted);
  REQUIRE(pinned.status().message() == "");
  CHECK(pinned->pid() == child.pid());
  CHECK(pinned->CheckAlive().ok());
  // This test process is older still.
  CHECK(PinProcessStartedBy(::getpid(), BootTimeNs()).ok());

  // The pidfd is of that very process: once it is gone, so is the handle's.
  child.Reap();
  CHECK(pinned->CheckAlive().code() == StatusCode::kFailedPrecondition);
  CHECK(pinned->StartTicks().status().code() == StatusCode::kFailedPrecondition);
  CHECK(pinned->Signal(SIGTERM).code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("a pid with no process behind it is not pinned", "[pin]") {
  pid_t gone = 0;
  {
    PausedChild child;
    gone = child.pid();
  }
  // Reaped; its pid is free (unless reused this instant: then by a process
  // younger than the accept time below, refused as well).
  const Result<ProcessHandle> pinned = PinProcessStartedBy(gone, BootTimeNs() - NsPerTick());
  INFO(pinned.status().ToString());
  CHECK_FALSE(pinned.ok());
  CHECK(PinProcessStartedBy(0, BootTimeNs()).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a held process reads its own uids, namespace pids and start time", "[pin]") {
  PausedChild child;
  const Result<ProcessHandle> pinned = ProcessHandle::Open(child.pid());
  REQUIRE(pinned.ok());
  const Result<ProcessUids> uids = pinned->Uids();
  REQUIRE(uids.ok());
  CHECK(uids->real == ::getuid());
  CHECK(uids->effective == ::geteuid());
  const Result<std::vector<pid_t>> pids = pinned->NamespacePids();
  REQUIRE(pids.ok());
  CHECK(pids->back() == child.pid());  // the same pid namespace as this test
  const Result<uint64_t> child_started = pinned->StartTicks();
  REQUIRE(child_started.ok());
  const Result<ProcessHandle> self = ProcessHandle::Open(::getpid());
  REQUIRE(self.ok());
  CHECK(self->StartTicks().value_or(UINT64_MAX) <= *child_started);  // the parent is older
}

}  // namespace
}  // namespace tocl::directory
