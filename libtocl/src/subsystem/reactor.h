// The runtime's readiness loop (one epoll set per process) as subsystems
// see it: they add the fds they want to be woken for, with a handler.
//
// Threading: handlers run on the polling thread (one at a time, the holder
// of the runtime's poll token). Add/Modify/Remove may be called from any
// thread.
#pragma once

#include <cstdint>

#include "tocl/status.h"

namespace tocl::subsystem {

class FdHandler {
 public:
  virtual ~FdHandler() = default;
  // `events` are EPOLLIN / EPOLLOUT / EPOLLERR / EPOLLHUP bits.
  virtual void OnReady(uint32_t events) = 0;
};

class Reactor {
 public:
  virtual ~Reactor() = default;
  virtual Status Add(int fd, uint32_t events, FdHandler* handler) = 0;
  virtual Status Modify(int fd, uint32_t events, FdHandler* handler) = 0;
  virtual void Remove(int fd) = 0;
  // Wakes the polling thread if it sleeps (a subsystem has work for it).
  virtual void Wake() = 0;
};

}  // namespace tocl::subsystem
