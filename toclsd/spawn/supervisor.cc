#include "spawn/supervisor.h"

#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace tocl::daemon::spawn {

directory::ExitStatus ExitStatusOf(int wait_status) {
  directory::ExitStatus status;
  if (WIFEXITED(wait_status)) status.code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) status.signal = WTERMSIG(wait_status);
  return status;
}

std::string DescribeExit(const directory::ExitStatus& status) {
  if (status.code) return fmt::format("exited with status {}", *status.code);
  if (status.signal) {
    const char* name = ::sigabbrev_np(*status.signal);
    return name != nullptr ? fmt::format("killed by signal {} (SIG{})", *status.signal, name)
                           : fmt::format("killed by signal {}", *status.signal);
  }
  return "ended (status unknown)";
}

Result<std::unique_ptr<Supervisor>> Supervisor::Start(OnReaped on_reaped) {
  Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoStatus("eventfd for the child supervisor", errno);
  std::unique_ptr<Supervisor> supervisor(new Supervisor(std::move(wake), std::move(on_reaped)));
  Supervisor* raw = supervisor.get();
  supervisor->thread_ = std::thread([raw] { raw->Loop(); });
  return supervisor;
}

Supervisor::Supervisor(Fd wake, OnReaped on_reaped)
    : wake_(std::move(wake)), on_reaped_(std::move(on_reaped)) {}

Supervisor::~Supervisor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
}

void Supervisor::Wake() {
  const uint64_t one = 1;
  // A full counter (never, in practice) still leaves the fd readable.
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void Supervisor::Watch(pid_t pid, Fd pidfd) {
  {
    std::lock_guard lock(mu_);
    added_.emplace_back(pid, std::move(pidfd));
  }
  Wake();
}

void Supervisor::Loop() {
  std::vector<std::pair<pid_t, Fd>> children;  // owned by this thread
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign(1, pollfd{wake_.get(), POLLIN, 0});
    for (const auto& [pid, pidfd] : children) fds.push_back(pollfd{pidfd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("child supervisor: poll: {}; children are no longer reaped",
                       std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      (void)!::read(wake_.get(), &count, sizeof(count));
      std::lock_guard lock(mu_);
      if (stopping_) return;
      for (auto& added : added_) children.push_back(std::move(added));
      added_.clear();
    }
    // fds[i + 1] is children[i] for the children polled this round; those
    // just added come after them and are looked at next round.
    std::vector<std::pair<pid_t, Fd>> running;
    running.reserve(children.size());
    for (size_t i = 0; i < children.size(); ++i) {
      auto& [pid, pidfd] = children[i];
      if (i + 1 < fds.size() && fds[i + 1].revents == 0) {
        running.push_back(std::move(children[i]));
        continue;
      }
      int wait_status = 0;
      const pid_t reaped = ::waitpid(pid, &wait_status, WNOHANG);
      if (reaped == 0) {
        running.push_back(std::move(children[i]));  // not exited yet (a new child)
        continue;
      }
      if (reaped < 0) {
        spdlog::error("child supervisor: waitpid({}): {}", pid, std::strerror(errno));
        continue;
      }
      on_reaped_(pid, wait_status);
    }
    children = std::move(running);
  }
}

}  // namespace tocl::daemon::spawn
