// tocl::Buffer: the public handle over a BufferSlot.
#include "tocl/buffer.h"

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/large_slot.h"

namespace tocl {

std::string_view NetworkName(Network network) {
  switch (network) {
    case Network::kFastest:
      return "fastest";
    case Network::kShm:
      return "shm";
    case Network::kTcp:
      return "tcp";
    case Network::kVia:
      return "via";
  }
  return "unknown";
}

std::string_view BufferStateName(BufferState state) {
  switch (state) {
    case BufferState::kIdle:
      return "idle";
    case BufferState::kQueued:
      return "queued";
    case BufferState::kInFlight:
      return "in flight";
    case BufferState::kSent:
      return "sent";
    case BufferState::kFailed:
      return "failed";
  }
  return "unknown";
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    slot_ = other.slot_;
    other.slot_ = nullptr;
  }
  return *this;
}

std::byte* Buffer::data() {
  return slot_->payload();
}
const std::byte* Buffer::data() const {
  return slot_->payload();
}
size_t Buffer::size() const {
  // A long message's length does not fit the frame's 32-bit length field.
  return buffers::IsLarge(slot_) ? slot_->header().total : slot_->header().length;
}
size_t Buffer::capacity() const {
  if (buffers::IsLarge(slot_)) return slot_->header().total;
  return buffers::ClassBytes(slot_->class_index) - wire::kHeaderBytes;
}
bool Buffer::resize(size_t n) {
  if (n > capacity()) return false;
  if (buffers::IsLarge(slot_)) {
    slot_->header().total = n;
  } else {
    slot_->header().length = static_cast<uint32_t>(n);
  }
  return true;
}
size_t Buffer::size_class() const {
  if (buffers::IsLarge(slot_)) return capacity() + wire::kHeaderBytes;
  return buffers::ClassBytes(slot_->class_index);
}
Network Buffer::network() const {
  return slot_->pool->network();
}
BufferState Buffer::state() const {
  return static_cast<BufferState>(slot_->state.load(std::memory_order_acquire));
}
Gid Buffer::source() const {
  return Gid::FromRaw(slot_->header().source);
}
Gid Buffer::destination() const {
  return Gid::FromRaw(slot_->header().destination);
}
Tag Buffer::tag() const {
  return slot_->header().tag;
}

void Buffer::Release() {
  if (slot_ == nullptr) return;
  slot_->pool->Unref(slot_);
  slot_ = nullptr;
}

}  // namespace tocl
