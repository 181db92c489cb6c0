// The via subsystem's ibverbs provider. Without an RDMA device the absence
// path and the logic that needs no device run (the device tests WARN
// "skipped" and pass); with one (a soft-RoCE rxe device will do) two
// providers in this process connect over it and exchange messages, driven
// through the Provider interface alone.
#include <ifaddrs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "subsystem/reactor.h"
#include "subsystem/tcp/socket.h"
#include "subsystem/via/ibverbs/verbs_provider.h"
#include "subsystem/via/ibverbs/verbs_vi.h"
#include "subsystem/via/provider.h"

namespace tocl::subsystem::via {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kA = Gid::Process(1, 1);
constexpr Gid kB = Gid::Process(1, 2);
constexpr uint32_t kClasses = 3;  // 256 B, 512 B, 1 KiB
constexpr uint32_t kPosted = 4;   // receive descriptors each side posts per VI

// The reactor as the provider sees it; the test polls the provider itself.
class TestReactor final : public Reactor {
 public:
  Status Add(int fd, uint32_t /*events*/, FdHandler* handler) override {
    std::lock_guard lock(mu_);
    fds_[fd] = handler;
    return Status::Ok();
  }
  Status Modify(int fd, uint32_t /*events*/, FdHandler* handler) override {
    std::lock_guard lock(mu_);
    fds_[fd] = handler;
    return Status::Ok();
  }
  void Remove(int fd) override {
    std::lock_guard lock(mu_);
    fds_.erase(fd);
  }
  void Wake() override {}
  size_t watched() {
    std::lock_guard lock(mu_);
    return fds_.size();
  }

 private:
  std::mutex mu_;
  std::map<int, FdHandler*> fds_;
};

struct Completion {
  bool receive = false;
  void* vi = nullptr;
  detail::BufferSlot* slot = nullptr;
  uint32_t length = 0;
  uint32_t immediate = 0;
  Status status;
  std::string bytes;  // a successful receive's
};

// Records every call; gives each completed buffer back to its pool.
class RecordingHandler final : public CompletionHandler {
 public:
  void OnSendDone(void* vi, detail::BufferSlot* slot, const Status& status) override {
    std::lock_guard lock(mu_);
    completions_.push_back({false, vi, slot, 0, 0, status, {}});
    slot->pool->Unref(slot);
  }
  void OnRecvDone(void* vi, detail::BufferSlot* slot, uint32_t length, uint32_t immediate,
                  const Status& status) override {
    std::lock_guard lock(mu_);
    Completion completion{true, vi, slot, length, immediate, status, {}};
    if (status.ok()) completion.bytes.assign(reinterpret_cast<const char*>(slot->bytes), length);
    completions_.push_back(std::move(completion));
    slot->pool->Unref(slot);
  }
  void OnConnected(void* vi, const ConnectData& peer) override {
    std::lock_guard lock(mu_);
    connected_.emplace_back(vi, peer);
  }
  void OnClosed(void* vi, const Status& why) override {
    std::lock_guard lock(mu_);
    closed_.emplace_back(vi, why);
  }

