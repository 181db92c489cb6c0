#include "subsystem/via/stream_pair.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace tocl::subsystem::via {

uint64_t WidenCount(uint64_t near, uint32_t low) {
  const auto difference = static_cast<int32_t>(low - static_cast<uint32_t>(near));
  return near + static_cast<uint64_t>(static_cast<int64_t>(difference));
}

StreamPair::StreamPair() : stream_(tcp::NewStreamId()) {
  window_.emplace();
}

void StreamPair::Describe(ConnectData& data) const {
  data.stream = stream_;
  data.base = static_cast<uint32_t>(window_->base());
  data.peer_stream = peer_stream_;
  data.received = static_cast<uint32_t>(received_);
}

Result<StreamPair::Resume> StreamPair::Agree(const ConnectData& ours, const ConnectData& theirs) {
  // Ours, from the base announced (for the VI that carries the stream the
  // caller holds acknowledgements back at it meanwhile).
  const uint64_t base = WidenCount(window_->base(), ours.base);
  uint64_t send_from = base;
  if (theirs.peer_stream == stream_) {
    const uint64_t has = WidenCount(base, theirs.received);
    if (has > std::max(base, window_->sent_end())) {
      return InvalidArgument(
          fmt::format("the peer says it has {} frames of stream {:#x}, of which {} were sent", has,
                      stream_, window_->sent_end()));
    }
    send_from = std::max(base, has);
  }
  // Theirs: a stream new to us starts at its base (counted from 0, so its
  // 32 bits are the whole number).
  uint64_t peer_base = theirs.base;
  if (theirs.stream != peer_stream_) {
    peer_stream_ = theirs.stream;
    received_ = 0;
  } else {
    peer_base = WidenCount(received_, theirs.base);
  }
  received_ = std::max(received_, peer_base);
  uint64_t receive_from = peer_base;
  if (ours.peer_stream == theirs.stream) {
    receive_from = std::max(peer_base, WidenCount(peer_base, ours.received));
  }
  return Resume{.send_from = send_from, .receive_from = receive_from};
}

Result<bool> StreamPair::Arrived(uint64_t number) {
  if (number < received_) return false;
  if (number > received_) {
    return InvalidArgument(fmt::format("frame {} of stream {:#x} arrived while {} was the next",
                                       number, peer_stream_, received_));
  }
  ++received_;
  return true;
}

void StreamPair::Renew() {
  assert(window_->empty());
  window_.emplace();
  stream_ = tcp::NewStreamId();
}

}  // namespace tocl::subsystem::via
