// The VI pool's two records: a ViEntry per (remote process, size class),
// where sends to that process in that class queue and find their VI, and a
// Vi per connection (the provider's VI plus the credit bookkeeping of
// vi_protocol.h).
//
// An entry has at most one VI that takes new sends. A VI leaves its entry
// (detached) when it is being closed, or when a crossing connection
// replaced it; it then still drains what was posted on it.
//
// Locking: the entry's mutex guards the entry and every field of its VIs
// marked so. Lock order: an entry's mutex, then the subsystem's VI list
// mutex; never two entries at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "buffers/buffer_slot.h"
#include "subsystem/via/provider.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::subsystem::via {

struct Vi;

struct ViEntry {
  ViEntry(Gid peer_in, uint32_t class_index_in) : peer(peer_in), class_index(class_index_in) {}

  const Gid peer;
  const uint32_t class_index;

  std::mutex mu;
  // Guarded by mu:
  std::string address;                      // the peer's provider address (from the last Connect)
  Vi* vi = nullptr;                         // the VI new sends go on: connecting or connected
  std::deque<detail::BufferSlot*> pending;  // sends waiting for the VI or for credits
  size_t pending_bytes = 0;
  Status broken;  // not ok: the way to the peer in this class broke; sends fail
  // Our request lost a crossing (the peer's will arrive): when, or epoch.
  std::chrono::steady_clock::time_point crossed_at{};
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
  uint64_t sent = 0;
  uint64_t received = 0;
  std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();

  // Sends handed to the provider and not completed (any thread).
  std::atomic<uint32_t> in_flight{0};
};

}  // namespace tocl::subsystem::via
