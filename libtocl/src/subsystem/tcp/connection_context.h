// What the connections of one TcpSubsystem share with it: where arrivals
// go, the reactor, the pool, the limits and the traffic counters. Owned by
// the TcpSubsystem; outlives every connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "buffers/buffer_pool.h"
#include "security/cluster_key.h"
#include "subsystem/reactor.h"
#include "subsystem/subsystem.h"
#include "subsystem/tcp/received_streams.h"
#include "subsystem/tcp/reverse_acks.h"
#include "tocl/gid.h"
#include "wire/frame.h"

namespace tocl::subsystem::tcp {

// A snapshot of one subsystem's traffic (wire bytes: headers included).
struct TcpTrafficStats {
  uint64_t bytes_sent = 0;
  uint64_t frames_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_received = 0;
  uint64_t connections_accepted = 0;
  // Inbound connections closed for a malformed frame, a failed or missing
  // handshake or a socket error (not for a clean close by the peer).
  uint64_t connections_rejected = 0;
  // Outbound connections broken for good (refused, the peer failed a
  // handshake or the protocol, down for unreachable_timeout, shut down).
  uint64_t routes_broken = 0;
  // Outbound connections lost (reset, closed by the peer) and then
  // connected again or still trying.
  uint64_t connections_lost = 0;
  // kReceived counts written on their own (answers to a resume included),
  // and carried in front of frames to the peer (reverse_acks.h).
  uint64_t acknowledgements_written = 0;
  uint64_t acknowledgements_carried = 0;
};

// Counters only: relaxed atomics, read by whoever wants statistics.
struct TcpTraffic {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> frames_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> frames_received{0};
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_rejected{0};
  std::atomic<uint64_t> routes_broken{0};
  std::atomic<uint64_t> connections_lost{0};
  std::atomic<uint64_t> acknowledgements_written{0};
  std::atomic<uint64_t> acknowledgements_carried{0};

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  TcpTrafficStats Snapshot() const;
};

inline TcpTrafficStats TcpTraffic::Snapshot() const {
  TcpTrafficStats s;
  s.bytes_sent = bytes_sent.load(std::memory_order_relaxed);
  s.frames_sent = frames_sent.load(std::memory_order_relaxed);
  s.bytes_received = bytes_received.load(std::memory_order_relaxed);
  s.frames_received = frames_received.load(std::memory_order_relaxed);
  s.connections_accepted = connections_accepted.load(std::memory_order_relaxed);
  s.connections_rejected = connections_rejected.load(std::memory_order_relaxed);
  s.routes_broken = routes_broken.load(std::memory_order_relaxed);
  s.connections_lost = connections_lost.load(std::memory_order_relaxed);
  s.acknowledgements_written = acknowledgements_written.load(std::memory_order_relaxed);
  s.acknowledgements_carried = acknowledgements_carried.load(std::memory_order_relaxed);
  return s;
}

struct ConnectionContext {
  ConnectionContext(Gid self, security::ClusterKey key_in, subsystem::Reactor& reactor_in,
                    subsystem::Sink& sink_in, buffers::BufferPool& pool_in, wire::Limits limits_in,
                    size_t max_queued, std::chrono::milliseconds handshake_timeout_in,
                    std::chrono::milliseconds unreachable_timeout_in)
      : self_process(self),
        key(key_in),
        reactor(reactor_in),
        sink(sink_in),
        pool(pool_in),
        limits(limits_in),
        max_queued_bytes_per_route(max_queued),
        handshake_timeout(handshake_timeout_in),
        unreachable_timeout(unreachable_timeout_in) {}

  const Gid self_process;
  const security::ClusterKey key;  // the data plane's handshake
  subsystem::Reactor& reactor;
  subsystem::Sink& sink;
  buffers::BufferPool& pool;  // receive buffers (sends may come from any pool)
  const wire::Limits limits;  // max_payload: the largest class minus the header
  // Bytes a route's window holds (posted, not acknowledged) before Post
  // says TryAgain.
  const size_t max_queued_bytes_per_route;
  const std::chrono::milliseconds handshake_timeout;
  // A route down this long is broken for good.
  const std::chrono::milliseconds unreachable_timeout;
  TcpTraffic traffic;
  // Outbound connections waiting for an fd event (connecting, in their
  // handshake, or frames waiting for room): while there are any the poller
  // asks epoll every round.
  std::atomic<int> waiting{0};
  // Outbound connections down (connecting again): while there are any,
  // Poll ticks them.
  std::atomic<int> down{0};
  // An outbound connection went down since Poll last told the runtime.
  std::atomic<bool> route_went_down{false};
  // Counts owed to peers that our frames to them may carry (reverse_acks.h).
  ReverseAcks reverse_acks;
  // A kReceived that came on a peer's connection to us, about our stream
  // to it (polling thread): the subsystem finds the outbound connection.
  std::function<void(const wire::Header&)> reverse_acknowledged;

  // Polling-thread bookkeeping (handlers and Poll run there only):
  int delivered = 0;             // messages handed to the sink since the last Poll
  bool inbound_changed = false;  // an inbound connection closed or paused
  int reports_pending = 0;       // inbound connections owing their peer a kReceived
  ReceivedStreams streams;       // what arrived of each peer's streams
};

}  // namespace tocl::subsystem::tcp
