// The frames of one tcp stream (this process to one peer process, over one
// network) from the moment they are posted until the peer says it has them.
//
// A stream's frames are numbered from 0 in the order they are posted; the
// number is implicit (a frame's place in the stream), so the wire carries
// it only in the peer's cumulative kReceived count. The window holds the
// frames from base() (the first one the peer has not acknowledged) to
// end(): first those written on the current connection, then the rest,
// waiting for the socket. A connection that is lost takes nothing with it:
// Rewind() makes every frame held "to be written" again, and the peer's
// answer to the next connection's kResume says where writing resumes.
//
// Ownership: each frame's slot carries one reference, dropped (pool->Unref:
// the slot may come from another network's pool) when the peer
// acknowledges it (kSent) or the window fails it (kFailed); Take hands the
// references over instead.
//
// Threading: none of its own; OutboundConnection guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "buffers/buffer_slot.h"

namespace tocl::subsystem::tcp {

// A new stream's id (tcp's stream to a peer, via's per (peer, class)):
// random, never 0 (none). The peer keys what it received by the sender's
// process and the id, so an id is unlikely to be any earlier stream's or
// anyone else's.
uint64_t NewStreamId();

class SendWindow {
 public:
  struct Entry {
    detail::BufferSlot* slot;
    size_t bytes;  // header + payload
  };

  SendWindow() = default;
  SendWindow(const SendWindow&) = delete;
  SendWindow& operator=(const SendWindow&) = delete;
  ~SendWindow() { Fail(); }

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // Bytes of every frame held (header included).
  size_t bytes() const { return bytes_; }
  // The stream number of the first frame held, and of the next one posted.
  uint64_t base() const { return base_; }
  uint64_t end() const { return base_ + count_; }
  // Frames ever written whole on some connection, as a stream number: a
  // peer cannot have received past it.
  uint64_t sent_end() const { return sent_end_; }
  // The first frame not yet written whole on this connection (an index
  // from base()), and how much of it is.
  size_t unwritten() const { return unwritten_; }
  size_t head_written() const { return head_written_; }
  bool AllWritten() const { return unwritten_ == count_; }

  // The frame at index `i` from base().
  const Entry& operator[](size_t i) const { return entries_[(head_ + i) & (capacity_ - 1)]; }

  // A frame posted: last in the stream, not written.
  void Push(Entry entry);
  // `written` more bytes of the unwritten frames went to the socket.
  // Returns the frames that became whole.
  size_t Written(size_t written);
  // The peer has every frame before stream number `count` (base() <= count
  // <= end(), checked by the caller): they leave the window, kSent.
  // Returns how many left.
  size_t Acknowledge(uint64_t count);
  // The connection is lost: every frame held is to be written again.
  void Rewind();
  // Every frame held, oldest first, with its reference (they are posted
  // elsewhere): the window is empty and base() moves past them.
  std::vector<Entry> Take();
  // Every frame held fails (kFailed) and leaves.
  void Fail();

 private:
  void PopFront();

  std::unique_ptr<Entry[]> entries_;  // a ring that doubles when full
  size_t capacity_ = 0;               // a power of two
  size_t head_ = 0;
  size_t count_ = 0;
  size_t bytes_ = 0;
  uint64_t base_ = 0;
  uint64_t sent_end_ = 0;
  size_t unwritten_ = 0;
  size_t head_written_ = 0;
};

}  // namespace tocl::subsystem::tcp
