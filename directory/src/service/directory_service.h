// The gRPC service tocl.directory.v1.Directory over a Store.
//
// Synchronous gRPC: each call runs on a gRPC server thread; an enroll stream
// holds one thread for the life of its process (acceptable for the hundreds
// of processes a host runs; the callback API is the upgrade path).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

#include "service/accept_times.h"
#include "service/caller.h"
#include "service/daemon_stubs.h"
#include "service/process_control.h"
#include "service/session_registry.h"
#include "store/store.h"
#include "tocl/directory/v1/directory.grpc.pb.h"

namespace tocl::directory {

struct DirectoryServiceOptions {
  // The cluster's data-plane secret (32 raw bytes, from the daemon's
  // credentials), handed to every process in its Enrolled message; empty
  // when the daemon has no credentials.
  std::string data_plane_secret = {};
  // How forwarded calls reach other daemons (plaintext or mutual TLS).
  DaemonChannels channels = {};
  // The group whose members may signal every process of this host (and
  // read every log), like root (caller.h).
  std::optional<gid_t> admin_group = std::nullopt;
  // Where the daemon's TCP listener is, for telling plaintext TCP peers
  // (caller.h); the default: no TCP listener.
  LoopbackPeers loopback = {};
  // When toclsd accepted each unix connection (not owned; outlives the
  // service): how an enrolling process is pinned on a kernel without
  // SO_PEERPIDFD (PeerProcess). Null: no accept times, such enrollments
  // are refused there.
  const AcceptTimes* accept_times = nullptr;
};

class DirectoryService final : public pb::Directory::Service {
 public:
  // `control` starts and supervises this host's processes (not owned; it
  // outlives the service); nullptr: this daemon does not spawn (the spawn,
  // kill and log calls for its host answer UNIMPLEMENTED).
  explicit DirectoryService(Store& store, ProcessControl* control = nullptr,
                            DirectoryServiceOptions options = {})
      : store_(store),
        control_(control),
        data_plane_secret_(std::move(options.data_plane_secret)),
        accept_times_(options.accept_times),
        callers_(options.admin_group, std::move(options.loopback)),
        daemons_(std::move(options.channels)) {}

  // From now on streams that end do not mark their processes exited: the
  // daemon is stopping, and the processes re-enroll when it is back.
  void BeginShutdown();
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }

  grpc::Status EnrollProcess(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<pb::EnrollResponse, pb::EnrollRequest>* stream) override;
  grpc::Status RegisterThreads(grpc::ServerContext* context,
                               const pb::RegisterThreadsRequest* request,
                               pb::WriteResponse* response) override;
  grpc::Status UnregisterThreads(grpc::ServerContext* context,
                                 const pb::UnregisterThreadsRequest* request,
                                 pb::WriteResponse* response) override;
  grpc::Status PublishEndpoint(grpc::ServerContext* context,
                               const pb::PublishEndpointRequest* request,
                               pb::WriteResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context, const pb::LookupRequest* request,
                      pb::LookupResponse* response) override;
  grpc::Status Query(grpc::ServerContext* context, const pb::QueryRequest* request,
                     pb::QueryResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context, const pb::WatchRequest* request,
                     grpc::ServerWriter<pb::ChangeEvent>* writer) override;
  grpc::Status Ping(grpc::ServerContext* context, const pb::PingRequest* request,
                    pb::PingResponse* response) override;
  grpc::Status GetPoolStats(grpc::ServerContext* context, const pb::GetPoolStatsRequest* request,
                            pb::GetPoolStatsResponse* response) override;
  grpc::Status GetNetworkStats(grpc::ServerContext* context,
                               const pb::GetNetworkStatsRequest* request,
                               pb::GetNetworkStatsResponse* response) override;
  grpc::Status SpawnProcess(grpc::ServerContext* context, const pb::SpawnProcessRequest* request,
                            pb::SpawnProcessResponse* response) override;
  grpc::Status Kill(grpc::ServerContext* context, const pb::KillRequest* request,
                    pb::KillResponse* response) override;
  grpc::Status ReadLog(grpc::ServerContext* context, const pb::ReadLogRequest* request,
                       pb::ReadLogResponse* response) override;

 private:
  // The verified caller of a spawn, kill or log call (caller.h), or
  // PermissionDenied (logged) naming `what` and why.
  Result<Caller> IdentifyCaller(const grpc::ServerContext& context, std::string_view what) const;
  // An enrolling process as the kernel names it: on the unix socket its
  // os_pid must be the caller's, as the kernel gives it (SO_PEERCRED) or
  // as the caller sees it in its own pid namespace (the last NSpid), and a
  // spawned child's the pid it was started as; the process comes back held
  // by a pidfd, with its pid in the daemon's namespace. Over TCP nothing is
  // verified (no process, the pid as claimed).
  struct VerifiedEnrollment {
    std::optional<ProcessHandle> process = std::nullopt;
    int64_t os_pid = 0;  // what the directory records
  };
  Result<VerifiedEnrollment> VerifyEnrollingCaller(const grpc::ServerContext& context,
                                                   const pb::EnrollRegister& reg);
  // The enrollment (or resume) of `reg` in the store, with the os_pid
  // `verified` settled on.
  Result<Enrollment> StoreEnrollment(const pb::EnrollRegister& reg,
                                     const VerifiedEnrollment& verified);
  // Kill on this host: through the pidfd of the daemon's child or of the
  // process's verified enrollment, if `caller` may (MaySignal); refused
  // for a process whose pid was never verified.
  Status SignalLocal(Gid process, int signal, const Caller& caller);
  // Makes `call(stub, client_context)` on `host`'s daemon with `timeout`
  // (within the caller's deadline), for `caller` (its uid goes along); the
  // remote status comes back as "on hN: ...". FailedPrecondition when
  // `context`'s call was itself forwarded (one hop only).
  template <typename Call>
  grpc::Status Forward(const grpc::ServerContext& context, const Caller& caller, Gid host,
                       std::chrono::milliseconds timeout, const Call& call);
  // The process of a Kill or ReadLog, checked: a process id, or
  // InvalidArgument (for a thread: "h1.p2.t3 is a thread: <advice> h1.p2").
  static Result<Gid> TargetProcess(uint64_t raw, std::string_view thread_advice);

  // Keeps a process's report unless it is over the limits (then logs why).
  void KeepPoolStats(Gid process, uint64_t generation, const pb::PoolStatsReport& report);
  void KeepNetworkStats(Gid process, uint64_t generation, const pb::NetworkStatsReport& report);
  // NotFound saying why `process` has no statistics of `what` ("pool",
  // "network").
  Status NoStats(Gid process, std::string_view what) const;

  // Waits (bounded) until `gid` is in the local store: a process spawned on
  // another host, which the caller will look up here next.
  void AwaitReplica(Gid gid, std::chrono::system_clock::time_point caller_deadline);

  Store& store_;
  ProcessControl* const control_;  // not owned; may be null
  const std::string data_plane_secret_;
  const AcceptTimes* const accept_times_;  // not owned; may be null
  const CallerCheck callers_;
  SessionRegistry sessions_;
  DaemonStubs daemons_;
  std::atomic<bool> shutting_down_{false};  // release/acquire: set once, read by handlers
};

}  // namespace tocl::directory
