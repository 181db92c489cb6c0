// Two peer processes, forked by the coordinator of `tocl-bench msg`, that
// every run of one case group happens between: the raw baselines and tocl
// alike, so that a ratio compares the same two processes.
//
// Fork() makes the shared region (shared_region.h) and a loopback TCP
// connection (raw_tcp.h), then forks the initiator and the responder; each
// keeps its end of the connection and a SOCK_SEQPACKET control socket to the
// coordinator, and dies with it (PR_SET_PDEATHSIG). Fork() must be called
// while the calling process has one thread (before any gRPC client or daemon
// exists): the children start their own runtimes later, from scratch.
//
// Errors: Call() returns a peer's error with the pair's name and the peer's
// role in front; DeadlineExceeded when a peer does not answer in time, after
// which both peers are killed. Threading: one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "fd.h"
#include "protocol.h"
#include "tocl/status.h"

namespace tocl::bench::msg {

class PeerPair {
 public:
  static Result<std::unique_ptr<PeerPair>> Fork(std::string name);

  // Exit(), and SIGKILL for a peer that does not go.
  ~PeerPair();
  PeerPair(const PeerPair&) = delete;
  PeerPair& operator=(const PeerPair&) = delete;

  const std::string& name() const { return name_; }
  // The peers' process ids (-1 once reaped).
  pid_t initiator_pid() const { return peers_[0].pid; }
  pid_t responder_pid() const { return peers_[1].pid; }

  // Sends each peer its command and waits up to `timeout` for both replies.
  Status Call(const Command& to_initiator, const Command& to_responder, Reply* initiator,
              Reply* responder, std::chrono::milliseconds timeout);
  Status Call(const Command& command, Reply* initiator, Reply* responder,
              std::chrono::milliseconds timeout) {
    return Call(command, command, initiator, responder, timeout);
  }

  // kExit to both (the runtimes shut down), then reaps them. Idempotent.
  Status Exit(std::chrono::milliseconds deadline = std::chrono::seconds(20));

 private:
  struct Peer {
    pid_t pid = -1;
    Fd control;
  };
  explicit PeerPair(std::string name) : name_(std::move(name)) {}
  void Kill();
  static std::string_view RoleName(int index) { return index == 0 ? "initiator" : "responder"; }

  std::string name_;
  Peer peers_[2];  // [0] initiator, [1] responder
};

}  // namespace tocl::bench::msg
