#include "runtime/epoll_reactor.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/logger.h"
#include "core/posix.h"

namespace tocl::runtime {

namespace {
Status Errno(std::string_view what) {
  return ErrnoStatus(what, errno);
}
}  // namespace

Result<std::unique_ptr<EpollReactor>> EpollReactor::Create() {
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return Errno("epoll_create1");
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    Status status = Errno("eventfd");
    close(epoll_fd);
    return status;
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.ptr = nullptr;  // the wake-up fd
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &event) != 0) {
    Status status = Errno("epoll_ctl add eventfd");
    close(wake_fd);
    close(epoll_fd);
    return status;
  }
  return std::unique_ptr<EpollReactor>(new EpollReactor(epoll_fd, wake_fd));
}

EpollReactor::EpollReactor(int epoll_fd, int wake_fd) : epoll_fd_(epoll_fd), wake_fd_(wake_fd) {}

EpollReactor::~EpollReactor() {
  close(wake_fd_);
  close(epoll_fd_);
}

Status EpollReactor::Add(int fd, uint32_t events, subsystem::FdHandler* handler) {
  epoll_event event{};
  event.events = events;
  event.data.ptr = handler;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) return Errno("epoll_ctl add");
  watched_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status EpollReactor::Modify(int fd, uint32_t events, subsystem::FdHandler* handler) {
  epoll_event event{};
  event.events = events;
  event.data.ptr = handler;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) != 0) return Errno("epoll_ctl mod");
  return Status::Ok();
}

void EpollReactor::Remove(int fd) {
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) == 0) {
    watched_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void EpollReactor::Wake() {
  if (wake_hook_) wake_hook_();
  uint64_t one = 1;
  // A full counter (EAGAIN) already means "wake up".
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

int EpollReactor::Wait(int timeout_ms) {
  epoll_event events[64];
  int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
  if (n < 0) {
    if (errno != EINTR) Log().warn("tocl: epoll_wait: {}", std::strerror(errno));
    return 0;
  }
  for (int i = 0; i < n; ++i) {
    auto* handler = static_cast<subsystem::FdHandler*>(events[i].data.ptr);
    if (handler == nullptr) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
      continue;
    }
    handler->OnReady(events[i].events);
  }
  return n;
}

}  // namespace tocl::runtime
