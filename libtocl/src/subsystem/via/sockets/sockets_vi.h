// One VI of the sockets provider: a TCP connection carrying VIA's
// semantics, as M-VIA carried them over Ethernet.
//
// The stream starts with the data plane's handshake (security/handshake.h)
// around the connection request:
//   active:  [ConnectData (32)][nonce (32)]
//   passive: [u32 0][nonce (32)][MAC (32)]   or a reject (below), when the
//                                            request is not for this process
//   active:  [proof MAC (32)]
//   passive: [u32 0][ConnectData] (accept) or [u32 1][u32 n][n bytes of
//            reason] (reject)
// The passive side's connection manager sees the request only after the
// proof, so a stranger makes no VI and posts no descriptor. Then messages
// both ways, each [u32 length][u32 immediate][length bytes].
//
// The receiving side keeps VIA's rules: a message lands in the buffer of
// the oldest posted receive descriptor; a message that finds none, or is
// larger than that buffer (the descriptor completes with a length error),
// breaks the VI. Nothing is skipped, nothing waits for a descriptor.
//
// Threading: mu_ guards the state, the send queue and the receive FIFO.
// Senders write under mu_ (so no write goes to an fd number being reused);
// only the polling thread reads and closes the fd. A break on any thread
// shuts the socket down and asks the provider to finish the VI on the
// polling thread, which completes what is left and reports OnClosed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "security/handshake.h"
#include "subsystem/reactor.h"
#include "subsystem/tcp/socket.h"
#include "subsystem/via/provider.h"

namespace tocl::subsystem::via {

class SocketsProvider;

class SocketsVi final : public ProviderVi, public FdHandler {
 public:
  static constexpr size_t kPacketHeaderBytes = 8;
  static constexpr size_t kStagingBytes = 16 << 10;
  // Payloads longer than this are read straight into their buffer.
  static constexpr size_t kDirectReadBytes = 4 << 10;
  static constexpr uint32_t kMaxReasonBytes = 256;

  SocketsVi(SocketsProvider& owner, void* context);
  ~SocketsVi() override;
  SocketsVi(const SocketsVi&) = delete;
  SocketsVi& operator=(const SocketsVi&) = delete;

  Status ConnectRequest(std::string_view address, const ConnectData& data) override;
  Status PostSend(const Descriptor& descriptor, bool* done_now) override;
  Status PostRecv(const Descriptor& descriptor) override;
  void Disconnect(std::string_view why) override;

  void OnReady(uint32_t events) override;

  // Passive side, after the accept was written on `fd`: the VI is connected.
  Status Adopt(Fd fd, std::string peer_address);
  // Polling thread: completes what is left (errors), closes, OnClosed.
  void Finish();
  // Any thread: the VI is broken for good (idempotent).
  void Break(Status why);

 private:
  enum class State { kIdle, kConnecting, kAwaitReply, kConnected, kBroken, kFinished };

  struct PendingSend {
    Descriptor descriptor;
    std::array<std::byte, kPacketHeaderBytes> header;
    size_t written = 0;  // of header + bytes
  };

  // Writes queued sends while the socket takes them; returns the finished
  // ones through `done` (reported by the caller after unlocking).
  void FlushLocked(std::vector<detail::BufferSlot*>& done);
  void UpdateInterestLocked();
  void BreakLocked(Status why);
  // Polling thread, no lock: reads and dispatches what arrived.
  void ReadSome();
  // Consumes the accept/reject reply at the front of the staging buffer
  // (the handshake's answer first). False: not complete yet, or the VI
  // broke.
  bool TakeReply();
  // The passive side's handshake answer (after its verdict 0): checks it
  // and queues our proof. False when the VI broke.
  bool TakeAnswer(const std::byte* answer);
  // Consumes whole messages from staging; returns false once broken.
  bool TakeMessages();
  bool CompleteDirect();
  // The head receive descriptor for a message of `length` bytes, or null
  // (the VI is then broken with VIA's error).
  detail::BufferSlot* TakeDescriptor(uint32_t length, uint32_t* capacity);
  void ReportSendDone(std::vector<detail::BufferSlot*>& done);

  SocketsProvider& owner_;
  void* const context_;

  std::mutex mu_;
  // Guarded by mu_:
  State state_ = State::kIdle;
  Fd fd_;
  bool registered_ = false;  // fd in the reactor
  bool want_write_ = false;
  Status why_;
  std::string peer_;                // for messages
  std::vector<std::byte> request_;  // the active side's request (then proof), unwritten part
  std::optional<security::ConnectorHandshake> handshake_;  // active side, until the answer
  std::deque<PendingSend> sends_;                          // posted, not yet written whole
  std::deque<Descriptor> receives_;                        // posted receive descriptors, FIFO

  // Polling thread only:
  std::unique_ptr<std::byte[]> staging_;
  size_t begin_ = 0;
  size_t end_ = 0;
  detail::BufferSlot* direct_ = nullptr;  // a message being read into its buffer
  size_t direct_filled_ = 0;
  size_t direct_length_ = 0;
  uint32_t direct_immediate_ = 0;
};

}  // namespace tocl::subsystem::via
