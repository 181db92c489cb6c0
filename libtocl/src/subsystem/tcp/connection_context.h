// What the connections of one TcpSubsystem share with it: where arrivals
// go, the reactor, the pool, the limits and the traffic counters. Owned by
// the TcpSubsystem; outlives every connection.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "buffers/buffer_pool.h"
#include "security/cluster_key.h"
#include "subsystem/reactor.h"
#include "subsystem/subsystem.h"
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
  // Outbound connections that broke (refused, reset, closed by the peer).
  uint64_t routes_broken = 0;
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
  return s;
}

struct ConnectionContext {
  ConnectionContext(Gid self, security::ClusterKey key_in, subsystem::Reactor& reactor_in,
                    subsystem::Sink& sink_in, buffers::BufferPool& pool_in, wire::Limits limits_in,
                    size_t max_queued)
      : self_process(self),
        key(key_in),
        reactor(reactor_in),
        sink(sink_in),
        pool(pool_in),
        limits(limits_in),
        max_queued_bytes_per_route(max_queued) {}

  const Gid self_process;
  const security::ClusterKey key;  // the data plane's handshake
  subsystem::Reactor& reactor;
  subsystem::Sink& sink;
  buffers::BufferPool& pool;  // receive buffers (sends may come from any pool)
  const wire::Limits limits;  // max_payload: the largest class minus the header
  const size_t max_queued_bytes_per_route;
  TcpTraffic traffic;
  // Outbound connections waiting for an fd event (connecting, in their
  // handshake, or frames waiting for room): while there are any the poller
  // asks epoll every round.
  std::atomic<int> waiting{0};

  // Polling-thread bookkeeping (handlers and Poll run there only):
  int delivered = 0;             // messages handed to the sink since the last Poll
  bool inbound_changed = false;  // an inbound connection closed or paused
};

}  // namespace tocl::subsystem::tcp