  std::vector<Completion> completions(void* vi, bool receive) {
    std::lock_guard lock(mu_);
    std::vector<Completion> out;
    for (const Completion& c : completions_) {
      if (c.vi == vi && c.receive == receive) out.push_back(c);
    }
    return out;
  }
  std::vector<ConnectData> connected(void* vi) {
    std::lock_guard lock(mu_);
    std::vector<ConnectData> out;
    for (auto& [which, data] : connected_) {
      if (which == vi) out.push_back(data);
    }
    return out;
  }
  std::vector<Status> closed(void* vi) {
    std::lock_guard lock(mu_);
    std::vector<Status> out;
    for (auto& [which, why] : closed_) {
      if (which == vi) out.push_back(why);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<Completion> completions_;
  std::vector<std::pair<void*, ConnectData>> connected_;
  std::vector<std::pair<void*, Status>> closed_;
};

// An IP of an RDMA device: $TOCL_TEST_RDMA_IP, or the first local address
// rdma_bind_addr puts on a device (this finds RoCE, rxe and IPoIB alike).
std::string FindRdmaIp() {
  if (const char* ip = std::getenv("TOCL_TEST_RDMA_IP"); ip != nullptr && *ip != '\0') return ip;
  ifaddrs* addresses = nullptr;
  if (getifaddrs(&addresses) != 0) return "";
  rdma_event_channel* channel = rdma_create_event_channel();
  std::string found;
  for (ifaddrs* at = addresses; channel != nullptr && at != nullptr && found.empty();
       at = at->ifa_next) {
    if (at->ifa_addr == nullptr) continue;
    const int family = at->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    sockaddr_storage storage{};
    const socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&storage, at->ifa_addr, length);
    const std::string text = tcp::SocketAddress::FromSockaddr(storage, length).ToString();
    if (text.starts_with("[fe80")) continue;  // link-local: needs a scope we do not carry
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) break;
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&storage)) == 0 && id->verbs != nullptr) {
      // "IP:0" or "[IP]:0" back to the bare IP.
      const size_t colon = text.rfind(':');
      found = text.front() == '[' ? text.substr(1, colon - 2) : text.substr(0, colon);
    }
    rdma_destroy_id(id);
  }
  if (channel != nullptr) rdma_destroy_event_channel(channel);
  freeifaddrs(addresses);
  return found;
}

// One process's worth: a provider and the pool on its memory.
struct Side {
  Side(Gid self, const std::string& ip) : budget(size_t{64} << 20) {
    ProviderOptions options{.self_process = self, .bind_ip = ip, .num_classes = kClasses};
    auto opened = OpenIbverbsProvider(options, reactor, handler);
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    provider = std::move(*opened);
    pool = std::make_unique<buffers::BufferPool>(Network::kVia, kClasses, provider->slab_memory(),
                                                 budget);
  }
  ~Side() {
    provider->Close();
    pool.reset();  // before the provider: its slabs are the provider's memory
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  // Posts up to `count` receive descriptors of class 0 on `vi`; returns
  // how many. No assertions: the connection manager's thread calls it too.
  uint32_t PostReceives(ProviderVi& vi, uint32_t count) {
    const auto capacity = static_cast<uint32_t>(buffers::ClassBytes(0));
    for (uint32_t i = 0; i < count; ++i) {
      detail::BufferSlot* slot = pool->TryGet(0);
      if (slot == nullptr) return i;
      if (!vi.PostRecv({slot, capacity, 0}).ok()) {
        pool->Unref(slot);
        return i;
      }
    }
    return count;
  }

  // Sends `text` (in a buffer of `class_index`) with `immediate`.
  void Send(ProviderVi& vi, const std::string& text, uint32_t immediate, uint32_t class_index = 0) {
    detail::BufferSlot* slot = pool->TryGet(class_index);
    REQUIRE(slot != nullptr);
    std::memcpy(slot->bytes, text.data(), text.size());
    bool done_now = true;
    Status status = vi.PostSend({slot, static_cast<uint32_t>(text.size()), immediate}, &done_now);
    INFO(status.ToString());
    REQUIRE(status.ok());
    REQUIRE_FALSE(done_now);  // ibverbs completes every send through the CQ
  }

  TestReactor reactor;
  RecordingHandler handler;
  std::unique_ptr<Provider> provider;
  buffers::PoolBudget budget;
  std::unique_ptr<buffers::BufferPool> pool;
};

// Polls both providers (the test thread is their polling thread) until
// `done` or the timeout.
bool WaitUntil(Side& a, Side& b, const std::function<bool()>& done,
               std::chrono::milliseconds timeout = 10s) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    if (a.provider->Poll() + b.provider->Poll() == 0) std::this_thread::sleep_for(100us);
  }
  return true;
}

// The passive side's connection-manager thread: answers each request with
// `answer` (creating, posting and accepting, or rejecting).
class ConnectionManager {
 public:
  using Answer = std::function<void(PendingRequest&)>;
  ConnectionManager(Provider& provider, Answer answer)
      : provider_(provider), answer_(std::move(answer)), thread_([this] { Run(); }) {}
  ~ConnectionManager() {
    stop_.store(true);
    provider_.InterruptWait();
    thread_.join();
  }

