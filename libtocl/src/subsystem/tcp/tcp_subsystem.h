// The tcp subsystem (DESIGN.md §5, GM-style): one listening port per
// process, announced as "IP:PORT"; a connection per (sending process,
// receiving process), opened by the sender on its first Connect and used in
// one direction only; the receiver picks a pool buffer by the length in
// each frame's header.
//
//   auto tcp = TcpSubsystem::Open({.self_process = me, .num_classes = 9},
//                                 reactor, sink, budget);
//   publish((*tcp)->address());                  // "127.0.0.1:41234"
//   auto route = (*tcp)->Connect(peer, "127.0.0.1:40000");
//   (*route)->Post(slot);                        // Ok / TryAgain / Unavailable
//
// On a connection the first frames are the data plane's handshake
// (security/handshake.h, wire/frame.h): a hello (source: the connecting
// process, destination: the process it means to reach, the connector's
// nonce), our answer, the connector's proof; then message frames from that
// process to this one. A malformed or unexpected frame, a failed proof, or
// no finished handshake within handshake_timeout closes that connection
// with one warning; nothing it sent before is delivered. On our own
// connections, an acceptor that fails its proof or does not answer in time
// breaks the route.
//
// Flow control: a connection whose frames find the sink congested or the
// pool at its cap stops being read (Poll resumes it); the sender's socket
// buffer, then its route queue (max_queued_bytes_per_route) fill, and its
// Post says TryAgain. Nothing is dropped. The runtime must Wake() the
// reactor when its sink stops being congested or it releases received
// buffers, if the poller may be asleep.
//
// Lifetime: the reactor and the sink outlive the subsystem; every Route it
// returned is destroyed before it.
//
// Threading: as subsystem.h says. Connect, address, pool, Reaches and the
// statistics from any thread; route methods from one thread at a time per
// route; Poll, PrepareToSleep, Housekeeping, Close and the reactor handlers
// on the polling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_pool.h"
#include "security/cluster_key.h"
#include "subsystem/reactor.h"
#include "subsystem/subsystem.h"
#include "subsystem/tcp/connection_context.h"
#include "subsystem/tcp/socket.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::subsystem::tcp {

class InboundConnection;
class OutboundConnection;

struct TcpOptions {
  Gid self_process;
  // The IP to listen on (port: any free one). "::1" and other IPv6 literals
  // work too; the address published is then "[::1]:PORT".
  std::string bind_address = "127.0.0.1";
  // Pool classes 256 B << 0 .. num_classes-1; the largest one bounds the
  // payload: ClassBytes(num_classes - 1) - the header.
  uint32_t num_classes = 0;
  size_t max_queued_bytes_per_route = size_t{4} << 20;
  // The cluster's data-plane secret (none without credentials).
  security::ClusterKey key{};
  // A connection that has not finished its handshake by then is closed
  // (either side), so half-open scanners cannot pile up.
  std::chrono::milliseconds handshake_timeout{5000};
  // Accepted connections in their handshake at once; a new one past it
  // closes the oldest.
  size_t max_handshaking = 64;
  // A route whose connection is lost connects again with backoff; after
  // this long without one it is broken for good (RuntimeOptions::
  // unreachable_timeout).
  std::chrono::milliseconds unreachable_timeout{30000};
};

class TcpSubsystem final : public subsystem::Subsystem {
 public:
  // Listens on options.bind_address, any port. InvalidArgument for a bad
  // option (self_process not a process id, num_classes out of 1..13, a bind
  // address that is not an IP); the socket call's Status otherwise.
  static Result<std::unique_ptr<TcpSubsystem>> Open(const TcpOptions& options,
                                                    subsystem::Reactor& reactor,
                                                    subsystem::Sink& sink,
                                                    buffers::PoolBudget& budget);
  ~TcpSubsystem() override;
  TcpSubsystem(const TcpSubsystem&) = delete;
  TcpSubsystem& operator=(const TcpSubsystem&) = delete;

