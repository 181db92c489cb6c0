// Another messaging library measured as a peer of tocl in the rounds of
// `tocl-bench msg --peers`: one case (ping-pong or stream, one size, one
// transport) run in the library's own two processes, each call a fresh run.
//
//   std::unique_ptr<LibraryPeer> ucx = UcxPeer(UcxTest::kTagLat, UcxTransport::kPosix, 8);
//   TOCL_ASSIGN_OR_RETURN(LibraryFigures figures, ucx->Run(warmup, measure));
//
// Not thread-safe: one thread runs a peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "mpi_pingpong.h"
#include "tocl/status.h"
#include "ucx_perftest.h"

namespace tocl::bench::msg {

// What a run measured, in the terms of tocl-bench's own runs (protocol.h's
// Reply): a ping-pong's one-way latency, or a stream's messages and time.
struct LibraryFigures {
  double one_way_ns = 0;
  uint64_t messages = 0;
  double seconds = 0;
};

class LibraryPeer {
 public:
  virtual ~LibraryPeer() = default;
  // One run: about `warmup` of unmeasured traffic, then about `measure`.
  virtual Result<LibraryFigures> Run(std::chrono::nanoseconds warmup,
                                     std::chrono::nanoseconds measure) = 0;
};

// ucx_perftest: tag_lat's half round trip (its per-iteration p50), or
// tag_bw's overall message rate (messages / seconds).
std::unique_ptr<LibraryPeer> UcxPeer(UcxTest test, UcxTransport transport, uint32_t size);
// tocl-bench-mpi-pingpong under mpiexec.
std::unique_ptr<LibraryPeer> MpiPeer(MpiCase what, MpiBtl btl, uint32_t size);

// Ok when both UCX and Open MPI can be run; else what to install.
Status LibraryPeersAvailable();

}  // namespace tocl::bench::msg
