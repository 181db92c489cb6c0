// What a VIA provider offers the via subsystem: VIA's verbs (the VIPL of
// M-VIA, today's ibverbs + rdma_cm) cut down to what tocl uses.
//
//   Provider      one per process per via network: an address peers connect
//                 to, memory registration, VIs, connection requests.
//   ProviderVi    a virtual interface: a reliable, connected, bidirectional
//                 queue pair. Receive descriptors are consumed in the order
//                 they were posted (FIFO); a message larger than the head
//                 descriptor's buffer completes it with an error and breaks
//                 the VI; a message that finds no posted descriptor breaks
//                 the VI. (The subsystem's credits make sure neither
//                 happens.)
//   Completions   reported to the subsystem's CompletionHandler.
//
// The connection handshake (as VIA's ConnectRequest / ConnectWait /
// ConnectAccept, rdma_cm's connect / CONNECT_REQUEST / accept) carries a
// small ConnectData both ways: who asks, whom it means to reach (the
// discriminator: the process Gid), which size class, how many receive
// descriptors each side posted before the request or the accept, and where
// the two streams of frames stand.
//
// Two providers: sockets (each VI a TCP connection, as M-VIA ran VIA over
// Ethernet) and ibverbs (RC queue pairs). See README.md.
//
// Threading:
// - Provider::ConnectWait, CreateVi(request), ConnectAccept, ConnectReject:
//   the subsystem's connection-manager thread.
// - Provider::CreateVi(nullptr), ProviderVi::ConnectRequest, PostSend,
//   PostRecv, Disconnect: any thread, one at a time per VI is not required
//   (the provider locks what it must).
// - Provider::Poll, Provider::PrepareToSleep and everything the provider
//   registered with the reactor: the polling thread.
// - CompletionHandler: OnSendDone from any thread (a sender thread when a
//   send completes while it is posted); every other call on the polling
//   thread, never while the provider holds a lock the handler's calls back
//   into the provider (PostRecv, PostSend, Disconnect) would need.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "security/cluster_key.h"
#include "subsystem/reactor.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::subsystem::via {

// The handshake's private data, both ways: who asks, whom it means to reach
// (the discriminator), the class, the descriptors posted, and where each
// direction's stream of frames stands (stream_pair.h), so that a VI that
// replaces a broken one resends exactly what the peer lacks. 56 bytes on
// the wire: what rdma_cm carries in a connect request.
//
//   0 magic u32 | 4 version u16 | 6 class u16 | 8 process u64 | 16 peer u64
//  24 posted u32 | 28 epoch u32 | 32 stream u64 | 40 peer_stream u64
//  48 base u32 | 52 received u32
struct ConnectData {
  static constexpr uint32_t kMagic = 0x41495654;  // "TVIA"
  static constexpr uint16_t kVersion = 3;         // 3: wire version 6 frames follow
  static constexpr size_t kBytes = 56;
  // Magic and version: what a provider reads first, to refuse another
  // version before it waits for the rest.
  static constexpr size_t kHeaderBytes = 8;

  Gid process;               // the sender of this data (a process id)
  Gid peer;                  // the process it is meant for: the discriminator
  uint32_t class_index = 0;  // the VI's size class
  uint32_t posted = 0;       // receive descriptors the sender posted for this VI
  // A request: the epoch of the last VI the requester had connected in this
  // (peer, class), the one this one replaces (0: none). An accept: the new
  // VI's epoch, higher than both sides' last.
  uint32_t epoch = 0;
  // The sender's stream of frames to the peer in this class (never 0) and
  // its first frame not acknowledged (low 32 bits; windows are far shorter).
  uint64_t stream = 0;
  uint32_t base = 0;
  // The peer's stream the sender knows (0: none) and how many of its frames
  // the sender has received (low 32 bits).
  uint64_t peer_stream = 0;
  uint32_t received = 0;

  void Encode(std::byte out[kBytes]) const;
  // InvalidArgument for a bad magic, FailedPrecondition for another
  // version (both with the reason): the first kHeaderBytes.
  static Status CheckHeader(std::span<const std::byte> bytes);
  // CheckHeader's errors, and InvalidArgument for ids that are not process
  // ids, a class past `num_classes`, no or more than 65535 descriptors, a
  // stream 0.
  static Result<ConnectData> Decode(std::span<const std::byte> bytes, uint32_t num_classes);
};

// VIA's descriptor: one per buffer, describing a send or a receive. The
// buffer's bytes are slot->bytes (header + payload), registered under
// slot->memory_key.
struct Descriptor {
  detail::BufferSlot* slot = nullptr;
  uint32_t length = 0;     // send: bytes to send (0: a control message); receive: capacity
  uint32_t immediate = 0;  // send: 32 bits carried with the message (VIA's immediate data)
};

