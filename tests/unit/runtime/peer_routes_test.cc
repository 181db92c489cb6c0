// Peer routes without a daemon or networks: a directory of our own making
// (entries that exist, have exited, appear late or never), networks whose
// subsystems reach or refuse peers; what a first send is told, how long it
// waits, which networks a peer's routes go over, hosts that go down and
// come back, and one queue per process however many threads ask at once.
#include "runtime/peer_routes.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "buffers/buffer_pool.h"
#include "runtime/internal_threads.h"

namespace tocl::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr Gid kSelf = Gid::Process(1, 1);
constexpr Gid kNeighbour = Gid::Process(1, 2);  // on our host
constexpr Gid kFar = Gid::Process(2, 5);        // on another host of the cluster
constexpr Gid kNeighbourThread = Gid::Thread(kNeighbour, 1);
constexpr Gid kFarThread = Gid::Thread(kFar, 1);

// A directory of entries by gid; NotFound for any other. Entries may be
// added while a lookup waits (a registration on its way).
class FakeDirectory {
 public:
  void Add(Gid gid, EntityState state = EntityState::kRunning,
           std::vector<Endpoint> endpoints = {}) {
    Entity entity;
    entity.gid = gid;
    entity.kind = gid.is_thread()    ? EntityKind::kThread
                  : gid.is_process() ? EntityKind::kProcess
                                     : EntityKind::kHost;
    entity.state = state;
    entity.endpoints = std::move(endpoints);
    entity.exit_reason = state == EntityState::kExited ? "exit status 0" : "";
    std::lock_guard lock(mu_);
    entries_[gid.raw()] = std::move(entity);
  }
  // `gid` appears after `lookups` more lookups of it.
  void AddAfter(Gid gid, int lookups) {
    std::lock_guard lock(mu_);
    pending_[gid.raw()] = lookups;
  }

  // The next `lookups` lookups (any gid) fail as while the daemon restarts;
  // -1: every one from now on. `on_away` runs at each (outside the lock).
  void AwayFor(int lookups, std::function<void()> on_away = {}) {
    std::lock_guard lock(mu_);
    away_ = lookups;
    on_away_ = std::move(on_away);
  }

  Result<Entity> Lookup(Gid gid) {
    bool away = false;
    std::function<void()> on_away;
    {
      std::lock_guard lock(mu_);
      ++lookups_;
      if (away_ != 0) {
        away = true;
        if (away_ > 0) --away_;
        on_away = on_away_;
      }
    }
    if (away) {
      if (on_away) on_away();
      return Unavailable("lookup " + gid.ToString() + ": Socket closed");
    }
    std::lock_guard lock(mu_);
    auto pending = pending_.find(gid.raw());
    if (pending != pending_.end() && --pending->second == 0) {
      pending_.erase(pending);
      Entity entity;
      entity.gid = gid;
      entity.kind = EntityKind::kThread;
      entries_[gid.raw()] = entity;
    }
    auto it = entries_.find(gid.raw());
    if (it == entries_.end()) return NotFound("no entity " + gid.ToString());
    return it->second;
  }
  int lookups() {
    std::lock_guard lock(mu_);
    return lookups_;
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, Entity> entries_;  // guarded by mu_
  std::map<uint64_t, int> pending_;     // guarded by mu_
  int lookups_ = 0;                     // guarded by mu_
  int away_ = 0;                        // guarded by mu_
  std::function<void()> on_away_;       // guarded by mu_
};

class FakeRoute final : public subsystem::Route {
 public:
  Status Post(detail::BufferSlot*) override { return Status(StatusCode::kTryAgain, "fake"); }
  Status PostCopy(const wire::Header&, std::span<const std::byte>) override {
    return Status(StatusCode::kUnimplemented, "fake");
  }
  bool Drained() const override { return true; }
  bool Broken() const override { return false; }
};

// A subsystem that reaches the processes of `hosts` (all when empty) and
// connects unless told to refuse; it records whom it connected to.
class FakeSubsystem final : public subsystem::Subsystem {
 public:
  FakeSubsystem() : budget_(size_t{1} << 20), pool_(Network::kTcp, 9, memory_, budget_) {}

  Network network() const override { return Network::kTcp; }
  const std::string& address() const override { return address_; }
  buffers::BufferPool& pool() override { return pool_; }
  bool Reaches(Gid peer_process, std::string_view) const override {
    return hosts.empty() || hosts.count(peer_process.host_index()) > 0;
  }
  Result<std::unique_ptr<subsystem::Route>> Connect(Gid peer_process,
                                                    std::string_view address) override {
    std::lock_guard lock(mu_);
    if (refuse) return Unavailable("no channel left");
    connected.emplace_back(peer_process, std::string(address));
    return std::unique_ptr<subsystem::Route>(std::make_unique<FakeRoute>());
  }
  int Poll() override { return 0; }
  bool PrepareToSleep() override { return true; }
  void FinishSleep() override {}
  void Housekeeping() override {}
  void Close() override {}

