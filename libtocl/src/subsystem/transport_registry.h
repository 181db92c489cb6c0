// The transport registry: every kind of network (subsystem) this libtocl
// was built with, in one table. Each entry says what its kind is (name,
// Network value, capabilities) and how to use it: parse its entry of a
// network list, open it, turn a peer's published endpoint into an address
// to connect to, resolve its options, add to its statistics. The runtime
// goes through these and chooses by the capabilities; it never names a
// kind ("shm", "tcp", "via") nor includes a concrete subsystem's header.
// (nng's transport list, Mercury's na_class_table.)
//
// CompiledTransports() is the one explicit list (transport_registry.cc),
// each entry behind its CMake option: the only `#if TOCL_WITH_*` of the
// library. Each entry is defined next to its subsystem
// (shm/shm_transport.cc, tcp/tcp_transport.cc, via/via_transport.cc). No
// static initializers: the list is built on first use.
//
//   const Transport* tcp = *CompiledTransports().Find("tcp");
//   auto specs = CompiledTransports().ParseNetworks("shm,tcp:eth0");
//
// Threading: a registry is immutable once built; any thread may use it.
// `open` runs on the thread that starts the runtime; `connect_address`
// under a destination's lock (it must not block); `add_stats` on the thread
// that reports statistics (it reads counters only).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "buffers/buffer_pool.h"
#include "security/cluster_key.h"
#include "subsystem/network_spec.h"
#include "subsystem/reactor.h"
#include "subsystem/subsystem.h"
#include "tocl/buffer.h"
#include "tocl/gid.h"
#include "tocl/network_stats.h"
#include "tocl/runtime_options.h"
#include "tocl/status.h"

namespace tocl::subsystem {

// What a network is opened with: the runtime's side of it. `reactor`,
// `sink` and `budget` outlive the network; `options` only the call to open
// (a kind copies what it needs).
struct OpenContext {
  Gid self_process;
  uint32_t num_classes = 0;  // pool classes 256 B << 0 .. num_classes - 1
  // As TransportRegistry::ResolveOptions left them (each kind's settings
  // filled in from the environment and checked), not as the application
  // gave them.
  const RuntimeOptions& options;
  security::ClusterKey key;  // the data-plane secret (none without credentials)
  Reactor& reactor;
  Sink& sink;
  buffers::PoolBudget& budget;
};

// One open network.
struct OpenNetwork {
  std::unique_ptr<Subsystem> subsystem;
  std::string published;  // what the process publishes in the directory for it
  // Adds to the network's statistics what only its kind knows (via: the
  // VI pool); empty when there is nothing. Valid while `subsystem` lives.
  std::function<void(NetworkStats&)> add_stats;
};

struct Transport {
  // --- what it is ---
  std::string_view name;                // the kind, as lists, endpoints and statistics name it
  Network network = Network::kFastest;  // what Runtime::GetBuffer calls it
  // Reaches only processes of this host; at most one per process (listing
  // it twice is an error). The runtime tries it first for a peer and,
  // when it connects, uses it alone for a peer on this host (the others
  // would add copies, not bandwidth).
  bool host_local = false;
  // Bound to one IP address (network_spec.h): listed as NAME, NAME:IFACE or
  // NAME:IP[/PREFIX], any number of times (one per NIC). Otherwise listed
  // as NAME alone.
  bool ip_bound = false;
  // Route::PostCopy copies straight into the receiver's buffer: the
  // runtime tries it before it takes a pool buffer.
  bool post_copy = false;
  // Subsystem::SleepAlone: when it is the process's only network, the
  // poller sleeps there rather than in epoll.
  bool sleeps_alone = false;

