// The connection behind a tcp Route: this process sending to one peer
// process. It runs the handshake first (security/handshake.h: our hello
// with our nonce, the peer's answer, checked, then our proof), then writes
// the posted frames in order, gathering up to 64 of them per sendmsg().
// Frames posted meanwhile wait in the queue; a peer that fails its part of
// the handshake, or does not answer within the handshake timeout, breaks
// the route.
//
// Ownership: the TcpSubsystem owns it; the TcpRoute handle the runtime
// holds only points at it. A queued slot carries one reference that is
// dropped (slot->pool->Unref: the slot may come from another network's
// pool) when its frame has been written (kSent) or can never be (kFailed).
//
// Threading: the output side (queue, fd, state) is guarded by mu_: senders
// call Post (one at a time per route, under the runtime's destination lock)
// while the polling thread writes on EPOLLOUT and notices the peer going
// away. Nothing here blocks on the network.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "buffers/buffer_slot.h"
#include "security/handshake.h"
#include "subsystem/reactor.h"
#include "subsystem/tcp/connection_context.h"
#include "subsystem/tcp/socket.h"
#include "tocl/gid.h"
#include "tocl/status.h"
#include "wire/frame.h"

namespace tocl::subsystem::tcp {

class OutboundConnection final : public subsystem::FdHandler {
 public:
  // Frames gathered into one sendmsg() call.
  static constexpr size_t kMaxFramesPerWrite = 64;

  OutboundConnection(ConnectionContext& context, Gid peer_process, const SocketAddress& address);
  ~OutboundConnection() override;
  OutboundConnection(const OutboundConnection&) = delete;
  OutboundConnection& operator=(const OutboundConnection&) = delete;

  // Creates the socket and starts connecting. A connection the peer refuses
  // is not an error here: the route is Broken() and Post says why. Errors:
  // no socket (ResourceExhausted for fd limits), the reactor refused the fd.
  Status Start();

  // Route::Post: Ok (taken, now kInFlight), TryAgain (the queue holds
  // max_queued_bytes_per_route already; not taken), Unavailable (broken for
  // good; not taken), InvalidArgument (the header's length does not fit the
  // slot; not taken).
  Status Post(detail::BufferSlot* slot);
  bool Drained() const;
  bool Broken() const;

  void OnReady(uint32_t events) override;

  // Fails every queued frame and closes the socket, quietly (the subsystem
  // is closing, or the runtime dropped the route). Any thread.
  void Shutdown(std::string_view why);

  Gid peer_process() const { return peer_process_; }
  const SocketAddress& address() const { return address_; }

  // Breaks a route whose peer has not answered our hello within `timeout`
  // of it being sent. Any thread.
  void CheckHandshakeDeadline(std::chrono::steady_clock::time_point now,
                              std::chrono::milliseconds timeout);

 private:
  enum class State { kConnecting, kHandshaking, kConnected, kBroken };
  // The hello, then the proof: a header and its payload.
  static constexpr size_t kPreambleBytes = wire::kHeaderBytes + wire::kHandshakeNonceBytes;
  static constexpr size_t kAnswerBytes =
      wire::kHeaderBytes + wire::kHandshakeNonceBytes + wire::kHandshakeMacBytes;

  struct Entry {
    detail::BufferSlot* slot;
    size_t bytes;  // header + payload
  };

  // The output queue: a ring that doubles when full, so that after warm-up
  // posting allocates nothing.
  class FrameRing {
   public:
    bool empty() const { return count_ == 0; }
    size_t size() const { return count_; }
    Entry& operator[](size_t i) { return entries_[(head_ + i) & (capacity_ - 1)]; }
    Entry& front() { return entries_[head_]; }
    void push_back(Entry entry);
    void pop_front();

   private:
    std::unique_ptr<Entry[]> entries_;
    size_t capacity_ = 0;  // a power of two
    size_t head_ = 0;
    size_t count_ = 0;
  };

  // Writes as much as the socket takes, then (de)registers EPOLLOUT.
  void FlushLocked();
  // Accounts `written` bytes: the hello, then whole frames (kSent, Unref).
  void ConsumeLocked(size_t written);
  void UpdateInterestLocked();
  // Records whether EPOLLOUT is in the mask (want_write_), and whether the
  // connection waits for an fd event (EPOLLOUT, or the connect or handshake
  // answer) in the context's count of waiting connections.
  void SetWantWriteLocked(bool want);
  // Reads what the peer sent on a send-only connection: its handshake
  // answer, then only its closing or an error.
  void CheckPeerLocked();
  // The whole answer is in: checks it and puts our proof in the preamble.
  void OnAnswerLocked();
  void SetPreambleLocked(wire::FrameKind kind, const std::byte* payload);
  // The route is broken for good: closes the socket and fails the queue.
  void BreakLocked(std::string reason, bool warn);

  ConnectionContext& context_;
  const Gid peer_process_;
  const SocketAddress address_;
  const std::string description_;  // "h1.p3 at 127.0.0.1:4000", for messages

  mutable std::mutex mu_;
  // Guarded by mu_ (so that no sender writes to an fd number being reused):
  Fd fd_;
  State state_ = State::kConnecting;
  std::string broken_reason_;
  std::optional<security::ConnectorHandshake> handshake_;  // until the answer
  std::chrono::steady_clock::time_point handshake_started_;
  std::array<std::byte, kPreambleBytes> preamble_{};  // hello, then proof
  size_t preamble_written_ = kPreambleBytes;          // nothing to write yet
  std::array<std::byte, kAnswerBytes> answer_{};
  size_t answer_filled_ = 0;
  FrameRing queue_;
  size_t queued_bytes_ = 0;
  size_t head_written_ = 0;       // bytes of the queue's first frame already written
  bool want_write_ = false;       // EPOLLOUT is in the epoll mask
  bool counted_waiting_ = false;  // counted in ConnectionContext::waiting
};

}  // namespace tocl::subsystem::tcp