  std::set<uint32_t> hosts;
  bool refuse = false;
  std::vector<std::pair<Gid, std::string>> connected;  // guarded by mu_

 private:
  std::mutex mu_;
  std::string address_ = "fake";
  buffers::AnonymousSlabMemory memory_;
  buffers::PoolBudget budget_;
  buffers::BufferPool pool_;
};

// A kind whose endpoints are connected to as published.
subsystem::Transport Kind(std::string_view name, bool host_local) {
  subsystem::Transport kind;
  kind.name = name;
  kind.host_local = host_local;
  kind.connect_address = [](const subsystem::NetworkSpec&,
                            std::string_view published) -> std::optional<std::string> {
    return std::string(published);
  };
  return kind;
}

subsystem::NetworkSpec Spec(std::string kind, std::string name, std::string ip = "") {
  subsystem::NetworkSpec spec;
  spec.kind = std::move(kind);
  spec.name = std::move(name);
  spec.ip = std::move(ip);
  return spec;
}

struct Fixture : SendQueue::Events {
  explicit Fixture(milliseconds connect_timeout = milliseconds(2000))
      : routes(
            PeerRoutes::Settings{.queue_depth = 64, .connect_timeout = connect_timeout},
            [this](Gid gid) { return directory.Lookup(gid); }, *this, shutting_down) {
    routes.SetProcess(kSelf);
    shm.hosts = {kSelf.host_index()};
    // Listed tcp first: the host-local network is tried first all the same.
    routes.SetNetworks({OwnNetwork{Spec("tcp", "tcp"), &tcp_kind, &tcp},
                        OwnNetwork{Spec("shm", "shm"), &shm_kind, &shm}});
    directory.Add(kSelf.host());
    directory.Add(kFar.host());
  }

  // A running process with both kinds of endpoint.
  void AddProcess(Gid process) {
    directory.Add(process, EntityState::kRunning,
                  {Endpoint{"shm", "shm@" + process.ToString()},
                   Endpoint{"tcp", "tcp@" + process.ToString()}});
  }
  // The queue of `process`, resolved (or the error).
  Result<SendQueue*> Resolved(Gid process) {
    TOCL_ASSIGN_OR_RETURN(SendQueue * peer, routes.PeerOfProcess(process));
    std::lock_guard lock(peer->mu());
    TOCL_RETURN_IF_ERROR(routes.ResolvePeerLocked(*peer));
    return peer;
  }
  // The networks the routes of `peer` go over, in route order.
  static std::vector<int> NetworksOf(SendQueue& peer) {
    std::lock_guard lock(peer.mu());
    std::vector<int> networks;
    for (const PeerRail& rail : peer.rails()) networks.push_back(rail.rail);
    return networks;
  }

  void Queued(SendQueue&, bool) override {}
  void Rerouted(const SendQueue&, int, int) override {}
  void AwaitProgress() override {}

