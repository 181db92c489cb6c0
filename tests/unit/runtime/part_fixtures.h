// What the tests of the runtime's parts (receive side, progress, long
// messages) share, so that each test's fake says only what it is about.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "buffers/buffer_pool.h"
#include "runtime/epoll_reactor.h"
#include "runtime/progress_engine.h"
#include "subsystem/subsystem.h"
#include "tocl/status.h"

namespace tocl::runtime {

// A network without peers: the parts of the Subsystem interface none of
// the tests looks at. A test's network overrides its poll round (and
// whether the poller may sleep).
class FakeSubsystem : public subsystem::Subsystem {
 public:
  explicit FakeSubsystem(buffers::BufferPool& pool, Network network = Network::kShm)
      : pool_(pool), network_(network) {}

  Network network() const override { return network_; }
  const std::string& address() const override { return address_; }
  buffers::BufferPool& pool() override { return pool_; }
  bool Reaches(Gid, std::string_view) const override { return false; }
  Result<std::unique_ptr<subsystem::Route>> Connect(Gid, std::string_view) override {
    return Status(StatusCode::kUnimplemented, "a fake network has no routes");
  }
  bool PrepareToSleep() override { return true; }
  void FinishSleep() override {}
  void Housekeeping() override {}
  void Close() override {}

 private:
  buffers::BufferPool& pool_;
  const Network network_;
  const std::string address_ = "fake";
};

// A pool of the default nine classes, and a progress engine with nothing
// to flush whose thread is not started: the test's threads poll. A base of
// a test's fixture, so that both outlive what the fixture holds of them.
struct PoolAndPoller {
  PoolAndPoller()
      : budget(size_t{4} << 20),
        pool(Network::kShm, 9, memory, budget),
        reactor(*EpollReactor::Create()),
        progress(*reactor, [] { return false; }) {}

  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
  std::unique_ptr<EpollReactor> reactor;
  ProgressEngine progress;
};

}  // namespace tocl::runtime