 private:
  void Run() {
    while (!stop_.load()) {
      auto request = provider_.ConnectWait(Clock::now() + 200ms);
      if (request.ok()) answer_(**request);
    }
  }

  Provider& provider_;
  Answer answer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What the passive side made of the request it accepted.
struct Accepted {
  std::mutex mu;
  std::unique_ptr<ProviderVi> vi;  // guarded by mu
  ConnectData request;             // guarded by mu
  Status status;                   // guarded by mu
  bool done = false;               // guarded by mu
};

ConnectionManager::Answer AcceptInto(Side& side, Accepted& accepted, void* context) {
  return [&side, &accepted, context](PendingRequest& request) {
    auto vi = side.provider->CreateVi(context, &request);
    Status status = vi.status();
    if (vi.ok()) {
      const uint32_t posted = side.PostReceives(**vi, kPosted);
      const ConnectData reply{.process = request.data().peer,
                              .peer = request.data().process,
                              .class_index = request.data().class_index,
                              .posted = posted,
                              .stream = 2};
      status = posted == kPosted ? side.provider->ConnectAccept(request, **vi, reply)
                                 : Internal("could not post the receives");
      if (!status.ok()) side.provider->ConnectReject(request, status.message());
    }
    std::lock_guard lock(accepted.mu);
    if (vi.ok()) accepted.vi = std::move(*vi);
    accepted.request = request.data();
    accepted.status = status;
    accepted.done = true;
  };
}

// Every descriptor handed to `vi` completed exactly once, and OnClosed once.
void CheckAllCompleted(Side& side, void* vi, size_t sends, size_t receives) {
  CHECK(side.handler.completions(vi, false).size() == sends);
  CHECK(side.handler.completions(vi, true).size() == receives);
  CHECK(side.handler.closed(vi).size() == 1);
}

bool SkipWithoutDevice(std::string* ip) {
  if (!IbverbsDevicePresent()) {
    WARN("skipped: no RDMA device (ibv_get_device_list finds none)");
    return true;
  }
  *ip = FindRdmaIp();
  if (ip->empty()) {
    WARN("skipped: an RDMA device is present but no local IP is on it (set TOCL_TEST_RDMA_IP)");
    return true;
  }
  return false;
}

TEST_CASE("IbverbsDevicePresent answers the same, cheaply, every time", "[ibverbs]") {
  const bool first = IbverbsDevicePresent();
  const auto start = Clock::now();
  const bool second = IbverbsDevicePresent();
  CHECK(first == second);
  CHECK(Clock::now() - start < 10ms);  // probed once per process
}

TEST_CASE("OpenIbverbsProvider is Unavailable, saying why, where it cannot run", "[ibverbs]") {
  TestReactor reactor;
  RecordingHandler handler;
  ProviderOptions options{.self_process = kA, .bind_ip = "0.0.0.0", .num_classes = kClasses};
  auto opened = OpenIbverbsProvider(options, reactor, handler);
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.status().code() == StatusCode::kUnavailable);
  if (!IbverbsDevicePresent()) {
    CHECK_THAT(opened.status().message(), Catch::Contains("RDMA"));
  } else {
    // A wildcard address binds to no device.
    CHECK_THAT(opened.status().message(), Catch::Contains("0.0.0.0"));
  }
  CHECK(reactor.watched() == 0);
}

// --- without a device ------------------------------------------------------------

TEST_CASE("a reject reason survives the trip through the reject's private data", "[ibverbs]") {
  std::vector<std::byte> data = EncodeRejectData("crossed");
  data.resize(148);  // an IB REJ carries 148 bytes, zero-padded
  CHECK(DecodeRejectReason(data, 28) == "crossed");
  CHECK(HasRejectReason(data));
  const std::string long_reason(500, 'r');
  CHECK(EncodeRejectData(long_reason).size() == VerbsProvider::kMaxRejectBytes);
  CHECK(DecodeRejectReason(EncodeRejectData(long_reason), 28).size() ==
        VerbsProvider::kMaxRejectBytes - VerbsProvider::kRejectTag.size());
  const std::vector<std::byte> zeros(148);
  CHECK_THAT(DecodeRejectReason(zeros, 8), Catch::Contains("nothing listens"));
  CHECK_FALSE(HasRejectReason(zeros));
  CHECK(DecodeRejectReason({}, 28) == "reject reason 28");
}