// Where a provider reports completions and connection events. `vi` is the
// context given to CreateVi.
class CompletionHandler {
 public:
  virtual ~CompletionHandler() = default;
  // A send descriptor is done: ok (the bytes are no longer needed) or
  // failed (the VI broke first). Any thread.
  virtual void OnSendDone(void* vi, detail::BufferSlot* slot, const Status& status) = 0;
  // A receive descriptor completed, in the order posted: `length` bytes and
  // the sender's immediate data, or an error (length error, VI broken:
  // every descriptor still posted is completed with an error).
  virtual void OnRecvDone(void* vi, detail::BufferSlot* slot, uint32_t length, uint32_t immediate,
                          const Status& status) = 0;
  // The request this VI made was accepted; `peer` is the accept's data.
  virtual void OnConnected(void* vi, const ConnectData& peer) = 0;
  // The VI is gone: its request was rejected or failed, the peer
  // disconnected, an error broke it, or Disconnect was called. Every
  // descriptor it held has been completed before this call; nothing about
  // this VI follows, and the ProviderVi may be destroyed. `why` says what
  // can be made of it:
  //   FailedPrecondition  the peer refused the request (its reason follows)
  //   PermissionDenied    the data plane's handshake failed (another secret)
  //   NotFound            nobody accepts there: refused, or closed before
  //                       an answer (no tocl process of this cluster and
  //                       version)
  //   InvalidArgument     a message broke VIA's rules or was malformed (a
  //                       message larger than its descriptor, one that
  //                       found none, a bad length or reply)
  //   anything else       the connection was lost (reset, closed, no
  //                       route): a new one may work
  virtual void OnClosed(void* vi, const Status& why) = 0;
};

// A connection request waiting in ConnectWait's hands.
class PendingRequest {
 public:
  virtual ~PendingRequest() = default;
  virtual const ConnectData& data() const = 0;
  virtual const std::string& peer_address() const = 0;  // for messages
};

class ProviderVi {
 public:
  virtual ~ProviderVi() = default;
  // Active side: connect to `address` (a Provider::address() of the peer),
  // sending `data`. Receives should be posted before. OnConnected or
  // OnClosed follows.
  virtual Status ConnectRequest(std::string_view address, const ConnectData& data) = 0;
  // Posts a send after those already posted; only on a connected VI. The
  // provider owns the slot's bytes until the send is done: then either
  // *done_now is set (it completed inside this call; no OnSendDone follows)
  // or OnSendDone reports it. Unavailable once the VI is closed (the
  // descriptor is then not taken, *done_now stays false).
  virtual Status PostSend(const Descriptor& descriptor, bool* done_now) = 0;
  // Adds a receive descriptor at the tail of the VI's FIFO. Allowed before
  // the connection is made. Unavailable once the VI is closed (the slot is
  // then not taken).
  virtual Status PostRecv(const Descriptor& descriptor) = 0;
  // Ends the VI: what is still posted completes with errors, then OnClosed.
  // Sends already handed to the network are not waited for: call it once
  // the peer has said it received everything (the subsystem's close
  // handshake).
  virtual void Disconnect(std::string_view why) = 0;
};

struct ProviderOptions {
  Gid self_process;
  // The cluster's data-plane secret: the sockets provider authenticates
  // every VI with it (security/handshake.h) before the request reaches the
  // connection manager. The ibverbs provider does not (see its README).
  security::ClusterKey key{};
  std::string bind_ip = "127.0.0.1";  // the address to listen on (any port)
  uint32_t num_classes = 0;
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string_view name() const = 0;       // "sockets", "ibverbs"
  virtual const std::string& address() const = 0;  // "IP:PORT" peers connect to
  // Whether a send must come from memory registered with this provider (a
  // buffer of another network's pool is then copied into one of ours).
  virtual bool needs_registered_memory() const = 0;
  // Where the via pool's slabs come from (registered once per slab).
  virtual buffers::SlabMemory& slab_memory() = 0;

  // A new VI that will report to `handler` under `context`. With a
  // request: the passive side of that request (connection-manager thread).
  virtual Result<std::unique_ptr<ProviderVi>> CreateVi(void* context, PendingRequest* request) = 0;

  // Connection-manager thread: the next connection request, or
  // DeadlineExceeded at `deadline`, or Cancelled after InterruptWait/Close.
  virtual Result<std::unique_ptr<PendingRequest>> ConnectWait(
      std::chrono::steady_clock::time_point deadline) = 0;
  // Accepts `request` on `vi` (created for it, receives posted), sending
  // `reply` back. The VI can send at once.
  virtual Status ConnectAccept(PendingRequest& request, ProviderVi& vi,
                               const ConnectData& reply) = 0;
  virtual void ConnectReject(PendingRequest& request, std::string_view reason) = 0;
  // Ends a ConnectWait in progress (any thread).
  virtual void InterruptWait() = 0;

  // Polling thread: reports what completed (completion queue, connection
  // events). Returns how many completions it reported.
  virtual int Poll() = 0;
  // Polling thread, before it sleeps: arms what wakes it (ibverbs:
  // ibv_req_notify_cq). False when something is already there to poll.
  virtual bool PrepareToSleep() = 0;
  // Stops accepting; every VI is closed (OnClosed for each, from this
  // call). Called once, on the polling thread, with the connection manager
  // stopped.
  virtual void Close() = 0;
};

// The providers (each in its own folder). Both return Unavailable, with
// the reason, when they cannot run here.
Result<std::unique_ptr<Provider>> OpenSocketsProvider(const ProviderOptions& options,
                                                      Reactor& reactor, CompletionHandler& handler);
Result<std::unique_ptr<Provider>> OpenIbverbsProvider(const ProviderOptions& options,
                                                      Reactor& reactor, CompletionHandler& handler);
// Whether ibv_get_device_list finds an RDMA device (logged once when not).
bool IbverbsDevicePresent();

}  // namespace tocl::subsystem::via
