#include "subsystem/tcp/reverse_acks.h"

#include <algorithm>

namespace tocl::subsystem::tcp {

void ReverseAck::Owe(uint64_t stream, uint64_t count) {
  {
    std::lock_guard lock(mu_);
    if (stream != stream_) {
      // The peer's stream changed: what was carried was for the old one.
      stream_ = stream;
      carried_ = 0;
    } else if (count <= carried_) {
      return;
    }
    count_ = count;
  }
  owed_.store(true, std::memory_order_release);
}

bool ReverseAck::Take(uint64_t* stream, uint64_t* count) {
  if (!owed_.load(std::memory_order_acquire) || !owed_.exchange(false)) return false;
  std::lock_guard lock(mu_);
  if (count_ <= carried_) return false;
  *stream = stream_;
  *count = count_;
  return true;
}

void ReverseAck::Carried(uint64_t stream, uint64_t count) {
  std::lock_guard lock(mu_);
  if (stream == stream_) carried_ = std::max(carried_, count);
}

uint64_t ReverseAck::carried(uint64_t stream) const {
  std::lock_guard lock(mu_);
  return stream == stream_ ? carried_ : 0;
}

std::shared_ptr<ReverseAck> ReverseAcks::For(Gid peer_process) {
  std::lock_guard lock(mu_);
  auto& ack = by_peer_[peer_process.raw()];
  if (!ack) ack = std::make_shared<ReverseAck>();
  return ack;
}

void ReverseAcks::Expire() {
  std::lock_guard lock(mu_);
  std::erase_if(by_peer_, [](const auto& entry) { return entry.second.use_count() == 1; });
}

}  // namespace tocl::subsystem::tcp
