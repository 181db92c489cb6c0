#include "peer_pair.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "peer_main.h"
#include "raw_tcp.h"
#include "shared_region.h"

namespace tocl::bench::msg {
namespace {

using Clock = std::chrono::steady_clock;

Status Errno(std::string_view operation) {
  return Internal(fmt::format("{}: {}", operation, std::strerror(errno)));
}

// Closes every descriptor above stderr but `keep` (a fork's inheritance).
void CloseAllExcept(std::initializer_list<int> keep) {
  std::vector<int> open(keep);
  std::sort(open.begin(), open.end());
  unsigned first = 3;
  for (int fd : open) {
    if (fd < 3) continue;
    if (static_cast<unsigned>(fd) > first) ::close_range(first, static_cast<unsigned>(fd) - 1, 0);
    first = static_cast<unsigned>(fd) + 1;
  }
  ::close_range(first, ~0u, 0);
}

// How a peer whose control socket closed ended (it is reaped if it has).
std::string Ended(pid_t& pid) {
  int wait_status = 0;
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid, &wait_status, WNOHANG) == pid) {
      pid = -1;
      if (WIFSIGNALED(wait_status)) {
        return fmt::format("was killed by signal {} ({})", WTERMSIG(wait_status),
                           strsignal(WTERMSIG(wait_status)));
      }
      return fmt::format("exited with status {}", WEXITSTATUS(wait_status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "closed its control socket";
}

}  // namespace

Result<std::unique_ptr<PeerPair>> PeerPair::Fork(std::string name) {
  TOCL_ASSIGN_OR_RETURN(SharedRegion region, SharedRegion::Create());
  TOCL_ASSIGN_OR_RETURN(auto tcp, ConnectedLoopbackPair());
  Fd tcp_ends[2] = {std::move(tcp.first), std::move(tcp.second)};
  Fd child_ends[2];
  std::unique_ptr<PeerPair> pair(new PeerPair(std::move(name)));
  for (int i = 0; i < 2; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
      return Errno("socketpair");
    }
    pair->peers_[i].control = Fd(sv[0]);
    child_ends[i] = Fd(sv[1]);
  }
  const pid_t parent = ::getpid();
  std::fflush(nullptr);  // nothing buffered is written twice
  for (int i = 0; i < 2; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) return Errno("fork");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      // Only this peer's own ends stay open (and no end of another pair's).
      CloseAllExcept({child_ends[i].get(), tcp_ends[i].get()});
      RunPeer(i == 0 ? Role::kInitiator : Role::kResponder, child_ends[i].get(), region.layout(),
              tcp_ends[i].get());
    }
    pair->peers_[i].pid = pid;
  }
  return pair;
}

PeerPair::~PeerPair() {
  Status exited = Exit();
  if (!exited.ok()) fmt::print(stderr, "[msg] {}\n", exited.ToString());
}

Status PeerPair::Call(const Command& to_initiator, const Command& to_responder, Reply* initiator,
                      Reply* responder, std::chrono::milliseconds timeout) {
  const Command* commands[2] = {&to_initiator, &to_responder};
  Reply* replies[2] = {initiator, responder};
  Reply ignored[2];
  for (int i = 0; i < 2; ++i) {
    if (replies[i] == nullptr) replies[i] = &ignored[i];
    if (peers_[i].pid < 0) return FailedPrecondition(fmt::format("{}: peers are gone", name_));
  }
  for (int i = 0; i < 2; ++i) {
    if (::send(peers_[i].control.get(), commands[i], sizeof(Command), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sizeof(Command))) {
      Status failed = Errno(fmt::format("{}: send a command to the {}", name_, RoleName(i)));
      Kill();
      return failed;
    }
  }
  auto limit = Clock::now() + timeout;
  Status first;
  for (int i = 0; i < 2; ++i) {
    pollfd waiting{peers_[i].control.get(), POLLIN, 0};
    int ready = 0;
    do {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - Clock::now());
      ready = ::poll(&waiting, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
      Kill();
      return DeadlineExceeded(fmt::format("{}: the {} did not answer within {} ms", name_,
                                          RoleName(i), timeout.count()));
    }
    ssize_t n = ::recv(peers_[i].control.get(), replies[i], sizeof(Reply), 0);
    if (n != static_cast<ssize_t>(sizeof(Reply))) {
      std::string how = Ended(peers_[i].pid);
      Kill();
      return Internal(fmt::format("{}: the {} {} before it answered", name_, RoleName(i), how));
    }
    if (replies[i]->code != 0 && first.ok()) {
      first = Status(static_cast<StatusCode>(replies[i]->code),
                     fmt::format("{} {}: {}", name_, RoleName(i), replies[i]->message));
    }
  }
  return first;
}

Status PeerPair::Exit(std::chrono::milliseconds deadline) {
  if (peers_[0].pid < 0 && peers_[1].pid < 0) return Status::Ok();
  Command exit;
  exit.op = Op::kExit;
  Status said = Call(exit, nullptr, nullptr, deadline);
  auto limit = Clock::now() + deadline;
  for (Peer& peer : peers_) {
    while (peer.pid > 0) {
      int wait_status = 0;
      pid_t reaped = ::waitpid(peer.pid, &wait_status, WNOHANG);
      if (reaped == peer.pid || (reaped < 0 && errno == ECHILD)) {
        peer.pid = -1;
      } else if (Clock::now() > limit) {
        Kill();
        return DeadlineExceeded(fmt::format("{}: a peer did not exit; killed", name_));
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    peer.control.Reset();
  }
  return said;
}

void PeerPair::Kill() {
  for (Peer& peer : peers_) {
    if (peer.pid > 0) {
      ::kill(peer.pid, SIGKILL);
      ::waitpid(peer.pid, nullptr, 0);
      peer.pid = -1;
    }
    peer.control.Reset();
  }
}

}  // namespace tocl::bench::msg
