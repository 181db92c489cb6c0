// What the daemon's caller identification rests on (directory/src/service/
// caller.h): a call on a unix connection toclsd accepted has the peer
// "fd:N", and gRPC keeps descriptor N open, as that connection, until the
// call is over, even when the client has died and the call is cancelled.
// If a gRPC upgrade closed N earlier, a new connection could get N while an
// old call's handler reads SO_PEERCRED of it: this test would fail first.
// The listener records when it accepted N before gRPC has it, so a handler
// finds that time (AcceptTimes), by which the caller is pinned on kernels
// without SO_PEERPIDFD.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "daemon_harness.h"
#include "service/accept_times.h"
#include "service/caller.h"
#include "status_assertions.h"
#include "tocl/directory/v1/directory.grpc.pb.h"
#include "unix_listener.h"

namespace tocl::testing {
namespace {

namespace pb = ::tocl::directory::v1;
using std::chrono::seconds;

const std::string kProbe = TOCL_IDENTITY_PROBE_PATH;

// The inode of what descriptor `fd` of this process is now; nullopt when
// it is closed.
std::optional<ino_t> InodeOf(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return std::nullopt;
  return info.st_ino;
}

// Ping blocks until its caller has gone (the call is cancelled), and
// records what its connection's descriptor was at the start and then.
class BlockingPing final : public pb::Directory::Service {
 public:
  explicit BlockingPing(const directory::AcceptTimes& accept_times) : accept_times_(accept_times) {}

  grpc::Status Ping(grpc::ServerContext* context, const pb::PingRequest*,
                    pb::PingResponse*) override {
    const int64_t called_ns = directory::BootTimeNs();
    const std::optional<int> fd = directory::UnixConnectionFd(*context);
    Result<directory::UnixPeer> peer =
        fd ? directory::UnixPeerOf(*fd) : Result<directory::UnixPeer>(NotFound("no fd: peer"));
    const std::optional<int64_t> accepted =
        fd ? accept_times_.AcceptedAt(*fd) : std::optional<int64_t>();
    {
      std::lock_guard lock(mu_);
      fd_ = fd;
      caller_pid_ = peer.ok() ? peer->pid : 0;
      inode_at_start_ = fd ? InodeOf(*fd) : std::nullopt;
      accepted_before_call_ = accepted && *accepted <= called_ns;
      // The fallback of kernels before 6.5, on this kernel too: the probe
      // started before its connection was accepted.
      pinned_ = accepted && peer.ok() &&
                directory::PinProcessStartedBy(peer->pid, *accepted).ok() &&
                directory::PeerProcess(*fd, *peer, accepted).ok();
    }
    started_.store(true);
    const bool cancelled = WaitUntil([&] { return context->IsCancelled(); }, seconds(20));
    std::lock_guard lock(mu_);
    cancelled_ = cancelled;
    inode_when_cancelled_ = fd ? InodeOf(*fd) : std::nullopt;
    finished_.store(true);
    return grpc::Status::OK;
  }

  const directory::AcceptTimes& accept_times_;
  std::atomic<bool> started_{false};
  std::atomic<bool> finished_{false};
  std::mutex mu_;
  std::optional<int> fd_;
  pid_t caller_pid_ = 0;
  std::optional<ino_t> inode_at_start_;
  std::optional<ino_t> inode_when_cancelled_;
  bool cancelled_ = false;
  bool accepted_before_call_ = false;
  bool pinned_ = false;
};

TEST_CASE("gRPC keeps a unix connection's descriptor until its last call ends, client dead or not",
          "[integration][security][identity]") {
  TempDir dir("tocl-unix-peer-");
  const std::string path = dir.File("s.sock");
  directory::AcceptTimes accept_times;
  auto listener = REQUIRE_VALUE(daemon::UnixListener::Listen(path, accept_times));
  BlockingPing service(accept_times);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  listener->Serve(*server);

  auto client = REQUIRE_VALUE(ChildProcess::Spawn({kProbe, "--daemon", "unix:" + path, "ping"}));
  REQUIRE(WaitUntil([&] { return service.started_.load(); }, seconds(20)));
  {
    std::lock_guard lock(service.mu_);
    REQUIRE(service.fd_.has_value());
    CHECK(service.caller_pid_ == client.pid());  // SO_PEERCRED names the probe
    REQUIRE(service.inode_at_start_.has_value());
    CHECK(service.accepted_before_call_);
    CHECK(service.pinned_);
  }
  REQUIRE_VALUE(client.Kill());  // the client dies mid-call
  REQUIRE(WaitUntil([&] { return service.finished_.load(); }, seconds(30)));
  int fd = -1;
  {
    std::lock_guard lock(service.mu_);
    CHECK(service.cancelled_);
    // Still the same connection while the handler ran.
    CHECK(service.inode_when_cancelled_ == service.inode_at_start_);
    fd = *service.fd_;
  }
  // Closed once the call is over (the descriptor then goes, or is another
  // file).
  CHECK(WaitUntil([&] { return InodeOf(fd) != service.inode_at_start_; }, seconds(10)));
  listener->Stop();
  server->Shutdown(std::chrono::system_clock::now() + seconds(1));
}

}  // namespace
}  // namespace tocl::testing
