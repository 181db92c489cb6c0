// Runtime::Impl: the pieces of a process's runtime and how they meet.
//
//   Send ──> SendPeer (FIFO queue, seq) ──> Route of a Subsystem (shm, tcp)
//   Subsystem ──> Sink::OnMessage ──> ReceiveOrder (per source process) ──> Mailbox
//   Recv ──> Mailbox, polling through the ProgressEngine while it waits
//
// Member order is destruction order reversed: the reactor outlives the
// subsystems (their fds), the subsystems (their pools) outlive the
// mailboxes and peers that hold buffers.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_pool.h"
#include "runtime/directory_link.h"
#include "runtime/epoll_reactor.h"
#include "runtime/mailbox.h"
#include "runtime/progress_engine.h"
#include "runtime/send_peer.h"
#include "subsystem/subsystem.h"
#include "tocl/runtime.h"

namespace tocl {

struct Runtime::Impl final : public subsystem::Sink {
  explicit Impl(RuntimeOptions opts);
  ~Impl() override;

  Status Open();
  Status Shutdown(std::chrono::milliseconds flush_timeout);

  // --- Sink (the polling thread) ---
  Status OnMessage(Gid from_process, detail::BufferSlot* slot) override;
  bool Congested() const override {
    return unexpected_bytes.load(std::memory_order_relaxed) > options.unexpected_cap;
  }

  // --- send side ---
  Result<runtime::DestThread*> ResolveDestination(Gid to);
  // Waits until the directory knows thread `to` (or says it exited, or
  // that its process does not run): the first send to a thread.
  Status AwaitRegistration(Gid to);
  Status ResolvePeerLocked(runtime::SendPeer& peer);
  Status CheckSender(Gid from) const;
  // Everything about a send that does not need the destination: the
  // sender, the tag, the destination's form, the runtime's state.
  Status CheckSend(Gid from, Gid to, Tag tag) const;
  // The peer of thread `to` (looked up on first use); FailedPrecondition
  // when the thread has exited.
  Result<runtime::SendPeer*> PeerOf(Gid to);
  // Sends one reference of `slot` (header length set). On error the
  // reference is still the caller's. PostSlot skips CheckSend.
  Status SendSlot(Gid from, Gid to, Tag tag, detail::BufferSlot* slot, Network network);
  Status PostSlot(Gid from, Gid to, Tag tag, detail::BufferSlot* slot, Network network);
  Status SendCopy(Gid from, Gid to, Tag tag, std::span<const std::byte> payload);
  Status DeliverLocal(detail::BufferSlot* slot);
  // Retries queued sends (the poller). True when some still wait.
  bool FlushQueued();
  bool FlushPeerLocked(runtime::SendPeer& peer);
  void FailPeerLocked(runtime::SendPeer& peer, Status why);
  void OnExited(Gid gid, const std::string& reason);
  subsystem::Subsystem* SubsystemFor(Network network) const;
  std::vector<subsystem::Subsystem*> Subsystems() const;  // the open ones
  std::vector<PoolClassStats> PoolStats() const;

  // --- receive side ---
  Result<runtime::Mailbox*> LocalMailbox(Gid self) const;
  // Waits for a match; `take` false leaves it there (probe).
  Result<Buffer> Receive(Gid self, runtime::Selector selector,
                         std::chrono::steady_clock::time_point deadline, bool blocking);
  Result<MessageInfo> ProbeFor(Gid self, runtime::Selector selector,
                               std::chrono::steady_clock::time_point deadline, bool blocking);
  // Polls (holding the token) until something is delivered to `mailbox`
  // or the deadline passes.
  void PollFor(runtime::Mailbox& mailbox, std::chrono::steady_clock::time_point deadline);
  template <typename TryMatch>
  Status WaitFor(Gid self, std::chrono::steady_clock::time_point deadline, bool blocking,
                 TryMatch&& try_match);

  RuntimeOptions options;
  Gid process;
  std::unique_ptr<runtime::DirectoryLink> link;
  std::unique_ptr<runtime::EpollReactor> reactor;
  buffers::PoolBudget budget;
  std::unique_ptr<subsystem::Subsystem> shm;
  std::unique_ptr<subsystem::Subsystem> tcp;
  std::unique_ptr<runtime::ProgressEngine> progress;
  uint32_t num_classes = 0;

  runtime::ThreadTable threads;
  std::atomic<uint32_t> next_thread{1};
  std::atomic<size_t> unexpected_bytes{0};
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> shut_down{false};
  std::mutex shutdown_mu;

  // Destinations: peers by process, threads by gid. Entries are never
  // removed while the runtime lives (their addresses are cached).
  mutable std::shared_mutex dest_mu;
  std::unordered_map<uint64_t, std::unique_ptr<runtime::SendPeer>> peers;    // guarded by dest_mu
  std::unordered_map<uint64_t, std::unique_ptr<runtime::DestThread>> dests;  // guarded by dest_mu
  const uint64_t instance;  // tells thread-local caches of different runtimes apart

  std::mutex blocked_mu;
  std::vector<runtime::SendPeer*> blocked;   // guarded by blocked_mu: peers with queued sends
  std::vector<runtime::SendPeer*> flushing;  // the poll token holder's: blocked, being retried

  // Receive order per source process (the polling thread only).
  struct SourceOrder {
    uint64_t next_seq = 0;
    std::map<uint64_t, detail::BufferSlot*> held;  // arrived ahead of next_seq
    size_t held_bytes = 0;
  };
  std::unordered_map<uint64_t, SourceOrder> order;  // node-based: pointers stay valid
  uint64_t last_source = 0;                         // a cache for `order` lookups
  SourceOrder* last_order = nullptr;
};

}  // namespace tocl
