// Registered message buffers (the ToCL paper's bfget / bfstat / bfret).
//
// A Buffer is a move-only handle to a pool buffer of one size class: 2^y
// bytes with 2^(y-1) < payload + header <= 2^y, from 256 B up to the
// runtime's short maximum (64 KiB by default). Its memory is registered with
// the network it came from once, per slab, so sending it costs no
// registration and no allocation. Get one with Runtime::GetBuffer (bfget);
// destroying the handle gives it back to its pool (bfret).
//
//   tocl::Buffer buffer = *runtime->GetBuffer(64);
//   std::memcpy(buffer.data(), "hello", 5);
//   buffer.resize(5);
//   runtime->Send(me, peer, /*tag=*/7, std::move(buffer));  // returned to the pool once sent
//
// Sending by rvalue is the paper's "return to the pool after sending" flag.
// Sending by lvalue keeps the handle: the library holds its own reference
// while the buffer is queued or in flight, state() (bfstat) tells where it
// is, and the handle may be sent again, or dropped, at any time; the caller
// must not write to it until state() is kSent or kFailed.
//
// A received message is a Buffer too: source(), tag() and the payload. It
// can be sent on as it is, without a copy.
//
// Threading: a Buffer is owned by one thread at a time; state() may be read
// from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tocl/export.h"
#include "tocl/gid.h"

namespace tocl {

namespace detail {
struct BufferSlot;
}

// Which network's pool a buffer comes from (the networks are the runtime's
// subsystems). kFastest picks shm when it is enabled, else tcp, else via.
// kVia buffers are registered with the via network (an ibverbs memory
// region), so that network sends them without a copy. A buffer taken for a
// network is sent over it when that network reaches the destination;
// otherwise over the network the destination is reached by.
enum class Network : uint8_t { kFastest, kShm, kTcp, kVia };
TOCL_EXPORT std::string_view NetworkName(Network network);  // "fastest", "shm", "tcp", "via"

// bfstat: where a buffer is. A new or received buffer is kIdle.
enum class BufferState : uint8_t {
  kIdle,      // owned by the application
  kQueued,    // in the send queue, waiting for the network (flow control, connecting)
  kInFlight,  // handed to the network, not yet complete
  kSent,      // the network is done with it; the handle may be reused
  kFailed,    // could not be sent (peer gone, connection lost); see Runtime logs
};
TOCL_EXPORT std::string_view BufferStateName(BufferState state);

// What GetBuffer does when the pools are at their memory cap.
enum class AtCap { kWait, kFail };

using Tag = uint32_t;
// Matches any tag in Recv/Probe; not a valid tag to send.
inline constexpr Tag kAnyTag = 0xFFFF'FFFFu;

class TOCL_EXPORT Buffer {
 public:
  Buffer() = default;  // empty: valid() is false
  ~Buffer() { Release(); }
  Buffer(Buffer&& other) noexcept : slot_(other.slot_) { other.slot_ = nullptr; }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  bool valid() const { return slot_ != nullptr; }
  explicit operator bool() const { return valid(); }

  // The payload: size() bytes, room for capacity() (class size minus header).
  std::byte* data();
  const std::byte* data() const;
  size_t size() const;
  size_t capacity() const;
  // Sets the payload length; false (and no change) when n > capacity().
  bool resize(size_t n);
  std::span<std::byte> span() { return {data(), size()}; }
  std::span<const std::byte> span() const { return {data(), size()}; }

  size_t size_class() const;  // 2^y, header included
  Network network() const;    // the pool it belongs to
  BufferState state() const;  // bfstat

  // For received messages (and for a sent buffer, what it was sent as).
  Gid source() const;
  Gid destination() const;
  Tag tag() const;

  // bfret: gives the buffer back now (the destructor does the same).
  void Release();

  // For the library: adopts one reference to `slot`.
  explicit Buffer(detail::BufferSlot* slot) : slot_(slot) {}
  detail::BufferSlot* slot() const { return slot_; }
  detail::BufferSlot* Detach() {
    auto* slot = slot_;
    slot_ = nullptr;
    return slot;
  }

 private:
  detail::BufferSlot* slot_ = nullptr;
};

}  // namespace tocl
