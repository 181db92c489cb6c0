// The daemon's unix socket, served through gRPC on connections toclsd
// accepts itself: each one is handed to the gRPC server
// (grpc::AddInsecureChannelFromFd), whose calls on it then have the peer
// "fd:N", N the connection's descriptor, from which the directory service
// reads the caller's kernel credentials (SO_PEERCRED). gRPC's own unix
// listener names every caller "unix:" and gives no way to its credentials;
// directory/src/service/caller.h has the whole argument.
//
// Each connection's accept time is recorded (AcceptTimes) before gRPC has
// it: on a kernel without SO_PEERPIDFD it is how the process that
// connected is told from one that got its pid later (caller.h).
//
// Out of descriptors (EMFILE, ENFILE), accepting pauses (100 ms, cut short
// by Stop) and tries again, the connection waiting in the backlog
// meanwhile; that is logged once per such spell, not per attempt.
//
// Threading: Serve starts one thread that only accepts; Stop and the
// destructor may be called from any thread but a gRPC handler.
#pragma once

#include <grpcpp/server.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "core/posix.h"
#include "service/accept_times.h"
#include "tocl/status.h"

namespace tocl::daemon {

class UnixListener {
 public:
  // Binds `path` and listens. The socket file gets the mode 0777 less the
  // umask (socket_access.h's RestrictSocketFile sets its final mode).
  // `accept_times` (not owned) records every accepted connection; it must
  // outlive the listener and the server's calls.
  static Result<std::unique_ptr<UnixListener>> Listen(const std::string& path,
                                                      directory::AcceptTimes& accept_times);
  ~UnixListener();  // Stop()
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // From now on hands every connection to `server`, which must be started
  // and outlive Stop().
  void Serve(grpc::Server& server);
  // Stops accepting; connections already handed over stay with gRPC (its
  // Shutdown ends them). Idempotent.
  void Stop();

 private:
  UnixListener(Fd socket, Fd wake, directory::AcceptTimes& accept_times)
      : socket_(std::move(socket)), wake_(std::move(wake)), accept_times_(accept_times) {}
  void AcceptLoop(grpc::Server& server);
  // After accept failed with `error`: false when the loop is to end (Stop
  // was called). Waits out a lack of descriptors or memory.
  bool AfterAcceptError(int error);
  // Waits up to `timeout_ms` for Stop; true when it was called.
  bool StopRequested(int timeout_ms) const;

  Fd socket_;
  Fd wake_;  // an eventfd: written by Stop, ends AcceptLoop's poll
  directory::AcceptTimes& accept_times_;
  // Accepts that failed for want of descriptors or memory since the last
  // one that succeeded (the accept thread's own).
  uint64_t failed_accepts_ = 0;
  std::thread thread_;
};

}  // namespace tocl::daemon