TEST_CASE("error completions map to VIA's errors", "[ibverbs]") {
  ibv_wc wc{};
  wc.status = IBV_WC_LOC_LEN_ERR;
  Status length = CompletionError(wc, /*receive=*/true, 256, "h1.p2");
  // VIA's rules broken: the subsystem does not make the VI again.
  CHECK(length.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(length.message(), Catch::Contains("larger than the posted receive buffer of 256"));
  wc.status = IBV_WC_RNR_RETRY_EXC_ERR;
  CHECK_THAT(CompletionError(wc, false, 0, "h1.p2").message(),
             Catch::Contains("no receive descriptor"));
  CHECK(CompletionError(wc, false, 0, "h1.p2").code() == StatusCode::kInvalidArgument);
  // A VI lost: made again.
  wc.status = IBV_WC_RETRY_EXC_ERR;
  CHECK(CompletionError(wc, false, 0, "h1.p2").code() == StatusCode::kUnavailable);
  wc.status = IBV_WC_WR_FLUSH_ERR;
  CHECK_THAT(CompletionError(wc, true, 256, "h1.p2").message(), Catch::Contains("flushed"));
  wc.status = IBV_WC_GENERAL_ERR;
  CHECK_THAT(CompletionError(wc, false, 0, "h1.p2").message(), Catch::Contains("h1.p2"));
}

// A provider that was never opened has no device objects; its VIs still
// keep the receives posted before a connection, and complete them.
struct UnopenedSide {
  UnopenedSide() : budget(size_t{16} << 20), pool(Network::kVia, kClasses, memory, budget) {}
  // A receive descriptor as if its slab were registered.
  Descriptor Receive() {
    detail::BufferSlot* slot = pool.TryGet(0);
    REQUIRE(slot != nullptr);
    slot->memory_key = 1;
    return {slot, static_cast<uint32_t>(buffers::ClassBytes(0)), 0};
  }

  TestReactor reactor;
  RecordingHandler handler;
  VerbsProvider provider{
      {.self_process = kA, .bind_ip = "127.0.0.1", .num_classes = kClasses}, reactor, handler};
  buffers::AnonymousSlabMemory memory;
  buffers::PoolBudget budget;
  buffers::BufferPool pool;
};

TEST_CASE("a VI disconnected before it connects completes its receives, then closes", "[ibverbs]") {
  UnopenedSide side;
  int context = 0;
  auto vi = side.provider.CreateVi(&context, nullptr);
  REQUIRE(vi.ok());
  std::vector<detail::BufferSlot*> posted;
  for (int i = 0; i < 3; ++i) {
    const Descriptor receive = side.Receive();
    REQUIRE((*vi)->PostRecv(receive).ok());
    posted.push_back(receive.slot);
  }
  bool done_now = true;
  const Descriptor send = side.Receive();
  CHECK((*vi)->PostSend(send, &done_now).code() == StatusCode::kFailedPrecondition);
  CHECK_FALSE(done_now);
  CHECK((*vi)->ConnectRequest("no port", {}).code() == StatusCode::kInvalidArgument);

  (*vi)->Disconnect("gave up");
  CHECK(side.handler.closed(&context).empty());  // reported on the polling thread
  CHECK(side.provider.Poll() == 1);
  const auto receives = side.handler.completions(&context, true);
  REQUIRE(receives.size() == 3);
  for (size_t i = 0; i < receives.size(); ++i) {
    CHECK(receives[i].slot == posted[i]);  // in the order posted
    CHECK(receives[i].status.message() == "gave up");
  }
  REQUIRE(side.handler.closed(&context).size() == 1);
  CHECK(side.handler.closed(&context)[0].message() == "gave up");
  CHECK((*vi)->PostRecv(send).code() == StatusCode::kUnavailable);
  CHECK((*vi)->PostSend(send, &done_now).code() == StatusCode::kUnavailable);
  side.pool.Unref(send.slot);
  side.provider.Poll();
  CHECK(side.handler.closed(&context).size() == 1);  // once
}

TEST_CASE("Close closes every VI, completing what it holds", "[ibverbs]") {
  UnopenedSide side;
  int context = 0;
  auto vi = side.provider.CreateVi(&context, nullptr);
  REQUIRE(vi.ok());
  REQUIRE((*vi)->PostRecv(side.Receive()).ok());
  side.provider.Close();
  CHECK(side.handler.completions(&context, true).size() == 1);
  REQUIRE(side.handler.closed(&context).size() == 1);
  CHECK(side.handler.closed(&context)[0].code() == StatusCode::kUnavailable);
  CHECK(side.provider.CreateVi(&context, nullptr).status().code() ==
        StatusCode::kFailedPrecondition);
  CHECK(side.provider.ConnectWait(Clock::now() + 1s).status().code() == StatusCode::kCancelled);
}

// --- with a device --------------------------------------------------------------

TEST_CASE("ibverbs: connect, send, receive, completion and teardown", "[ibverbs]") {
  std::string ip;
  if (SkipWithoutDevice(&ip)) return;
  INFO("RDMA address " << ip);
  Side a(kA, ip);
  Side b(kB, ip);
  int a_context = 0;
  int b_context = 0;
  Accepted accepted;
  std::unique_ptr<ProviderVi> a_vi;
  {
    ConnectionManager manager(*b.provider, AcceptInto(b, accepted, &b_context));
    auto created = a.provider->CreateVi(&a_context, nullptr);
    REQUIRE(created.ok());
    a_vi = std::move(*created);
    REQUIRE(a.PostReceives(*a_vi, kPosted) == kPosted);  // before the QP exists: queued
    REQUIRE(a_vi->ConnectRequest(
                    b.provider->address(),
                    {.process = kA, .peer = kB, .class_index = 0, .posted = kPosted, .stream = 1})
                .ok());
    REQUIRE(WaitUntil(a, b, [&] {
      return !a.handler.connected(&a_context).empty() || !a.handler.closed(&a_context).empty();
    }));
    const auto closed = a.handler.closed(&a_context);
    INFO((closed.empty() ? std::string() : closed[0].ToString()));
    REQUIRE(a.handler.connected(&a_context).size() == 1);
  }
  {
    std::lock_guard lock(accepted.mu);
    REQUIRE(accepted.done);
    REQUIRE(accepted.status.ok());
    CHECK(accepted.request.process == kA);
    CHECK(accepted.request.peer == kB);
    CHECK(accepted.request.class_index == 0);
    CHECK(accepted.request.posted == kPosted);
  }
  const ConnectData reply = a.handler.connected(&a_context)[0];
  CHECK(reply.process == kB);
  CHECK(reply.peer == kA);
  CHECK(reply.posted == kPosted);
  ProviderVi& b_vi = *accepted.vi;
  // The rest of the passive side's cm events (DISCONNECTED) are read by
  // its connection manager.
  ConnectionManager manager(*b.provider, [](PendingRequest&) {});

  SECTION("messages with immediate data go both ways; a too large one breaks the VI") {
    a.Send(*a_vi, "ping from a", 0xA11CE);
    b.Send(b_vi, "pong from b", 0xB0B);
    b.Send(b_vi, "", 0x30007);  // a control message: no bytes
    REQUIRE(WaitUntil(a, b, [&] {
      return b.handler.completions(&b_context, true).size() == 1 &&
             a.handler.completions(&a_context, true).size() == 2 &&
             a.handler.completions(&a_context, false).size() == 1 &&
             b.handler.completions(&b_context, false).size() == 2;
    }));
    const Completion at_b = b.handler.completions(&b_context, true)[0];
    CHECK(at_b.status.ok());
    CHECK(at_b.length == 11);
    CHECK(at_b.immediate == 0xA11CE);
    CHECK(at_b.bytes == "ping from a");
    const auto at_a = a.handler.completions(&a_context, true);
    CHECK(at_a[0].status.ok());
    CHECK(at_a[0].bytes == "pong from b");
    CHECK(at_a[0].immediate == 0xB0B);
    CHECK(at_a[1].status.ok());
    CHECK(at_a[1].length == 0);
    CHECK(at_a[1].immediate == 0x30007);
    CHECK(a.handler.completions(&a_context, false)[0].status.ok());

    // 600 bytes into B's 256-byte receive: VIA's length error.
    a.Send(*a_vi, std::string(600, 'x'), 1, /*class_index=*/2);
    REQUIRE(WaitUntil(a, b, [&] {
      return !a.handler.closed(&a_context).empty() && !b.handler.closed(&b_context).empty();
    }));
    const auto b_receives = b.handler.completions(&b_context, true);
    REQUIRE(b_receives.size() == kPosted);  // the first one, then the flushed rest
    CHECK_FALSE(b_receives[1].status.ok());
    CHECK_THAT(b_receives[1].status.message(), Catch::Contains("larger than the posted"));
    for (size_t i = 2; i < b_receives.size(); ++i) CHECK_FALSE(b_receives[i].status.ok());
    CHECK_THAT(b.handler.closed(&b_context)[0].message(),
               Catch::Contains("larger than the posted"));
    CHECK_FALSE(a.handler.completions(&a_context, false)[1].status.ok());
    CheckAllCompleted(a, &a_context, 2, kPosted);
    CheckAllCompleted(b, &b_context, 2, kPosted);
    // A closed VI takes no more descriptors.
    detail::BufferSlot* slot = a.pool->TryGet(0);
    REQUIRE(slot != nullptr);
    CHECK(a_vi->PostRecv({slot, 256, 0}).code() == StatusCode::kUnavailable);
    a.pool->Unref(slot);
  }

  SECTION("Disconnect flushes what is posted on both sides and closes both VIs") {
    a_vi->Disconnect("done with it");
    REQUIRE(WaitUntil(a, b, [&] {
      return !a.handler.closed(&a_context).empty() && !b.handler.closed(&b_context).empty();
    }));
    CHECK(a.handler.closed(&a_context)[0].message() == "done with it");
    for (const Completion& c : a.handler.completions(&a_context, true)) CHECK_FALSE(c.status.ok());
    CheckAllCompleted(a, &a_context, 0, kPosted);
    CheckAllCompleted(b, &b_context, 0, kPosted);
  }

  // Teardown: VIs after their OnClosed, then the providers (Side).
  a_vi.reset();
  accepted.vi.reset();
}

TEST_CASE("ibverbs: a rejected request closes the VI with the peer's reason", "[ibverbs]") {
  std::string ip;
  if (SkipWithoutDevice(&ip)) return;
  Side a(kA, ip);
  Side b(kB, ip);
  ConnectionManager manager(*b.provider, [&b](PendingRequest& request) {
    b.provider->ConnectReject(request, "crossed");
  });
  int a_context = 0;
  auto vi = a.provider->CreateVi(&a_context, nullptr);
  REQUIRE(vi.ok());
  REQUIRE(a.PostReceives(**vi, kPosted) == kPosted);
  REQUIRE((*vi)
              ->ConnectRequest(
                  b.provider->address(),
                  {.process = kA, .peer = kB, .class_index = 0, .posted = kPosted, .stream = 1})
              .ok());
  REQUIRE(WaitUntil(a, b, [&] { return !a.handler.closed(&a_context).empty(); }));
  CHECK(a.handler.connected(&a_context).empty());
  const Status why = a.handler.closed(&a_context)[0];
  CHECK(why.code() == StatusCode::kFailedPrecondition);  // our peer's refusal
  CHECK_THAT(why.message(), Catch::EndsWith("crossed"));
  CheckAllCompleted(a, &a_context, 0, kPosted);
}

}  // namespace
}  // namespace tocl::subsystem::via
