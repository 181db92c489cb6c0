// What this process has received of each peer's tcp streams (the receiving
// end of send_window.h), kept across the connections that carry a stream:
// when a broken connection is replaced, the new one resumes where the
// stream's count stands, so that nothing is delivered twice and nothing
// the peer still holds is skipped.
//
// Memory: a stream whose last connection closed is forgotten `linger`
// after (its sender has failed it by then: its unreachable_timeout), and
// at most kMaxIdle of them are kept (the oldest go first). A stream that
// comes back after it was forgotten resumes where its sender says; the
// runtime drops what it then receives twice (pair_order.h).
//
// Threading: the polling thread only (the TcpSubsystem's inbound side).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "tocl/gid.h"

namespace tocl::subsystem::tcp {

class InboundConnection;

struct ReceivedStream {
  Gid peer;
  uint64_t id = 0;
  // Frames handed to the runtime: the count kReceived reports.
  uint64_t received = 0;
  // The count last reported to the peer, and the bytes received since.
  uint64_t reported = 0;
  size_t unreported_bytes = 0;
  // The connection carrying it now (none between connections), and since
  // when it has had none.
  InboundConnection* connection = nullptr;
  std::chrono::steady_clock::time_point idle_since;
};

class ReceivedStreams {
 public:
  static constexpr size_t kMaxIdle = 4096;

  // Stream `id` of `peer` goes on over `connection` with frame number
  // `from` (the sender's first frame not acknowledged): made if unknown;
  // its count moves up to `from` (what comes before went another way). The
  // connection that carried it so far, if still open, is returned in
  // `*replaced`: the caller closes it (what it has not read is sent again).
  ReceivedStream& Resume(Gid peer, uint64_t id, uint64_t from, InboundConnection* connection,
                         InboundConnection** replaced);
  // `connection` no longer carries `stream`.
  void Detach(ReceivedStream& stream, InboundConnection* connection,
              std::chrono::steady_clock::time_point now);
  // Forgets streams idle for `linger` or more, and the oldest idle ones
  // past kMaxIdle.
  void Expire(std::chrono::steady_clock::time_point now, std::chrono::milliseconds linger);

  size_t size() const { return streams_.size(); }

 private:
  // By (peer process, stream id); std::map: entries stay where they are.
  std::map<std::pair<uint64_t, uint64_t>, ReceivedStream> streams_;
};

}  // namespace tocl::subsystem::tcp
