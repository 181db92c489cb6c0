// The two streams of frames between this process and one peer process in
// one size class (a ViEntry's): ours to the peer and the peer's to us.
// They outlive the VIs that carry them, so that a VI that breaks while both
// processes live loses nothing and delivers nothing twice.
//
// Ours: every frame posted is numbered by its place in the stream and
// stays in the window (tcp's SendWindow) until the peer acknowledges it;
// only then is it kSent. The peer's: the count of its frames handed to the
// runtime. Each stream is named by a random 64-bit id its sender draws, so
// that a count is never applied to another stream (a peer's entry that
// broke and started again).
//
// A VI that connects agrees where each direction resumes, from the two
// ConnectData of its request and accept: our frames the peer says it has
// are acknowledged and sending starts again after them, and the peer
// starts again after what we said we have (or at its first frame not
// acknowledged, when it moved its frames to another network). A VI numbers
// the frames it carries from there; an old VI may still deliver frames, so
// a frame whose number the count has passed is a second copy and dropped.
//
// Threading: none of its own; the entry's mutex guards it.
#pragma once

#include <cstdint>
#include <optional>

#include "subsystem/tcp/send_window.h"
#include "subsystem/via/provider.h"
#include "tocl/status.h"

namespace tocl::subsystem::via {

// `low`, the low 32 bits of a count, as the full count nearest `near`.
uint64_t WidenCount(uint64_t near, uint32_t low);

class StreamPair {
 public:
  struct Resume {
    uint64_t send_from;     // the number of our first frame the VI carries
    uint64_t receive_from;  // the number of the peer's first frame on it
  };

  StreamPair();  // draws our stream's id
  StreamPair(const StreamPair&) = delete;
  StreamPair& operator=(const StreamPair&) = delete;

  tcp::SendWindow& window() { return *window_; }
  const tcp::SendWindow& window() const { return *window_; }
  uint64_t stream() const { return stream_; }
  uint64_t peer_stream() const { return peer_stream_; }
  // The peer's frames handed to the runtime (or moved past: see Agree).
  uint64_t received() const { return received_; }

  // Fills our part of a connect request or accept: our stream and the
  // first frame not acknowledged, the peer's stream and our count of it.
  void Describe(ConnectData& data) const;
  // Where a VI resumes, from `ours` (the data we sent for it, Describe'd)
  // and `theirs` (the peer's). Learns the peer's stream, and moves the count
  // up to the peer's first frame not acknowledged (what came before went
  // another way). InvalidArgument, changing nothing, when the peer says it
  // has frames of ours that were never sent.
  Result<Resume> Agree(const ConnectData& ours, const ConnectData& theirs);
  // The peer's frame `number` arrived on a VI of the peer's current stream:
  // true when it is the next one (the count moves on: hand it to the
  // runtime), false for a second copy. InvalidArgument for one past the
  // next (a gap: the peer broke the protocol).
  Result<bool> Arrived(uint64_t number);
  // A new stream of ours, numbered from 0 (the entry starts again after it
  // broke for good). The window must be empty.
  void Renew();

 private:
  std::optional<tcp::SendWindow> window_;  // emplaced again by Renew
  uint64_t stream_;
  uint64_t peer_stream_ = 0;  // 0: none heard of yet
  uint64_t received_ = 0;
};

}  // namespace tocl::subsystem::via
