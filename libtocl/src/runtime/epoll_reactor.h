// The process's one epoll set: the fds of every subsystem plus an eventfd
// to wake the sleeping poller from inside the process.
//
// Threading: Add/Modify/Remove/Wake from any thread; Wait from the polling
// thread only (handlers run there).
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "subsystem/reactor.h"
#include "tocl/status.h"

namespace tocl::runtime {

class EpollReactor final : public subsystem::Reactor {
 public:
  static Result<std::unique_ptr<EpollReactor>> Create();
  ~EpollReactor() override;

  Status Add(int fd, uint32_t events, subsystem::FdHandler* handler) override;
  Status Modify(int fd, uint32_t events, subsystem::FdHandler* handler) override;
  void Remove(int fd) override;
  void Wake() override;
  // Also called by Wake(): for a poller that sleeps elsewhere than in
  // epoll (Subsystem::SleepAlone). Set before the poller starts.
  void SetWakeHook(std::function<void()> hook) { wake_hook_ = std::move(hook); }

  // Waits up to `timeout_ms` (0: just look, -1: forever) and runs the
  // handlers of ready fds. Returns the number of fds handled.
  int Wait(int timeout_ms);

  // Number of fds registered besides the wake-up eventfd.
  int watched() const { return watched_.load(std::memory_order_relaxed); }

 private:
  EpollReactor(int epoll_fd, int wake_fd);
  int epoll_fd_;
  int wake_fd_;
  std::atomic<int> watched_{0};
  std::function<void()> wake_hook_;
};

}  // namespace tocl::runtime
