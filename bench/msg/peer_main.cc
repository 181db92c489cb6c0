#include "peer_main.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "raw_shm.h"
#include "raw_tcp.h"
#include "timing.h"
#include "tocl_peer.h"

namespace tocl::bench::msg {
namespace {

double CpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void CopyText(char* target, size_t capacity, std::string_view text) {
  size_t n = std::min(capacity - 1, text.size());
  std::memcpy(target, text.data(), n);
  target[n] = '\0';
}

void PutGids(const std::vector<uint64_t>& gids, Reply& reply) {
  reply.gid_count = static_cast<uint32_t>(std::min<size_t>(gids.size(), kMaxPairs));
  std::copy_n(gids.begin(), reply.gid_count, reply.gids);
}

class Peer {
 public:
  Peer(Role role, SharedLayout& shm, int tcp_fd) : role_(role), shm_(shm), tcp_fd_(tcp_fd) {}

  Status Handle(const Command& command, Reply& reply) {
    switch (command.op) {
      case Op::kStartRuntime:
        return StartRuntime(command, reply);
      case Op::kEnroll: {
        TOCL_RETURN_IF_ERROR(NeedTocl());
        TOCL_ASSIGN_OR_RETURN(std::vector<uint64_t> gids, tocl_->Enroll(command.count));
        PutGids(gids, reply);
        return Status::Ok();
      }
      case Op::kSetPeerThreads:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        tocl_->SetPeerThreads(
            std::vector<uint64_t>(command.gids, command.gids + command.gid_count));
        return Status::Ok();
      case Op::kRun:
        return Run(command, reply);
      case Op::kStartIdleThreads:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        return tocl_->StartIdleThreads(command.count);
      case Op::kStopIdleThreads:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        return tocl_->StopIdleThreads();
      case Op::kIdleWindow: {
        double cpu_before = CpuSeconds();
        auto start = Clock::now();
        std::this_thread::sleep_for(std::chrono::nanoseconds(command.measure_ns));
        double wall = std::chrono::duration<double>(Clock::now() - start).count();
        reply.cpu_percent = 100.0 * (CpuSeconds() - cpu_before) / wall;
        reply.seconds = wall;
        return Status::Ok();
      }
      case Op::kExit:
        if (tocl_) {
          Status shut = tocl_->Shutdown();
          tocl_.reset();
          return shut;
        }
        return Status::Ok();
    }
    return InvalidArgument("unknown command");
  }

 private:
  Status NeedTocl() const {
    if (!tocl_) return FailedPrecondition("the tocl runtime was not started in this peer");
    return Status::Ok();
  }

  Status StartRuntime(const Command& command, Reply& reply) {
    if (tocl_) return FailedPrecondition("the tocl runtime is already started");
    ToclPeerOptions options;
    options.daemon_address = command.text;
    options.subsystems = command.subsystems;
    options.via_provider = command.via_provider;
    options.name =
        fmt::format("bench-{}{}-{}", options.subsystems,
                    options.via_provider.empty() ? "" : fmt::format("-{}", options.via_provider),
                    role_ == Role::kInitiator ? "initiator" : "responder");
    options.spin = std::chrono::microseconds(command.spin_us);
    TOCL_ASSIGN_OR_RETURN(tocl_, StartToclPeer(options));
    TOCL_ASSIGN_OR_RETURN(std::vector<uint64_t> gids, tocl_->Enroll(1));
    PutGids(gids, reply);
    return Status::Ok();
  }

  Status Run(const Command& command, Reply& reply) {
    const RunSpec spec = RunSpec::From(command);
    // Long messages (memcpy, tocl streams and the packed cases only) may be
    // larger than what the raw rings carry.
    const bool long_ok = command.contender == Contender::kMemcpy ||
                         command.contender == Contender::kToclStream ||
                         command.contender == Contender::kToclPackedPingPong ||
                         command.contender == Contender::kToclPrepackedPingPong ||
                         command.contender == Contender::kToclPrepackedIntoPingPong;
    const size_t max = long_ok ? kMaxLongPayload : kMaxPayload;
    if (spec.size < 8 || spec.size > max) {
      return InvalidArgument(fmt::format("message size {} is outside 8 .. {}", spec.size, max));
    }
    LatencyResult latency;
    StreamResult stream;
    Status status;
    switch (command.contender) {
      case Contender::kRawShmPingPong:
        status = RawShmPingPong(role_, shm_, spec, &latency);
        break;
      case Contender::kRawTcpPingPong:
        status = RawTcpPingPong(role_, tcp_fd_, false, spec, &latency);
        break;
      case Contender::kRawTcpPollPingPong:
        status = RawTcpPingPong(role_, tcp_fd_, true, spec, &latency);
        break;
      case Contender::kRawFutexPingPong:
        status = RawFutexPingPong(role_, shm_, spec, &latency);
        break;
      case Contender::kMemcpy:
        status = MemcpyStream(role_, spec, &stream);
        break;
      case Contender::kRawShmStream:
        status = RawShmStream(role_, shm_, spec, &stream);
        break;
      case Contender::kRawTcpStream:
        status = RawTcpStream(role_, tcp_fd_, spec, &stream);
        break;
      case Contender::kToclPingPong:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->PingPong(role_, spec, &latency);
        break;
      case Contender::kToclIrecvPingPong:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->PingPong(role_, spec, &latency, ToclPeer::Way::kIrecv);
        break;
      case Contender::kToclHandlerPingPong:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->PingPong(role_, spec, &latency, ToclPeer::Way::kHandler);
        break;
      case Contender::kToclPackedPingPong:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->PackedPingPong(role_, spec, &latency, ToclPeer::Packing::kPacked);
        break;
      case Contender::kToclPrepackedPingPong:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->PackedPingPong(role_, spec, &latency, ToclPeer::Packing::kPrepacked);
        break;
      case Contender::kToclPrepackedIntoPingPong:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->PackedPingPong(role_, spec, &latency, ToclPeer::Packing::kPrepackedInto);
        break;
      case Contender::kToclStream:
        TOCL_RETURN_IF_ERROR(NeedTocl());
        status = tocl_->Stream(role_, spec, &stream);
        break;
    }
    reply.p50_ns = latency.p50_ns;
    reply.min_ns = latency.min_ns;
    reply.samples = latency.samples;
    reply.per_batch = latency.per_batch;
    reply.messages = stream.messages;
    reply.seconds = stream.seconds;
    return status;
  }

  Role role_;
  SharedLayout& shm_;
  int tcp_fd_;
  std::unique_ptr<ToclPeer> tocl_;
};

}  // namespace

void RunPeer(Role role, int control_fd, SharedLayout& shm, int tcp_fd) {
  {
    Peer peer(role, shm, tcp_fd);
    for (;;) {
      Command command;
      ssize_t n = ::recv(control_fd, &command, sizeof command, 0);
      if (n != static_cast<ssize_t>(sizeof command)) break;  // the coordinator is gone
      Reply reply;
      Status status = peer.Handle(command, reply);
      reply.code = static_cast<int32_t>(status.code());
      CopyText(reply.message, sizeof reply.message, status.message());
      if (::send(control_fd, &reply, sizeof reply, MSG_NOSIGNAL) != sizeof reply) break;
      if (command.op == Op::kExit) break;
    }
  }  // the runtime, if any, shuts down here
  std::fflush(nullptr);
  ::_exit(0);
}

}  // namespace tocl::bench::msg
