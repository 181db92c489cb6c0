// The TCP baselines: two processes and a loopback connection, nothing else.
//
// The coordinator makes the connection before it forks the peers
// (ConnectedLoopbackPair); each peer gets one end. Every function runs one
// side of one run (the initiator measures); both sides get the same spec.
// Errors: Unavailable when the connection fails, DeadlineExceeded when the
// other side stops answering (30 s), DataLoss when a message comes back wrong.
#pragma once

#include <utility>

#include "fd.h"
#include "run_spec.h"
#include "tocl/status.h"

namespace tocl::bench::msg {

// A connected TCP pair on 127.0.0.1, TCP_NODELAY on both ends, close-on-exec.
Result<std::pair<Fd, Fd>> ConnectedLoopbackPair();

// Messages of spec.size bytes back and forth. Blocking: send() and
// recv(MSG_WAITALL) on blocking sockets. Polling: non-blocking sockets, both
// sides calling recv() in a spin loop until the message is there.
Status RawTcpPingPong(Role role, int fd, bool polling, const RunSpec& spec, LatencyResult* out);

// The initiator writes spec.size-byte messages as fast as the socket takes
// them; the responder reads each one whole into a private buffer.
Status RawTcpStream(Role role, int fd, const RunSpec& spec, StreamResult* out);

}  // namespace tocl::bench::msg
