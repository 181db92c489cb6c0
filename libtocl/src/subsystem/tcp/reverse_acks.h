// Acknowledgements that ride on reverse traffic.
//
// A process that receives a peer's stream owes the peer a cumulative count
// (send_window.h: the peer's frames stay held until it comes). When this
// process writes frames to that peer anyway, over its own stream to it on
// the same network, the count goes in front of them as a kReceived header
// in the same sendmsg(): no write of its own, and the peer's poller reads it
// with the data it reads anyway. So a conversation (requests one way,
// answers the other) acknowledges everything without a single extra write
// or wake-up. A count that no frame carries soon enough goes back on the
// stream's own socket as before (inbound_connection.h: after 64 frames or
// 256 KiB, after 200 us while the poller runs, always before it sleeps).
//
// The peer's inbound connection from us hands such a header to its
// subsystem, which gives it to the outbound connection whose stream it
// names (TcpSubsystem::OnReverseAcknowledged).
//
// One ReverseAck per (network, peer process), shared by the inbound side,
// which owes, and the outbound connection to the same peer, which carries.
//
// Threading: Owe and carried() on the polling thread; Take and Carried by
// whoever writes the outbound connection (under its mutex); the
// ReverseAcks table from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "tocl/gid.h"

namespace tocl::subsystem::tcp {

class ReverseAck {
 public:
  // Stream `stream` of the peer has `count` frames received here.
  void Owe(uint64_t stream, uint64_t count);
  // For a writer about to send frames to the peer: the count owed and not
  // yet carried, if any. One atomic load when nothing is owed.
  bool Take(uint64_t* stream, uint64_t* count);
  // The count for `stream` went whole into a socket to the peer.
  void Carried(uint64_t stream, uint64_t count);
  // The highest count carried for `stream` (0 for another stream).
  uint64_t carried(uint64_t stream) const;

 private:
  std::atomic<bool> owed_{false};
  mutable std::mutex mu_;
  // Guarded by mu_:
  uint64_t stream_ = 0;
  uint64_t count_ = 0;
  uint64_t carried_ = 0;
};

class ReverseAcks {
 public:
  // The peer's ReverseAck, made if there is none.
  std::shared_ptr<ReverseAck> For(Gid peer_process);
  // Forgets those no connection holds any more.
  void Expire();

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<ReverseAck>> by_peer_;  // guarded by mu_
};

}  // namespace tocl::subsystem::tcp
