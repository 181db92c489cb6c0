// What a process asks of its runtime (Runtime::Start): the daemon, its
// name, its networks and their sizes, limits and timeouts. A plain value;
// Start checks it (InvalidArgument names the bad option). A header of its
// own so that the library's lower layers (the networks' registry) can take
// it without the whole Runtime.
//
//   auto runtime = tocl::Runtime::Start({.name = "worker", .networks = "shm,tcp:eth0"});
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "tocl/entity.h"

namespace tocl {

// Every member has a default, so that designated initializers
// (`Runtime::Start({.name = "worker"})`) compile warning-free with -Wextra.
struct RuntimeOptions {
  // The daemon to enroll with; empty means DirectoryClient::DefaultAddress()
  // ($TOCL_DAEMON, else toclsd's default socket).
  std::string daemon_address = {};
  std::string name = {};  // the process's name in the directory; empty: the program's name
  Attributes attributes = {};

  // The networks to open, comma-separated: "shm", "tcp:IFACE" (the
  // interface's IPv4 address and subnet), "tcp:ADDR[/PREFIX]" (an address,
  // /32 when no prefix is given), "tcp" (= tcp:127.0.0.1/8), "auto" (shm
  // and tcp on every interface that is up and has an IPv4 address, not
  // loopback; loopback alone when there is none). Several tcp networks may
  // be given (two NICs). Empty: $TOCL_NETWORKS, else `subsystems`/`tcp_bind`
  // below when set, else the host's `networks` (toclsd config, published as
  // the host's attribute), else "auto".
  std::string networks = {};
  // Older spelling, kept: "shm,tcp" ($TOCL_SUBSYSTEMS) and the tcp address
  // ($TOCL_TCP_BIND); used only when `networks` and $TOCL_NETWORKS are empty.
  std::string subsystems = {};
  std::string tcp_bind = {};
  // Daemons that are not in a cluster only: the daemons of other hosts to
  // look their processes up at, "HOSTID=ADDRESS,..." (empty:
  // $TOCL_PEER_DAEMONS). In a cluster the local daemon's replica answers.
  std::string peer_daemons = {};

  // Largest message payload plus header (a power of two, 256 B .. 1 MiB).
  size_t short_max = 64 * 1024;
  // All pool memory of the process (every network, every class). At the cap
  // GetBuffer waits or fails, as its caller asks.
  size_t pool_cap = size_t{512} << 20;
  // Memory the process lets unexpected messages use before it slows senders.
  size_t unexpected_cap = size_t{64} << 20;
  // Messages a thread may have queued for one destination process before
  // Send blocks (back-pressure reaches the sending thread here).
  size_t send_queue_depth = 4096;
  // How long a waiting receiver polls before it sleeps.
  std::chrono::microseconds spin{50};
  // How long Send waits for a destination's endpoint (the directory lookup,
  // the connection) before it fails.
  std::chrono::milliseconds connect_timeout{5000};
  // A connection to a peer that breaks while the peer runs is made again
  // (at once, then with backoff) and what the peer had not acknowledged is
  // sent again, over it or at once over another network that reaches the
  // peer. A peer no network has reached for this long is failed: every
  // message it has not acknowledged ends kFailed, and later sends to it
  // fail. (A peer whose process exits is failed as soon as the directory
  // says so.)
  std::chrono::milliseconds unreachable_timeout{30000};
  // Pool and network statistics are reported to the daemon this often (0: never).
  std::chrono::milliseconds stats_interval{2000};

  // --- long messages (larger than the short maximum) ---
  // Library memory for long messages being received that have no posted
  // RecvInto buffer. A sender whose message does not fit waits until
  // received messages free enough (it is slowed, never dropped).
  size_t reassembly_cap = size_t{1} << 30;
  // A network that acknowledges none of a peer's fragments for this long is
  // failed for that peer: its fragments are sent again over the others
  // (with none left, the long Send waits for it, up to partial_timeout).
  std::chrono::milliseconds fragment_timeout{1000};
  // A partly received message whose sender sent nothing for this long is
  // discarded (its sender has failed or died). A long Send that hears
  // nothing about its message for this long (no grant, acknowledgement or
  // answer to its probes: the start was lost, or the receiving process does
  // not read) fails with Unavailable; a receiver that waits for memory for
  // it (a RecvInto) answers the probes, and its sender waits.
  std::chrono::milliseconds partial_timeout{10000};
  // The via networks (VIA-style: one connection per peer process and size
  // class). The provider: "sockets" (VIA over TCP), "ibverbs" (RDMA; fails
  // without a device) or "auto" (ibverbs when a device is present); empty:
  // $TOCL_VIA_PROVIDER, else "auto".
  std::string via_provider = {};
  // The most VIs a via network keeps open; past it the least recently used
  // are closed (nothing is lost; a later send reconnects). 0:
  // $TOCL_VIA_MAX_VIS, else 1024.
  size_t via_max_vis = 0;
};

}  // namespace tocl
