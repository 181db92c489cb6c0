// The process's open networks, one Rail each (subsystem/README.md: a rail
// is the runtime's record of one open network), in the order of its
// network list: a Rail's index is the `network` that routes (PeerRail::rail)
// and statistics name it by.
//
// Opened once by Runtime::Impl::Open and fixed from then on; what is chosen
// among them (the fastest, whether one copies straight into receivers'
// buffers) is chosen then too, by the kinds' capabilities in the transport
// registry, never by their names.
//
// Threading: Open and Close on the thread that starts and stops the
// runtime; everything else from any thread once Open returned. A Rail's
// counters are atomics (relaxed: statistics).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "buffers/buffer_pool.h"
#include "runtime/frame_count.h"
#include "security/cluster_key.h"
#include "subsystem/subsystem.h"
#include "subsystem/transport_registry.h"
#include "tocl/buffer.h"
#include "tocl/network_stats.h"
#include "tocl/pool_stats.h"
#include "wire/lanes.h"

namespace tocl::runtime {

struct Rail {
  subsystem::NetworkSpec spec;
  const subsystem::Transport* transport = nullptr;  // its kind, in CompiledTransports()
  std::unique_ptr<subsystem::Sink> sink;            // where its arrivals go
  std::unique_ptr<subsystem::Subsystem> subsystem;
  std::string published;                         // the address in the directory
  std::function<void(NetworkStats&)> add_stats;  // what only its kind reports; may be empty
  std::atomic<uint64_t> failures{0};             // any thread

  // Its name for warnings and errors: "tcp-1 (eth1)", "shm".
  std::string Describe() const {
    return spec.device.empty() ? spec.name : spec.name + " (" + spec.device + ")";
  }
  // A route over it broke (any thread).
  void NoteFailure() { failures.fetch_add(1, std::memory_order_relaxed); }

  // Who counts an arrival: the polling thread (kPollerCounter), or the
  // holder of receive lane k (k + 1) for frames it drains from the lane.
  static constexpr uint32_t kPollerCounter = 0;
  // One frame of `bytes` (header included) arrived, counted by `counter`
  // (each has one writer at a time).
  void CountReceived(uint32_t counter, uint64_t bytes) { received_[counter].Add(bytes); }
  uint64_t frames_received() const;
  uint64_t bytes_received() const;

 private:
  FrameCount received_[1 + wire::kReceiveLanes];
};

class Rails {
 public:
  // What each network is opened with (subsystem::OpenContext but its sink).
  struct Context {
    Gid self_process;
    uint32_t num_classes = 0;
    const RuntimeOptions& options;  // ResolvedOptions::options
    security::ClusterKey key;
    subsystem::Reactor& reactor;
    buffers::PoolBudget& budget;
  };
  // The sink of the rail at `index`.
  using MakeSink = std::function<std::unique_ptr<subsystem::Sink>(int index)>;

  Rails() = default;
  Rails(const Rails&) = delete;
  Rails& operator=(const Rails&) = delete;

  // Opens each network of `list` (a network list: "auto", "shm,tcp:eth0",
  // ...; loopback only without a data-plane key) in order. The first that
  // fails ends it (its error names the network), leaving those opened
  // before it to Close.
  Status Open(std::string_view list, const Context& context, const MakeSink& make_sink);
  // Closes every subsystem (by the thread that last polled them).
  void Close();

  size_t size() const { return rails_.size(); }
  bool empty() const { return rails_.empty(); }
  Rail* operator[](size_t index) const { return rails_[index].get(); }
  Rail* front() const { return rails_.front().get(); }
  auto begin() const { return rails_.begin(); }
  auto end() const { return rails_.end(); }

  // What Network::kFastest means: the first open kind in the transport
  // registry's order (fastest first); nullptr before Open.
  subsystem::Subsystem* fastest() const { return fastest_; }
  // Some network copies straight into receivers' buffers
  // (Transport::post_copy): a copying send tries Route::PostCopy first.
  bool post_copy() const { return post_copy_; }
  // The first open network of kind `network` (kFastest: fastest()), or
  // nullptr.
  subsystem::Subsystem* SubsystemFor(Network network) const;

  // Runtime::GetBuffer: a buffer of `network`'s pool for a `size` byte
  // payload, waited for at the pool's cap (AtCap::kWait) until `deadline`.
  Result<Buffer> GetBuffer(size_t size, Network network, AtCap at_cap,
                           std::chrono::steady_clock::time_point deadline) const;

  std::vector<PoolClassStats> PoolStats() const;
  // Each rail's statistics but what went to peers (PeerRoutes::AddSentStats).
  std::vector<NetworkStats> Stats() const;

 private:
  Status OpenRail(const subsystem::NetworkSpec& spec, const Context& context,
                  const MakeSink& make_sink);

  std::vector<std::unique_ptr<Rail>> rails_;
  subsystem::Subsystem* fastest_ = nullptr;
  bool post_copy_ = false;
  uint32_t num_classes_ = 0;  // Context::num_classes
};

}  // namespace tocl::runtime