  std::atomic<bool> shutting_down{false};
  FakeDirectory directory;
  subsystem::Transport tcp_kind = Kind("tcp", false);
  subsystem::Transport shm_kind = Kind("shm", true);
  FakeSubsystem tcp;
  FakeSubsystem shm;
  PeerRoutes routes;  // last: its queues' routes go before the subsystems
};

constexpr int kTcp = 0;  // the networks' indexes, as given to SetNetworks
constexpr int kShm = 1;

TEST_CASE("a thread the directory says has exited gives FailedPrecondition", "[peer_routes]") {
  Fixture f;
  f.AddProcess(kNeighbour);
  f.directory.Add(kNeighbourThread, EntityState::kExited);
  auto dest = f.routes.ResolveDestination(kNeighbourThread);
  REQUIRE_FALSE(dest.ok());
  CHECK(dest.status().code() == StatusCode::kFailedPrecondition);
  CHECK(f.routes.PeerOf(kNeighbourThread).status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("a thread of a process that has exited gives FailedPrecondition with its reason",
          "[peer_routes]") {
  Fixture f;
  f.directory.Add(kNeighbour, EntityState::kExited);
  const Status status = f.routes.AwaitRegistration(kNeighbourThread);
  CHECK(status.code() == StatusCode::kFailedPrecondition);
  CHECK(status.message().find("exit status 0") != std::string::npos);
}

TEST_CASE("a host the directory does not know gives NotFound at once, without waiting",
          "[peer_routes]") {
  Fixture f(milliseconds(5000));
  const auto start = Clock::now();
  const Status status = f.routes.AwaitRegistration(Gid::Thread(7, 1, 1));
  CHECK(Clock::now() - start < milliseconds(1000));
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(status.message().find("no host h7") != std::string::npos);
}

TEST_CASE("a process of this host its daemon does not know gives NotFound at once",
          "[peer_routes]") {
  Fixture f(milliseconds(5000));
  const auto start = Clock::now();
  const Status status = f.routes.AwaitRegistration(kNeighbourThread);
  CHECK(Clock::now() - start < milliseconds(1000));
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(f.directory.lookups() == 2);  // the thread, its process: no retry
}

TEST_CASE("a thread whose process runs but that never registers is waited for until the deadline",
          "[peer_routes]") {
  Fixture f(milliseconds(150));
  f.AddProcess(kNeighbour);
  const auto start = Clock::now();
  const Status status = f.routes.AwaitRegistration(kNeighbourThread);
  const auto waited = Clock::now() - start;
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(status.message().find("has not registered it") != std::string::npos);
  // It gives up before a sleep would pass the deadline, backing off up to
  // 100 ms: between about 150 - 100 ms and well under a second.
  CHECK(waited >= milliseconds(50));
  CHECK(waited < milliseconds(1000));
  CHECK(f.directory.lookups() > 4);  // it asked again meanwhile
}

TEST_CASE("a process of another host not replicated here yet is waited for, then NotFound",
          "[peer_routes]") {
  Fixture f(milliseconds(100));
  const Status status = f.routes.AwaitRegistration(kFarThread);
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(status.message().find("has not heard of it within 100 ms") != std::string::npos);
}

TEST_CASE("a thread that registers while the first send waits is found", "[peer_routes]") {
  Fixture f(milliseconds(5000));
  f.AddProcess(kNeighbour);
  f.directory.AddAfter(kNeighbourThread, 3);
  CHECK(f.routes.AwaitRegistration(kNeighbourThread).ok());
  auto dest = f.routes.ResolveDestination(kNeighbourThread);
  REQUIRE(dest.ok());
  CHECK((*dest)->peer->process() == kNeighbour);
}

TEST_CASE("the runtime's internal threads need only their process to run", "[peer_routes]") {
  Fixture f(milliseconds(5000));
  f.AddProcess(kNeighbour);
  const int before = f.directory.lookups();
  CHECK(f.routes.AwaitRegistration(ServiceOf(kNeighbour)).ok());
  CHECK(f.directory.lookups() == before + 1);  // the process alone
}

TEST_CASE("a host that is down gives Unavailable at once, until it answers again",
          "[peer_routes]") {
  Fixture f(milliseconds(5000));
  f.AddProcess(kFar);
  f.directory.Add(kFarThread);
  f.routes.HostDown(kFar.host(), Unavailable("host h2 is down"));
  CHECK(f.routes.HostDownStatus(kFar.host()).code() == StatusCode::kUnavailable);
  CHECK(f.routes.HostDownStatus(kNeighbour.host()).ok());
  const int before = f.directory.lookups();
  CHECK(f.routes.ResolveDestination(kFarThread).status().code() == StatusCode::kUnavailable);
  CHECK(f.directory.lookups() == before);  // not even asked
  f.routes.HostUp(kFar.host());
  CHECK(f.routes.HostDownStatus(kFar.host()).ok());
  CHECK(f.routes.ResolveDestination(kFarThread).ok());
}

TEST_CASE("an entity the directory reads as unreachable gives Unavailable", "[peer_routes]") {
  Fixture f;
  f.directory.Add(kFar, EntityState::kUnreachable, {Endpoint{"tcp", "tcp@far"}});
  auto peer = f.Resolved(kFar);
  REQUIRE_FALSE(peer.ok());
  CHECK(peer.status().code() == StatusCode::kUnavailable);
  CHECK(f.tcp.connected.empty());
}

TEST_CASE("a peer on this host goes over the host-local network alone", "[peer_routes]") {
  Fixture f;
  f.AddProcess(kNeighbour);
  auto peer = f.Resolved(kNeighbour);
  REQUIRE(peer.ok());
  CHECK(Fixture::NetworksOf(**peer) == std::vector<int>{kShm});
  CHECK((*peer)->default_route() == 0);
  REQUIRE(f.shm.connected.size() == 1);
  CHECK(f.shm.connected[0].second == "shm@" + kNeighbour.ToString());
  CHECK(f.tcp.connected.empty());
}

TEST_CASE("a peer on this host whose host-local route cannot open goes over the others",
          "[peer_routes]") {
  Fixture f;
  f.shm.refuse = true;
  f.AddProcess(kNeighbour);
  auto peer = f.Resolved(kNeighbour);
  REQUIRE(peer.ok());
  CHECK(Fixture::NetworksOf(**peer) == std::vector<int>{kTcp});
}

TEST_CASE("a peer on another host goes over every network that reaches it, none loopback",
          "[peer_routes]") {
  Fixture f;
  FakeSubsystem loopback;
  FakeSubsystem second;
  f.routes.SetNetworks({OwnNetwork{Spec("tcp", "tcp"), &f.tcp_kind, &f.tcp},
                        OwnNetwork{Spec("shm", "shm"), &f.shm_kind, &f.shm},
                        OwnNetwork{Spec("tcp", "tcp-lo", "127.0.0.1"), &f.tcp_kind, &loopback},
                        OwnNetwork{Spec("tcp", "tcp-1"), &f.tcp_kind, &second}});
  f.directory.Add(
      kFar, EntityState::kRunning,
      {Endpoint{"shm", "shm@far"}, Endpoint{"tcp", "tcp@far:a"}, Endpoint{"tcp-1", "tcp@far:b"}});
  auto peer = f.Resolved(kFar);
  REQUIRE(peer.ok());
  // Each network pairs with an endpoint of its kind no other took.
  CHECK(Fixture::NetworksOf(**peer) == std::vector<int>{kTcp, 3});
  CHECK(f.tcp.connected.at(0).second == "tcp@far:a");
  CHECK(second.connected.at(0).second == "tcp@far:b");
  CHECK(loopback.connected.empty());
  CHECK(f.shm.connected.empty());  // it does not reach another host
}

TEST_CASE("a peer no network reaches is Unavailable and stays unresolved", "[peer_routes]") {
  Fixture f;
  f.directory.Add(kFar, EntityState::kRunning, {Endpoint{"shm", "shm@far"}});
  auto peer = f.Resolved(kFar);
  REQUIRE_FALSE(peer.ok());
  CHECK(peer.status().code() == StatusCode::kUnavailable);
  auto queue = f.routes.PeerOfProcess(kFar);
  REQUIRE(queue.ok());
  std::lock_guard lock((*queue)->mu());
  CHECK((*queue)->state() == SendQueue::State::kUnresolved);
}

TEST_CASE("only this host's daemon's NotFound fails a peer for good", "[peer_routes]") {
  Fixture f;
  // Another host's process, not replicated here yet: asked again next time.
  auto far = f.Resolved(kFar);
  CHECK(far.status().code() == StatusCode::kNotFound);
  f.AddProcess(kFar);
  CHECK(f.Resolved(kFar).ok());
  // A process of this host the daemon does not know: failed.
  CHECK(f.Resolved(kNeighbour).status().code() == StatusCode::kNotFound);
  f.AddProcess(kNeighbour);
  CHECK(f.Resolved(kNeighbour).status().code() == StatusCode::kNotFound);
}

TEST_CASE("a host going down fails its peers, and its coming back lets them resolve again",
          "[peer_routes]") {
  Fixture f;
  f.AddProcess(kFar);
  f.AddProcess(kNeighbour);
  REQUIRE(f.Resolved(kFar).ok());
  REQUIRE(f.Resolved(kNeighbour).ok());
  SendQueue& far = **f.routes.PeerOfProcess(kFar);
  const uint64_t generation = far.generation();

  f.routes.HostDown(kFar.host(), Unavailable("host h2 is down"));
  {
    std::lock_guard lock(far.mu());
    CHECK(far.state() == SendQueue::State::kFailed);
    CHECK(far.failure().code() == StatusCode::kUnavailable);
  }
  CHECK(f.Resolved(kNeighbour).ok());  // another host's peers are left alone

  f.routes.HostUp(kFar.host());
  {
    std::lock_guard lock(far.mu());
    CHECK(far.state() == SendQueue::State::kUnresolved);
    CHECK(far.generation() == generation + 1);
  }
  CHECK(f.Resolved(kFar).ok());
  CHECK(f.tcp.connected.size() == 2);  // connected again
}

TEST_CASE("an exited process fails its queue and its threads, and stays failed", "[peer_routes]") {
  Fixture f;
  f.AddProcess(kFar);
  f.directory.Add(kFarThread);
  REQUIRE(f.routes.PeerOf(kFarThread).ok());
  f.routes.Exited(kFar, "killed by signal 9");
  const auto peer = f.routes.PeerOf(kFarThread);
  CHECK(peer.status().code() == StatusCode::kFailedPrecondition);
  auto failed = f.Resolved(kFar);
  CHECK(failed.status().code() == StatusCode::kFailedPrecondition);
  CHECK(failed.status().message().find("killed by signal 9") != std::string::npos);
  // A host that goes down and comes back does not revive it.
  f.routes.HostDown(kFar.host(), Unavailable("host h2 is down"));
  f.routes.HostUp(kFar.host());
  CHECK(f.Resolved(kFar).status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("threads asking at once get one queue per process", "[peer_routes]") {
  Fixture f;
  f.AddProcess(kFar);
  constexpr int kThreads = 8;
  for (int i = 0; i < kThreads; ++i) f.directory.Add(Gid::Thread(kFar, 10 + i));
  std::vector<SendQueue*> seen(2 * kThreads, nullptr);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        auto dest = f.routes.ResolveDestination(Gid::Thread(kFar, 10 + i));
        if (dest.ok()) seen[i] = (*dest)->peer;
        auto peer = f.routes.PeerOfProcess(kFar);
        if (peer.ok()) seen[kThreads + i] = *peer;
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  REQUIRE(seen[0] != nullptr);
  for (SendQueue* peer : seen) CHECK(peer == seen[0]);
  // And once resolved, one set of routes.
  REQUIRE(f.Resolved(kFar).ok());
  REQUIRE(f.Resolved(kFar).ok());
  CHECK(f.tcp.connected.size() == 1);
}

TEST_CASE("a first send whose lookups meet a daemon restart waits for the daemon",
          "[peer_routes]") {
  Fixture f(milliseconds(5000));
  f.AddProcess(kFar);
  f.directory.Add(kFarThread);
  f.directory.AwayFor(4);
  CHECK(f.routes.AwaitRegistration(kFarThread).ok());
  CHECK(f.directory.lookups() > 4);
}

TEST_CASE("a daemon that stays away gives Unavailable saying so after connect_timeout",
          "[peer_routes]") {
  Fixture f(milliseconds(300));
  f.AddProcess(kFar);
  f.directory.Add(kFarThread);
  f.directory.AwayFor(-1);
  const auto start = Clock::now();
  const Status status = f.routes.AwaitRegistration(kFarThread);
  const auto waited = Clock::now() - start;
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK(status.message().find("did not answer within connect_timeout (300 ms)") !=
        std::string::npos);
  CHECK(status.message().find("Socket closed") != std::string::npos);
  // It gives up before a pause (up to 500 ms) would pass the deadline.
  CHECK(waited >= milliseconds(100));
  CHECK(waited < milliseconds(2000));
}

TEST_CASE("a sender resolving a peer while the daemon restarts waits without the queue's lock",
          "[peer_routes]") {
  Fixture f(milliseconds(5000));
  f.AddProcess(kFar);
  SendQueue& peer = **f.routes.PeerOfProcess(kFar);
  int free_while_away = 0;
  // Whether another thread (the progress thread, answering the peer) could
  // take the queue's lock while the lookup failed: not on the first try
  // (made under the lock, as every resolution), on every one after.
  f.directory.AwayFor(3, [&] {
    std::thread([&] {
      if (!peer.mu().try_lock()) return;
      ++free_while_away;
      peer.mu().unlock();
    }).join();
  });
  std::unique_lock lock(peer.mu());
  CHECK(f.routes.ResolvePeer(peer, lock).ok());
  CHECK(lock.owns_lock());
  CHECK(peer.state() == SendQueue::State::kReady);
  CHECK(free_while_away == 2);
}

TEST_CASE("resolving a peer under its lock does not wait for a daemon that is away",
          "[peer_routes]") {
  Fixture f(milliseconds(5000));
  f.AddProcess(kFar);
  f.directory.AwayFor(-1);
  const auto start = Clock::now();
  auto peer = f.Resolved(kFar);
  CHECK(Clock::now() - start < milliseconds(1000));
  CHECK(peer.status().code() == StatusCode::kUnavailable);
  SendQueue& queue = **f.routes.PeerOfProcess(kFar);
  std::lock_guard lock(queue.mu());
  CHECK(queue.state() == SendQueue::State::kUnresolved);  // resolved on a later send
}

TEST_CASE("a runtime shutting down resolves no new destination", "[peer_routes]") {
  Fixture f;
  f.AddProcess(kFar);
  f.directory.Add(kFarThread);
  f.shutting_down = true;
  CHECK(f.routes.ResolveDestination(kFarThread).status().code() == StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tocl::runtime