  Network network() const override { return Network::kTcp; }
  const std::string& address() const override { return address_; }
  buffers::BufferPool& pool() override { return pool_; }
  // True for any address that parses as IP:PORT (tcp reaches every host;
  // whether it really does shows when connecting).
  bool Reaches(Gid peer_process, std::string_view address) const override;
  // InvalidArgument for a malformed address or a peer that is not a process
  // id; FailedPrecondition after Close. A refused connection is a route that
  // is Broken(), its Post says why.
  Result<std::unique_ptr<subsystem::Route>> Connect(Gid peer_process,
                                                    std::string_view address) override;
  // Resumes paused connections that can go on, frees closed ones, and
  // reads the inbound connections itself while there are few of them (one
  // recv each instead of an epoll_wait and a recv). Returns the messages
  // handed to the sink since the last Poll.
  int Poll() override;
  // While a connection waits for room to write, or there are too many
  // inbound connections to read each round.
  bool WantsReactorEachRound() const override;
  // One more try at resuming paused connections (the sink may have drained
  // since Poll); false when that delivered something. A paused connection
  // does not wake the poller: see the flow-control note above.
  bool PrepareToSleep() override;
  void FinishSleep() override {}
  // Closes connections that have not finished their handshake within
  // handshake_timeout, and starts accepting again after running out of fds.
  void Housekeeping() override;
  // The next reconnect due.
  std::chrono::steady_clock::time_point WakeBy() override;
  // Reads the connections from `process` (and those still waiting to be
  // accepted or in their handshake) as far as they go; true once every one
  // of its connections has reached its end.
  bool DrainFrom(Gid process) override;
  void Close() override;

  // The largest payload a frame may carry, to and from this process.
  uint32_t max_payload() const { return context_.limits.max_payload; }
  TcpTrafficStats traffic() const { return context_.traffic.Snapshot(); }
  // Inbound connections open now (for tests and statistics; polling thread).
  size_t inbound_connections() const;

 private:
  class Listener final : public subsystem::FdHandler {
   public:
    explicit Listener(TcpSubsystem& owner) : owner_(owner) {}
    void OnReady(uint32_t events) override;

   private:
    TcpSubsystem& owner_;
  };
  class TcpRoute;
  // Up to this many inbound connections, Poll reads them itself: one recv
  // where epoll_wait and then recv would be two; with more, one epoll_wait
  // a round costs less than a recv per idle connection.
  static constexpr size_t kDirectReadConnections = 1;

  TcpSubsystem(const TcpOptions& options, subsystem::Reactor& reactor, subsystem::Sink& sink,
               buffers::PoolBudget& budget);
  Status Listen();
  void AcceptSome();
  // Closes the oldest connection still in its handshake when there are
  // max_handshaking of them.
  void MakeRoomForHandshake();
  // A Route handle is gone: its connection is shut down now and freed by
  // the next Poll (the current epoll batch may still name it).
  void Release(OutboundConnection* connection);
  // Tries to resume every paused connection; true when one resumed.
  bool ResumePaused();
  void FreeClosedInbound();
  void FreeReleasedOutbound();
  // Runs every outbound connection's timers (Tick); the earliest next one.
  std::chrono::steady_clock::time_point TickOutbound(std::chrono::steady_clock::time_point now);
  // Tells the sink which routes went down.
  void ReportRoutesDown();
  // A peer's count of one of our streams that came on its connection to us
  // (reverse_acks.h): to the outbound connection of that stream.
  void OnReverseAcknowledged(const wire::Header& header);

  const TcpOptions options_;
  buffers::AnonymousSlabMemory slab_memory_;
  buffers::BufferPool pool_;  // after slab_memory_: uses it
  ConnectionContext context_;
  Listener listener_{*this};
  Fd listen_fd_;
  std::string address_;

  // Polling thread only:
  std::vector<std::unique_ptr<InboundConnection>> inbound_;
  bool accepting_ = true;  // false after EMFILE, until Housekeeping
  bool closed_ = false;
  size_t paused_ = 0;           // inbound connections paused at the last look
  uint32_t report_rounds_ = 0;  // Polls since owed reports were last looked at

  // Set (release) with released_ non-empty, so that Poll takes mu_ only then.
  std::atomic<bool> has_released_{false};

  std::mutex mu_;
  // Guarded by mu_:
  std::vector<std::unique_ptr<OutboundConnection>> outbound_;
  std::vector<OutboundConnection*> released_;
  std::unordered_map<uint64_t, OutboundConnection*> by_stream_;  // by stream id
  bool closing_ = false;
};

}  // namespace tocl::subsystem::tcp