  // --- how the runtime uses it ---
  // The spec of a list entry; `address` is what follows "NAME:" (ip_bound
  // kinds), empty for a bare NAME. InvalidArgument names the entry.
  std::function<Result<NetworkSpec>(std::string_view address,
                                    std::span<const Interface> interfaces)>
      parse;
  // What "auto" opens of this kind on this host. `loopback_only`: the
  // process has no data-plane secret, so nothing but loopback.
  std::function<std::vector<NetworkSpec>(std::span<const Interface> interfaces, bool loopback_only)>
      automatic;
  // Fills in this kind's settings that `options` leaves to the environment
  // and checks them (InvalidArgument names the bad one). May be empty.
  std::function<Status(RuntimeOptions& options)> resolve_options;
  // Opens the network `spec` (one of this kind's): its subsystem, bound and
  // listening, and what to publish.
  std::function<Result<OpenNetwork>(const NetworkSpec& spec, const OpenContext& context)> open;
  // The address our network `local` connects to for an endpoint a peer
  // published under this kind; none when `local` cannot reach it (another
  // subnet) or the endpoint is malformed.
  std::function<std::optional<std::string>(const NetworkSpec& local, std::string_view published)>
      connect_address;
};

class TransportRegistry {
 public:
  // `transports` fastest first: Network::kFastest means the first kind of
  // this order that is open, and "auto" lists them in it. `left_out`: the
  // kinds this build has not, so that asking for one says so.
  explicit TransportRegistry(std::vector<Transport> transports,
                             std::vector<std::string_view> left_out = {});

  const std::vector<Transport>& transports() const { return transports_; }
  // The entry of kind `name`. InvalidArgument when there is none, listing
  // the known kinds, or saying that this libtocl was built without it.
  Result<const Transport*> Find(std::string_view name) const;

  // Parses a comma-separated network list: each kind's entries (above)
  // and "auto" (every kind's `automatic`, fastest first; a host-local kind
  // already listed is not added again). Networks of one kind are named
  // KIND, KIND-1, KIND-2, ... InvalidArgument names the bad entry (unknown
  // kind, what the kind's parse refuses, a host-local kind twice).
  //
  // `loopback_only` is for a process without the cluster's data-plane
  // secret (its daemon has no credentials): "auto" then means only what
  // stays on this host, and any other address is refused (PermissionDenied,
  // saying why), since its connections would be unauthenticated.
  Result<std::vector<NetworkSpec>> ParseNetworks(std::string_view text,
                                                 bool loopback_only = false) const;

  // Every kind's resolve_options on `options`, in the registry's order.
  Status ResolveOptions(RuntimeOptions& options) const;

 private:
  // "shm, tcp, tcp:IFACE, tcp:IP[/PREFIX], ..., auto": what a list may hold.
  std::string ListSyntax() const;

  std::vector<Transport> transports_;
  std::vector<std::string_view> left_out_;
};

// The kinds this libtocl was built with (shm, tcp, via, each behind its
// CMake option), fastest first.
const TransportRegistry& CompiledTransports();

// RuntimeOptions::subsystems and tcp_bind (the spelling before `networks`:
// "shm,tcp" and tcp's listen address) as a network list: "tcp" becomes
// "tcp:BIND". Each entry's kind must be one of CompiledTransports()
// (InvalidArgument as Find says, naming the entry); the rest of an entry is
// ParseNetworks' to check.
Result<std::string> NetworksFromOlderSpelling(std::string_view subsystems,
                                              std::string_view tcp_bind);

// The start of an entry for a kind bound to an IP address (network_spec.h):
// `name`, `network`, ip_bound and `parse` (ParseIpNetwork) filled in; the
// kind adds the rest. `name` must outlive the entry (a constant).
Transport IpBoundTransport(std::string_view name, Network network);

// The entries, each defined next to its subsystem; CompiledTransports
// lists those that are built.
namespace shm {
Transport ShmTransport();
}  // namespace shm
namespace tcp {
Transport TcpTransport();
}  // namespace tcp
namespace via {
Transport ViaTransport();
}  // namespace via

}  // namespace tocl::subsystem
