// The enroll streams that are open now, one per process, and the latest
// pool and network statistics each process reported on its stream.
//
// Each session also holds the process it verified at enrollment (a pidfd:
// process_handle.h), when it enrolled on the unix socket; signals to a
// process that is not the daemon's own child go through it and nothing
// else, and end with the session.
//
// Statistics live here, not in the store: they are a snapshot a few
// seconds old, replaced by every report, worthless after the stream ends
// (Detach drops them) and not worth a durable write each.
//
// A process that re-enrolls while the daemon still holds its old stream
// (e.g. a TCP connection not yet seen as broken) takes over: the old stream
// is cancelled (whether its end marks the process exited is the store's
// call: Store::MarkStreamEnded).
#pragma once

#include <grpcpp/server_context.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "service/process_handle.h"
#include "tocl/directory/v1/directory.pb.h"
#include "tocl/gid.h"

namespace tocl::directory {

class SessionRegistry {
 public:
  // Makes `context` the current session of `process`, cancelling an older
  // one. `verified`: the process the kernel named as the enrolling caller
  // (none for a process that enrolled over TCP). Returns the session's
  // generation, to pass to Detach.
  uint64_t Attach(Gid process, grpc::ServerContext* context, std::optional<ProcessHandle> verified);
  // Forgets the session and its statistics; true when it was still the
  // process's current one.
  bool Detach(Gid process, uint64_t generation);

  // Runs `action` on the verified process of `process`'s open session,
  // under the registry's lock (keep it to a syscall or two). nullopt when
  // the process has no open session; FailedPrecondition when its session
  // has no verified process (it enrolled over TCP).
  std::optional<Status> WithVerifiedProcess(
      Gid process, const std::function<Status(const ProcessHandle&)>& action) const;

  // Keeps `stats` as the process's latest report, unless `generation` is no
  // longer its current session (a stream that was taken over).
  void SetPoolStats(Gid process, uint64_t generation, tocl::directory::v1::ProcessPoolStats stats);
  // The latest report of `process`; nullopt when it has no open session or
  // has not reported on it.
  std::optional<tocl::directory::v1::ProcessPoolStats> PoolStats(Gid process) const;
  // The latest report of every process that has one, in Gid order.
  std::vector<tocl::directory::v1::ProcessPoolStats> AllPoolStats() const;

  // The same for network statistics.
  void SetNetworkStats(Gid process, uint64_t generation,
                       tocl::directory::v1::ProcessNetworkStats stats);
  std::optional<tocl::directory::v1::ProcessNetworkStats> NetworkStats(Gid process) const;
  std::vector<tocl::directory::v1::ProcessNetworkStats> AllNetworkStats() const;

  // Cancels every open stream (daemon shutdown: their handlers return now
  // instead of at the server's shutdown deadline).
  void CancelAll();

 private:
  struct Session {
    uint64_t generation;
    grpc::ServerContext* context;  // not owned; valid until Detach
    std::optional<ProcessHandle> verified;
    std::optional<tocl::directory::v1::ProcessPoolStats> pool_stats;
    std::optional<tocl::directory::v1::ProcessNetworkStats> network_stats;
  };

  // The statistics of one kind (`field` of Session), as the methods above.
  template <typename Stats>
  void SetStats(Gid process, uint64_t generation, std::optional<Stats> Session::*field,
                Stats stats);
  template <typename Stats>
  std::optional<Stats> GetStats(Gid process, std::optional<Stats> Session::*field) const;
  template <typename Stats>
  std::vector<Stats> AllStats(std::optional<Stats> Session::*field) const;

  mutable std::mutex mu_;
  std::map<Gid, Session> sessions_;  // guarded by mu_
  uint64_t next_generation_ = 1;     // guarded by mu_
};

}  // namespace tocl::directory
