// The sockets provider: VIA over TCP (M-VIA style), so that the via
// subsystem runs, and is tested, on any machine. One listening socket per
// process; each VI is one TCP connection (sockets_vi.h).
//
// Connection requests are read by the connection-manager thread
// (ConnectWait): it accepts, reads the requester's ConnectData, runs the
// data plane's handshake (sockets_vi.h; a peer that has not finished within
// 5 s is dropped, as is one that fails it) and only then hands the request
// over; the VI created for it answers in ConnectAccept.
//
// Memory needs no registration (the kernel copies), so the pool's slabs
// are plain anonymous pages and buffers of any pool can be sent.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "subsystem/tcp/socket.h"
#include "subsystem/via/provider.h"

namespace tocl::subsystem::via {

class SocketsVi;

class SocketsProvider final : public Provider {
 public:
  static constexpr std::chrono::seconds kRequestTimeout{5};

  SocketsProvider(const ProviderOptions& options, Reactor& reactor, CompletionHandler& handler);
  ~SocketsProvider() override;

  Status Listen();

  std::string_view name() const override { return "sockets"; }
  const std::string& address() const override { return address_; }
  bool needs_registered_memory() const override { return false; }
  buffers::SlabMemory& slab_memory() override { return memory_; }

  Result<std::unique_ptr<ProviderVi>> CreateVi(void* context, PendingRequest* request) override;
  Result<std::unique_ptr<PendingRequest>> ConnectWait(
      std::chrono::steady_clock::time_point deadline) override;
  Status ConnectAccept(PendingRequest& request, ProviderVi& vi, const ConnectData& reply) override;
  void ConnectReject(PendingRequest& request, std::string_view reason) override;
  void InterruptWait() override;

  int Poll() override;
  bool PrepareToSleep() override;
  void Close() override;

  // For the VIs:
  Reactor& reactor() { return reactor_; }
  CompletionHandler& handler() { return handler_; }
  const ProviderOptions& options() const { return options_; }
  // A VI broke: finish it on the polling thread.
  void ScheduleFinish(SocketsVi* vi);
  void Forget(SocketsVi* vi);

 private:
  struct Incoming;
  // Reads what the pending incoming connections sent; returns a request
  // whose handshake is done (or one for another process, to be rejected),
  // or null.
  std::unique_ptr<PendingRequest> ReadIncoming();
  // Checks nothing yet: sends our nonce and MAC for the request in `in`.
  Status AnswerHandshake(Incoming& in);
  void AcceptIncoming();

  const ProviderOptions options_;
  Reactor& reactor_;
  CompletionHandler& handler_;
  buffers::AnonymousSlabMemory memory_;
  Fd listen_fd_;
  Fd interrupt_fd_;  // an eventfd that ends ConnectWait
  std::string address_;

  // Connection-manager thread only:
  std::vector<std::unique_ptr<Incoming>> incoming_;

  std::mutex mu_;
  // Guarded by mu_:
  std::vector<SocketsVi*> vis_;
  std::vector<SocketsVi*> to_finish_;
  bool closed_ = false;
};

}  // namespace tocl::subsystem::via
