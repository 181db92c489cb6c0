#include "notify/exit_observers.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tocl/exit_notice.h"

namespace tocl::bench {
namespace {

using Clock = Sightings::Clock;

constexpr Tag kNoticeTag = 16;
// Long enough that the receiver is asleep in RecvFor when a notice comes.
constexpr auto kReceiveWait = std::chrono::seconds(60);

}  // namespace

Result<std::unique_ptr<NoticeWatcher>> NoticeWatcher::Start(const std::string& daemon_address,
                                                            const std::string& networks) {
  std::unique_ptr<NoticeWatcher> watcher(new NoticeWatcher());
  RuntimeOptions options;
  options.daemon_address = daemon_address;
  options.name = "notify-watcher";
  options.networks = networks;
  TOCL_ASSIGN_OR_RETURN(watcher->runtime_, Runtime::Start(options));
  TOCL_ASSIGN_OR_RETURN(watcher->caller_, watcher->runtime_->EnrollThread("caller"));
  TOCL_ASSIGN_OR_RETURN(watcher->receiver_, watcher->runtime_->EnrollThread("receiver"));
  watcher->receiving_ = std::thread([w = watcher.get()] { w->ReceiveLoop(); });
  return watcher;
}

NoticeWatcher::~NoticeWatcher() {
  if (receiving_.joinable()) {
    // Anything that is not a notice ends the loop.
    const Status sent =
        runtime_->Send(caller_, receiver_, kNoticeTag, std::span<const std::byte>());
    if (!sent.ok()) fmt::print(stderr, "notify: stopping the receiver: {}\n", sent.ToString());
    receiving_.join();
  }
  if (runtime_) (void)runtime_->Shutdown();
}

void NoticeWatcher::ReceiveLoop() {
  for (;;) {
    Result<Buffer> message = runtime_->RecvFor(receiver_, kReceiveWait, Gid(), kNoticeTag);
    const auto at = Clock::now();
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kDeadlineExceeded) continue;
      fmt::print(stderr, "notify: receiver: {}\n", message.status().ToString());
      return;
    }
    Result<ExitNotice> notice = ParseExitNotice(*message);
    if (!notice.ok()) return;
    messages_.Seen(notice->gid, at);
  }
}

Status NoticeWatcher::Arm(Gid target, bool callback_first) {
  auto by_callback = [&]() -> Status {
    return runtime_
        ->Notify(target,
                 [this](const ExitNotice& notice) { callbacks_.Seen(notice.gid, Clock::now()); })
        .status();
  };
  auto by_message = [&]() -> Status {
    return runtime_->Notify(receiver_, target, kNoticeTag).status();
  };
  TOCL_RETURN_IF_ERROR(callback_first ? by_callback() : by_message());
  return callback_first ? by_message() : by_callback();
}

Result<std::unique_ptr<DirectoryWatch>> DirectoryWatch::Start(const std::string& daemon_address) {
  std::unique_ptr<DirectoryWatch> watch(new DirectoryWatch());
  TOCL_ASSIGN_OR_RETURN(watch->client_, DirectoryClient::Connect(daemon_address));
  TOCL_ASSIGN_OR_RETURN(uint64_t head, watch->client_->Ping());
  watch->thread_ = std::thread([w = watch.get(), head, daemon_address] {
    Status status = w->client_->Watch(
        head,
        [w](const ChangeEvent& event) {
          const auto now = Clock::now();
          w->exited_.Seen(event.gid, now);
          // Same machine, same wall clock as the daemon's.
          const auto since_marked = std::chrono::system_clock::now() - event.entity.exited_at;
          w->recorded_.Seen(event.gid,
                            now - std::chrono::duration_cast<Clock::duration>(since_marked));
          return true;
        },
        [w] { return w->stop_.load(); }, {ChangeOp::kExited});
    if (!status.ok()) {
      fmt::print(stderr, "notify: watch on {}: {}\n", daemon_address, status.ToString());
    }
  });
  return watch;
}

DirectoryWatch::~DirectoryWatch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

Result<std::unique_ptr<PidfdWait>> PidfdWait::Start(pid_t pid, std::chrono::milliseconds timeout) {
  std::unique_ptr<PidfdWait> wait(new PidfdWait());
  wait->pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (wait->pidfd_ < 0) {
    return Internal(fmt::format("pidfd_open({}): {}", pid, std::strerror(errno)));
  }
  wait->thread_ = std::thread([w = wait.get(), timeout] {
    pollfd fd{.fd = w->pidfd_, .events = POLLIN, .revents = 0};
    int ready = 0;
    do {
      ready = ::poll(&fd, 1, static_cast<int>(timeout.count()));
    } while (ready < 0 && errno == EINTR);
    if (ready > 0) w->seen_ = Clock::now();
  });
  return wait;
}

PidfdWait::~PidfdWait() {
  if (thread_.joinable()) thread_.join();
  if (pidfd_ >= 0) ::close(pidfd_);
}

Result<Clock::time_point> PidfdWait::Join() {
  if (thread_.joinable()) thread_.join();
  if (!seen_) return DeadlineExceeded("the process did not end (pidfd)");
  return *seen_;
}

}  // namespace tocl::bench
