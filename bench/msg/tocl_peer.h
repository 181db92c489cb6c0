// The tocl side of `tocl-bench msg`: one tocl::Runtime in a peer process and
// the measured runs over it. Kept apart from the baselines so that they build
// and run while the runtime does not: tocl_peer.cc is the real thing (built
// when the runtime library is, see bench/CMakeLists.txt), tocl_peer_stub.cc
// says the runtime is not built.
//
// Runs mirror the raw ones (same timing loops, same copies): a ping-pong
// sends with Send(from, to, tag, span) (the copy into a pool buffer is the
// copy into the shared slot of the raw baseline) and copies each received
// payload out of its Buffer into a private one (the raw copy out); a stream
// does the same one way. Threading: one thread drives a peer; runs with
// several pairs start their own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "run_spec.h"
#include "tocl/status.h"

namespace tocl::bench::msg {

struct ToclPeerOptions {
  std::string daemon_address;
  std::string subsystems;    // "shm", "tcp" or "via"
  std::string via_provider;  // RuntimeOptions::via_provider; empty: the runtime's default
  std::string name;          // the process's name in the directory
  // RuntimeOptions::spin; negative: the runtime's default.
  std::chrono::microseconds spin{-1};
};

class ToclPeer {
 public:
  virtual ~ToclPeer() = default;

  // Enrolls Gids until this process has `count` (the first is the main
  // thread's, enrolled at start) and returns them all, raw.
  virtual Result<std::vector<uint64_t>> Enroll(size_t count) = 0;
  // The other peer's Gids, in the same order as its Enroll returned them.
  virtual void SetPeerThreads(std::vector<uint64_t> gids) = 0;

  // `count` more enrolled threads, each blocked in Recv until stopped.
  virtual Status StartIdleThreads(size_t count) = 0;
  // Sends each idle thread a message that ends its Recv, joins it and
  // unregisters it.
  virtual Status StopIdleThreads() = 0;

  // How the ping-pong's messages are received.
  enum class Way {
    kRecv,     // a blocking Recv on each side
    kIrecv,    // the initiator: an Irecv posted before its Send, a Wait after
    kHandler,  // the responder: a message handler (tocl/handler.h) that replies
  };
  // One side of a ping-pong between main threads (Gid 0 of each peer).
  virtual Status PingPong(Role role, const RunSpec& spec, LatencyResult* out,
                          Way way = Way::kRecv) = 0;
  // One side of a one-way transfer answered by an 8 B reply: a header of
  // 16 u64 values and a body of spec.size bytes.
  enum class Packing {
    kPacked,         // a packed message; the responder's header handler places the body
    kPrepacked,      // one Send of the same bytes pre-packed in one buffer; Recv
    kPrepackedInto,  // the same; RecvInto the responder's memory
  };
  virtual Status PackedPingPong(Role role, const RunSpec& spec, LatencyResult* out,
                                Packing packing) = 0;
  // One side of spec.pairs streams: pair j from this peer's Gid j to the
  // other's Gid j, each on its own thread.
  virtual Status Stream(Role role, const RunSpec& spec, StreamResult* out) = 0;

  // Runtime::Shutdown.
  virtual Status Shutdown() = 0;
};

// False when this build has no runtime to measure (the stub).
bool ToclRuntimeBuilt();

// Whether the via subsystem's ibverbs provider finds an RDMA device on this
// machine (false when this build has no via subsystem or no runtime).
// Starts no thread: the coordinator asks before it forks its peers
// (via_probe.cc).
bool ViaIbverbsDevicePresent();

// Runtime::Start with `options`, then enrolls the main thread.
Result<std::unique_ptr<ToclPeer>> StartToclPeer(const ToclPeerOptions& options);

}  // namespace tocl::bench::msg
