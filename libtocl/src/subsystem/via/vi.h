// The VI pool's two records: a ViEntry per (remote process, size class),
// where sends to that process in that class wait, numbered in their stream,
// until the peer acknowledges them, and where they find their VI; and a Vi
// per connection (the provider's VI plus the credit and acknowledgement
// bookkeeping of vi_protocol.h).
//
// An entry has at most one VI that takes new sends. A VI leaves its entry
// (detached) when it is being closed, when a crossing or newer connection
// replaced it, or when its frames went another way; it then still delivers
// what was posted on it (the stream's numbers drop second copies), and its
// acknowledgements still count.
//
// Locking: the entry's mutex guards the entry and every field of its VIs
// marked so. Lock order: an entry's mutex, then the subsystem's VI list
// mutex; never two entries at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "buffers/buffer_slot.h"
#include "subsystem/via/provider.h"
#include "subsystem/via/stream_pair.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::subsystem::via {

struct Vi;

struct ViEntry {
  using Clock = std::chrono::steady_clock;

  ViEntry(Gid peer_in, uint32_t class_index_in) : peer(peer_in), class_index(class_index_in) {}

  const Gid peer;
  const uint32_t class_index;

  std::mutex mu;
  // Guarded by mu:
  std::string address;        // the peer's provider address (from the last Connect)
  Vi* vi = nullptr;           // the VI new sends go on: connecting or connected
  StreamPair streams;         // ours (the window) and the peer's, across VIs
  uint32_t epoch = 0;         // of the last VI connected (0: none yet)
  bool resumed_once = false;  // a VI of our current stream has connected
  Status broken;              // not ok: broken for good; sends fail
  // The peer's stream whose protocol error broke the entry: its VIs are
  // refused (0: none).
  uint64_t refused_stream = 0;
  // Lost its VI (not closed by the cap) while frames waited, and not
  // connected again: since when (for unreachable_timeout), the attempts
  // since, whether the runtime has been told (OnRouteDown). An entry whose
  // window empties (acknowledged by a VI that left it, failed with its
  // route, taken by another network) is idle again, not down.
  bool down = false;
  Clock::time_point down_since{};
  int attempts = 0;
  bool went_down = false;
  // No new VI before this (a crossing lost, the peer's pool full, backoff).
  Clock::time_point next_attempt{};
};

struct Vi {
  enum class State { kConnecting, kConnected, kClosed };

  Vi(Gid peer_in, uint32_t class_index_in, uint32_t window_in, bool initiated_in,
     std::shared_ptr<ViEntry> entry_in)
      : peer(peer_in),
        class_index(class_index_in),
        window(window_in),
        initiated(initiated_in),
        entry(std::move(entry_in)) {}

  const Gid peer;
  const uint32_t class_index;
  const uint32_t window;  // receive descriptors this side keeps posted
  const bool initiated;   // we sent the connection request
  const std::shared_ptr<ViEntry> entry;

  // Set before the VI is shared; reset by the polling thread after OnClosed.
  std::unique_ptr<ProviderVi> provider;

  // Guarded by entry->mu:
  State state = State::kConnecting;
  uint32_t epoch = 0;           // proposed by our request (connecting), then agreed
  ConnectData request;          // ours, when initiated: what Agree compares with
  uint32_t credits = 0;         // messages we may still post
  uint32_t to_return = 0;       // descriptors re-posted since we last told the peer
  uint32_t posted = 0;          // receive descriptors posted now
  uint32_t owed = 0;            // consumed and not re-posted (receiver congested, pool at its cap)
  bool detached = false;        // no longer its entry's VI
  bool close_pending = false;   // we owe the peer kCloseRequest (we close) or kCloseAck
  bool close_sent = false;      // ... and sent it: nothing more goes out on this VI
  bool close_received = false;  // the peer's close message arrived: nothing more comes
  bool closing = false;         // we asked to close it (least recently used)
  bool disconnect_pending = false;  // handshake done, waiting for our sends to complete
  bool refused = false;             // the peer broke the protocol: nothing more is taken
  // The streams it carries (from Agree; 0 until connected): ours from frame
  // send_first on, send_posted of them posted, send_acked acknowledged;
  // the peer's from frame receive_next on, receive_count received, the
  // count last carried back (receive_reported) and since when it is owed.
  uint64_t stream = 0;
  uint64_t peer_stream = 0;
  uint64_t send_first = 0;
  uint64_t send_posted = 0;
  uint64_t send_acked = 0;
  uint64_t receive_next = 0;
  uint64_t receive_count = 0;
  uint64_t receive_reported = 0;
  bool ack_owed = false;  // counted in the subsystem's acks_owed_
  std::chrono::steady_clock::time_point ack_owed_since{};
  // Messages that completed before OnConnected (ibverbs), in order.
  struct Early {
    detail::BufferSlot* slot;
    uint32_t length;
    uint32_t immediate;
  };
  std::vector<Early> early;
  uint64_t sent = 0;
  uint64_t received = 0;
  // The last data frame sent or received (the cap closes the least recent).
  std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();

  // Sends handed to the provider and not completed (any thread).
  std::atomic<uint32_t> in_flight{0};
};

}  // namespace tocl::subsystem::via
