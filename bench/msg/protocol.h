// What the coordinator of `tocl-bench msg` and its two peer processes say to
// each other over their control sockets (SOCK_SEQPACKET: one command, one
// reply, never split).
//
// The coordinator sends the same Command to both peers; each peer runs its
// side (the initiator pings or sends and measures, the responder answers or
// receives) and answers with one Reply. Commands and replies are plain
// structs: both ends are forks of one binary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tocl::bench::msg {

inline constexpr uint32_t kMaxPairs = 64;                // sender/receiver thread pairs per run
inline constexpr size_t kMaxPayload = size_t{64} << 10;  // the largest message the raw rings carry
inline constexpr size_t kMaxLongPayload = size_t{64} << 20;  // long messages (memcpy, tocl)

// The initiator measures (pinger, sender); the responder answers (ponger, receiver).
enum class Role : uint32_t { kInitiator, kResponder };

enum class Op : uint32_t {
  kStartRuntime,      // tocl::Runtime::Start (subsystems, via_provider, spin_us, text = the
                      // daemon address); replies the main Gid
  kEnroll,            // enroll up to `count` Gids in this process; replies all of them
  kSetPeerThreads,    // `gids` are the other peer's Gids
  kRun,               // one measured run of `contender`
  kStartIdleThreads,  // `count` enrolled threads blocked in Recv
  kStopIdleThreads,
  kIdleWindow,  // sleep `measure_ns`, reply the process's CPU use over it
  kExit,        // shut the runtime down and exit
};

// What a run measures. Raw ones need no tocl; tocl ones need kStartRuntime first.
enum class Contender : uint32_t {
  kRawShmPingPong,      // cache-line flag + payload in a MAP_SHARED region, both spinning
  kRawTcpPingPong,      // loopback TCP, blocking sockets, TCP_NODELAY
  kRawTcpPollPingPong,  // the same, non-blocking recv in a spin loop on both sides
  kRawFutexPingPong,    // FUTEX_WAIT / FUTEX_WAKE on a shared word, the waiter asleep
  kMemcpy,              // memcpy of the message size in the initiator alone
  kRawShmStream,        // ring of slots in the shared region: copy in, copy out
  kRawTcpStream,        // loopback TCP, blocking sockets
  kToclPingPong,        // Runtime::Send / Recv
  kToclStream,
  kToclIrecvPingPong,    // the initiator posts an Irecv, Sends, then Waits (tocl/request.h)
  kToclHandlerPingPong,  // the responder replies from a message handler (tocl/handler.h)
  // A 16-value header and a body of `size` bytes, one way, answered by 8 B:
  kToclPackedPingPong,         // packed (tocl/packed_message.h), placed by a header handler
  kToclPrepackedPingPong,      // one Send of the same bytes pre-packed, received with Recv
  kToclPrepackedIntoPingPong,  // the same, received with RecvInto (into the receiver's memory)
};
std::string_view ContenderName(Contender contender);
inline bool IsPingPong(Contender c) {
  return c == Contender::kRawShmPingPong || c == Contender::kRawTcpPingPong ||
         c == Contender::kRawTcpPollPingPong || c == Contender::kRawFutexPingPong ||
         c == Contender::kToclPingPong || c == Contender::kToclIrecvPingPong ||
         c == Contender::kToclHandlerPingPong || c == Contender::kToclPackedPingPong ||
         c == Contender::kToclPrepackedPingPong || c == Contender::kToclPrepackedIntoPingPong;
}
inline bool IsTocl(Contender c) {
  return c == Contender::kToclPingPong || c == Contender::kToclStream ||
         c == Contender::kToclIrecvPingPong || c == Contender::kToclHandlerPingPong ||
         c == Contender::kToclPackedPingPong || c == Contender::kToclPrepackedPingPong ||
         c == Contender::kToclPrepackedIntoPingPong;
}

struct Command {
  Op op = Op::kRun;
  Contender contender = Contender::kRawShmPingPong;
  uint32_t size = 8;       // payload bytes per message
  uint32_t pairs = 1;      // thread pairs (streams only)
  uint32_t count = 0;      // kEnroll, kStartIdleThreads
  uint32_t run_id = 0;     // unique per run: stale flags of earlier runs never match
  int64_t warmup_ns = 0;   // unmeasured traffic before the measurement
  int64_t measure_ns = 0;  // how long the measurement runs
  int64_t batch_ns = 0;    // ping-pong: round trips are timed in batches about this long
  int64_t spin_us = -1;    // kStartRuntime: RuntimeOptions::spin (-1: the default)
  uint32_t gid_count = 0;
  uint64_t gids[kMaxPairs] = {};
  char subsystems[16] = {};    // kStartRuntime: "shm", "tcp" or "via"
  char via_provider[16] = {};  // kStartRuntime: "sockets", "ibverbs" ("": the runtime's default)
  char text[232] = {};         // kStartRuntime: the daemon address
};

struct Reply {
  int32_t code = 0;  // tocl::StatusCode
  char message[232] = {};
  // Ping-pong (initiator): one-way latency of the batches, in ns.
  double p50_ns = 0;
  double min_ns = 0;
  uint64_t samples = 0;    // batches timed
  uint64_t per_batch = 0;  // round trips per batch
  // Streams (initiator): messages counted between two acknowledged markers.
  uint64_t messages = 0;
  double seconds = 0;
  // kIdleWindow: CPU time (user + system) over wall time, percent of one core.
  double cpu_percent = 0;
  uint32_t gid_count = 0;
  uint64_t gids[kMaxPairs] = {};
};

// Both travel as raw bytes (one SOCK_SEQPACKET message each, checked for
// exactly sizeof on receipt) between forks of one binary.
static_assert(std::is_trivially_copyable_v<Command> && std::is_trivially_copyable_v<Reply>);
static_assert(sizeof(Command) <= 1024 && sizeof(Reply) <= 1024,
              "a control message must stay far below the socket's buffer");

}  // namespace tocl::bench::msg
