// The enroll streams that are open now, one per process.
//
// A process that re-enrolls while the daemon still holds its old stream
// (e.g. a TCP connection not yet seen as broken) takes over: the old stream
// is cancelled (whether its end marks the process exited is the store's
// call: Store::MarkStreamEnded).
#pragma once

#include <grpcpp/server_context.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "tocl/gid.h"

namespace tocl::directory {

class SessionRegistry {
 public:
  // Makes `context` the current session of `process`, cancelling an older
  // one. Returns the session's generation, to pass to Detach.
  uint64_t Attach(Gid process, grpc::ServerContext* context);
  // Forgets the session; true when it was still the process's current one.
  bool Detach(Gid process, uint64_t generation);

  // Cancels every open stream (daemon shutdown: their handlers return now
  // instead of at the server's shutdown deadline).
  void CancelAll();

 private:
  struct Session {
    uint64_t generation;
    grpc::ServerContext* context;  // not owned; valid until Detach
  };
  mutable std::mutex mu_;
  std::map<Gid, Session> sessions_;  // guarded by mu_
  uint64_t next_generation_ = 1;     // guarded by mu_
};

}  // namespace tocl::directory
