// The shm subsystem between instances in one process, each with its own
// EpollReactor and a sink that collects what arrives; plus a test that
// scribbles on a segment the way a broken or hostile sender could.
//
// Each instance gets its own directory (segments are named
// tocl.<pid>.<start>.<n>.seg, so they could share one; separate ones keep
// each test's files apart), nested so that the senders' Reaches() (which
// wants the peer's address to start with "<own directory>/tocl.") holds:
//
//   /dev/shm/tocl-test-XXXXXX/            first sender
//   /dev/shm/tocl-test-XXXXXX/tocl.b/     second sender
//   /dev/shm/tocl-test-XXXXXX/tocl.b/tocl.r/   receiver
#include "subsystem/shm/shm_subsystem.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "collecting_sink.h"
#include "core/logger.h"
#include "runtime/epoll_reactor.h"
#include "subsystem/shm/segment_layout.h"
#include "wire/frame.h"
#include "wire/lanes.h"

namespace tocl::subsystem::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr Gid kSender = Gid::Process(1, 1);
constexpr Gid kSecondSender = Gid::Process(1, 3);
constexpr Gid kReceiver = Gid::Process(1, 2);
constexpr uint32_t kClasses = 9;  // 256 B .. 64 KiB
constexpr size_t kMaxPayload = (size_t{64} << 10) - wire::kHeaderBytes;
constexpr size_t kBudgetBytes = size_t{16} << 20;

// A fresh directory under /dev/shm, removed with everything in it.
class ShmDir {
 public:
  ShmDir() {
    char name[] = "/dev/shm/tocl-test-XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    path_ = name;
  }
  ~ShmDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ShmDir(const ShmDir&) = delete;
  ShmDir& operator=(const ShmDir&) = delete;

  const std::string& path() const { return path_; }
  // A subdirectory (made if needed).
  std::string Sub(const std::string& relative) const {
    std::string path = path_ + "/" + relative;
    std::filesystem::create_directories(path);
    return path;
  }

 private:
  std::string path_;
};

using tocl::subsystem::testing::Arrival;
using tocl::subsystem::testing::Checksum;
using tocl::subsystem::testing::CollectingSink;

// One process's worth of shm: a budget, a reactor, a sink, a subsystem.
struct Node {
  Node(Gid self, std::string directory, size_t budget_bytes = kBudgetBytes) : budget(budget_bytes) {
    auto created = runtime::EpollReactor::Create();
    REQUIRE(created.ok());
    reactor = std::move(*created);
    ShmOptions options;
    options.self_process = self;
    options.num_classes = kClasses;
    options.directory = std::move(directory);
    auto opened = OpenShm(options, *reactor, sink, budget);
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    shm = std::move(*opened);
  }
  ~Node() { shm->Close(); }
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // One round of the polling thread, never sleeping.
  int PumpOnce() {
    reactor->Wait(0);
    return shm->Poll();
  }

  // Polls until `done`, sleeping on the reactor (the bell) when idle.
  bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      shm->Poll();
      if (done()) return true;
      if (Clock::now() > deadline) return false;
      if (shm->PrepareToSleep()) reactor->Wait(10);
      shm->FinishSleep();
    }
  }

  // Empties the bell, so that the next Wait sleeps.
  void DrainBell() {
    while (reactor->Wait(0) > 0) {
    }
  }

  uint64_t PoolInUse() const {
    uint64_t in_use = 0;
    for (const auto& stats : shm->pool().Stats()) in_use += stats.in_use;
    return in_use;
  }

  buffers::PoolBudget budget;
  std::unique_ptr<runtime::EpollReactor> reactor;
  CollectingSink sink;
  std::unique_ptr<Subsystem> shm;
};

// The three instances, nested as the file comment says.
struct Trio {
  ShmDir dir;
  Node sender{kSender, dir.path()};
  Node second{kSecondSender, dir.Sub("tocl.b")};
  Node receiver{kReceiver, dir.Sub("tocl.b/tocl.r")};
};

void FillPayload(std::byte* payload, size_t length, uint64_t seq) {
  for (size_t i = 0; i < length; ++i) {
    payload[i] = static_cast<std::byte>((seq * 7 + i * 13 + (i >> 8)) & 0xff);
  }
}

wire::Header MessageHeader(Gid from, Gid to, uint64_t seq, size_t payload) {
  wire::Header header;
  header.kind = wire::FrameKind::kMessage;
  header.source = Gid::Thread(from, 1 + static_cast<uint32_t>(seq % 3)).raw();
  header.destination = Gid::Thread(to, 1).raw();
  header.seq = seq;
  header.length = static_cast<uint32_t>(payload);
  header.total = payload;
  return header;
}

// A message frame in a buffer of `from`'s pool (refs = 1), its checksum in the tag.
detail::BufferSlot* NewFrame(Node& from, Gid from_process, Gid to, uint64_t seq, size_t payload) {
  detail::BufferSlot* slot = from.shm->pool().TryGet(buffers::ClassFor(payload));
  REQUIRE(slot != nullptr);
  slot->header() = MessageHeader(from_process, to, seq, payload);
  FillPayload(slot->payload(), payload, seq);
  slot->header().tag = Checksum({slot->payload(), payload});
  return slot;
}

// Posts, pumping the receiver while the route says TryAgain.
Status PostPumping(Route& route, detail::BufferSlot* slot, Node& receiver,
                   std::chrono::milliseconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Status status = route.Post(slot);
    if (status.code() != StatusCode::kTryAgain || Clock::now() > deadline) return status;
    receiver.PumpOnce();
  }
}

Status PostCopyPumping(Route& route, const wire::Header& header, std::span<const std::byte> payload,
                       Node& receiver, std::chrono::milliseconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Status status = route.PostCopy(header, payload);
    if (status.code() != StatusCode::kTryAgain || Clock::now() > deadline) return status;
    receiver.PumpOnce();
  }
}

// Checks that `arrivals` are frames first_seq, first_seq+1, ... from `from`
// to `to`, whole.
void CheckInOrder(const std::vector<Arrival>& arrivals, Gid from, Gid to, uint64_t first_seq = 0) {
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const Arrival& arrival = arrivals[i];
    INFO("arrival " << i << " seq " << arrival.header.seq);
    REQUIRE(arrival.header.seq == first_seq + i);
    REQUIRE(arrival.from == from);
    REQUIRE(Gid::FromRaw(arrival.header.source).process() == from);
    REQUIRE(Gid::FromRaw(arrival.header.destination) == Gid::Thread(to, 1));
    REQUIRE(arrival.intact);
  }
}

std::vector<Arrival> ArrivalsFrom(const CollectingSink& sink, Gid from) {
  std::vector<Arrival> mine;
  for (const Arrival& arrival : sink.arrivals()) {
    if (arrival.from == from) mine.push_back(arrival);
  }
  return mine;
}

// Captures tocl's warnings while alive.
class LogCapture {
 public:
  LogCapture() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%v");
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::warn);
    previous_ = ReplaceLog(std::move(logger));
  }
  ~LogCapture() { ReplaceLog(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string Text() {
    Log().flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// The header and channels of a segment, mapped as a sender maps them.
class SegmentView {
 public:
  explicit SegmentView(const std::string& path) {
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    base_ = mmap(nullptr, SegmentLayout::kDataOffset, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(base_ != MAP_FAILED);
  }
  ~SegmentView() { munmap(base_, SegmentLayout::kDataOffset); }
  SegmentView(const SegmentView&) = delete;
  SegmentView& operator=(const SegmentView&) = delete;

  SegmentHeader& header() { return *static_cast<SegmentHeader*>(base_); }
  Channel& channel(uint32_t i) {
    return reinterpret_cast<Channel*>(static_cast<std::byte*>(base_) +
                                      SegmentLayout::kChannelsOffset)[i];
  }
  // The ready channel claimed by `sender`.
  Channel& ChannelOf(Gid sender) {
    for (uint32_t i = 0; i < kMaxChannels; ++i) {
      Channel& c = channel(i);
      if (c.state.load() == static_cast<uint32_t>(ChannelState::kReady) &&
          c.sender_process == sender.raw()) {
        return c;
      }
    }
    FAIL("no ready channel of " << sender.ToString());
    return channel(0);
  }

 private:
  void* base_ = nullptr;
};

// Publishes `desc` on `channel`'s arrival ring, as its sender would.
void PublishForged(Channel& channel, const Descriptor& desc,
                   uint32_t kind = ArrivalEntry::kDescribed) {
  auto& arrivals = channel.arrivals;
  const uint32_t tail = arrivals.tail.value.load(std::memory_order_relaxed);
  ArrivalEntry& entry = arrivals.entries[tail % arrivals.kSize];
  entry.kind = kind;
  entry.desc = desc;
  entry.seq.store(tail + 1, std::memory_order_release);
  arrivals.tail.value.store(tail + 1, std::memory_order_release);
}

// Connects `from` to the receiver and gets one frame through, so that the
// channel is ready.
std::unique_ptr<Route> ConnectReady(Node& from, Gid from_process, Node& receiver, uint64_t& seq) {
  auto route = from.shm->Connect(kReceiver, receiver.shm->address());
  INFO(route.status().ToString());
  REQUIRE(route.ok());
  const size_t before = receiver.sink.size();
  REQUIRE(PostPumping(**route, NewFrame(from, from_process, kReceiver, seq++, 10), receiver).ok());
  REQUIRE(receiver.PollUntil([&] { return receiver.sink.size() == before + 1; }));
  return std::move(*route);
}

TEST_CASE("a shm subsystem publishes its segment path and reaches only its own host", "[shm]") {
  ShmDir dir;
  Node node(kSender, dir.path());
  const std::string& address = node.shm->address();
  CHECK(node.shm->network() == Network::kShm);
  CHECK(node.shm->name() == "shm");
  CHECK(address.starts_with(dir.path() + "/tocl." + std::to_string(getpid()) + "."));
  CHECK(address.ends_with(".seg"));
  CHECK(std::filesystem::exists(address));
  CHECK(node.shm->pool().num_classes() == kClasses);

  CHECK(node.shm->Reaches(kReceiver, dir.path() + "/tocl.1.2.seg"));
  CHECK_FALSE(node.shm->Reaches(Gid::Process(2, 2), dir.path() + "/tocl.1.2.seg"));
  CHECK_FALSE(node.shm->Reaches(kReceiver, "/elsewhere/tocl.1.2.seg"));
  CHECK_FALSE(node.shm->Reaches(kReceiver, dir.path() + "/tocl.1.2.bell"));
  CHECK_FALSE(node.shm->Reaches(kReceiver, "127.0.0.1:7400"));

  auto route = node.shm->Connect(kReceiver, "127.0.0.1:7400");
  CHECK(route.status().code() == StatusCode::kInvalidArgument);
  auto missing = node.shm->Connect(kReceiver, dir.path() + "/tocl.1.2.seg");
  CHECK_FALSE(missing.ok());

  node.shm->Close();
  CHECK_FALSE(std::filesystem::exists(address));  // unlinked at Close
}

TEST_CASE("OpenShm refuses a bad number of size classes", "[shm]") {
  ShmDir dir;
  buffers::PoolBudget budget(kBudgetBytes);
  CollectingSink sink;
  auto reactor = runtime::EpollReactor::Create();
  REQUIRE(reactor.ok());
  for (uint32_t classes : {0u, buffers::kMaxClasses + 1}) {
    ShmOptions options;
    options.self_process = kSender;
    options.num_classes = classes;
    options.directory = dir.path();
    CHECK(OpenShm(options, **reactor, sink, budget).status().code() ==
          StatusCode::kInvalidArgument);
  }
}

TEST_CASE("connecting checks that the segment belongs to the process named", "[shm]") {
  Trio t;
  auto wrong = t.sender.shm->Connect(Gid::Process(1, 99), t.receiver.shm->address());
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(wrong.status().message(), Catch::Matchers::Contains("is not the shm segment of"));
}

TEST_CASE("frames of mixed sizes up to the largest class arrive in order and whole", "[shm]") {
  Trio t;
  auto route = t.sender.shm->Connect(kReceiver, t.receiver.shm->address());
  INFO(route.status().ToString());
  REQUIRE(route.ok());
  CHECK_FALSE((*route)->Broken());

  const size_t sizes[] = {0, 1, 100, 192, 193, 511, 1000, 4000, 8129, 20000, 40000, kMaxPayload};
  constexpr uint64_t kFrames = 600;
  std::vector<std::byte> payload(kMaxPayload);
  for (uint64_t seq = 0; seq < kFrames; ++seq) {
    const size_t size = sizes[(seq * 7) % std::size(sizes)];
    INFO("seq " << seq << " size " << size);
    if (seq % 2 == 0) {
      REQUIRE(
          PostPumping(**route, NewFrame(t.sender, kSender, kReceiver, seq, size), t.receiver).ok());
    } else {
      wire::Header header = MessageHeader(kSender, kReceiver, seq, size);
      FillPayload(payload.data(), size, seq);
      header.tag = Checksum({payload.data(), size});
      REQUIRE(PostCopyPumping(**route, header, {payload.data(), size}, t.receiver).ok());
    }
  }
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == kFrames; }));
  const auto arrivals = t.receiver.sink.arrivals();
  CheckInOrder(arrivals, kSender, kReceiver);
  for (uint64_t seq = 0; seq < kFrames; ++seq) {
    CHECK(arrivals[seq].header.length == sizes[(seq * 7) % std::size(sizes)]);
  }
  CHECK((*route)->Drained());
  CHECK_FALSE((*route)->Broken());
  CHECK(t.sender.PoolInUse() == 0);    // every posted buffer went back
  CHECK(t.receiver.PoolInUse() == 0);  // the sink gave every arrival back
}

TEST_CASE("a posted buffer is marked sent and its reference dropped", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq++, 300);
  slot->refs.fetch_add(1);  // ours, to look at it afterwards
  REQUIRE(PostPumping(*route, slot, t.receiver).ok());
  CHECK(static_cast<BufferState>(slot->state.load()) == BufferState::kSent);
  CHECK(slot->refs.load() == 1);
  t.sender.shm->pool().Unref(slot);
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == seq; }));
}

TEST_CASE("a frame larger than the receiver's largest class is refused", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  std::vector<std::byte> payload(kMaxPayload + 1);
  const wire::Header header = MessageHeader(kSender, kReceiver, seq, payload.size());
  Status status = route->PostCopy(header, payload);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(status.message(), Catch::Matchers::Contains("larger than"));
  CHECK_FALSE(route->Broken());
  // The route still works.
  REQUIRE(PostPumping(*route, NewFrame(t.sender, kSender, kReceiver, seq++, 5), t.receiver).ok());
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == seq; }));
}

TEST_CASE("small frames wait in the ring while the receiver is congested and all arrive after",
          "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  const uint64_t before = t.receiver.sink.size();
  t.receiver.sink.congested.store(true);
  // Inline frames need no provided buffer: they fill the arrival ring,
  // which the congested receiver does not read.
  uint64_t posted = 0;
  Status status;
  for (;;) {
    detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq, 8);
    status = route->Post(slot);
    if (!status.ok()) {
      t.sender.shm->pool().Unref(slot);
      break;
    }
    ++seq;
    ++posted;
    REQUIRE(posted <= kArrivalSlots);
    t.receiver.PumpOnce();
  }
  CHECK(status.code() == StatusCode::kTryAgain);
  CHECK(posted == kArrivalSlots);
  CHECK(t.receiver.sink.size() == before);  // none taken while congested
  t.receiver.sink.congested.store(false);
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == seq; }));
  CheckInOrder(t.receiver.sink.arrivals(), kSender, kReceiver);
  CHECK(t.sender.PoolInUse() == 0);
}

TEST_CASE(
    "a receiver whose pool is spent leaves small frames in the ring, sleeps, and takes them "
    "once a buffer comes back",
    "[shm]") {
  ShmDir dir;
  Node sender(kSender, dir.path());
  // Enough for a slab of each small class: what the channel is provided
  // with, and about 190 class-0 buffers left for inline frames.
  Node receiver(kReceiver, dir.path(), size_t{512} << 10);
  uint64_t seq = 0;
  auto route = ConnectReady(sender, kSender, receiver, seq);
  receiver.sink.keep.store(true);  // the application holds what arrives
  for (int i = 0; i < 400; ++i, ++seq) {
    REQUIRE(PostPumping(*route, NewFrame(sender, kSender, kReceiver, seq, 8), receiver).ok());
  }
  for (int i = 0; i < 10; ++i) receiver.PumpOnce();
  const size_t held = receiver.sink.size();
  INFO("arrived while the pool was spent: " << held);
  REQUIRE(held < seq);  // the rest wait in the ring
  // Frames wait for a buffer, not for the sender: the owner may sleep...
  REQUIRE(receiver.shm->PrepareToSleep());
  receiver.shm->FinishSleep();
  // ...and a buffer coming back wakes it at once.
  receiver.sink.keep.store(false);
  receiver.sink.ReleaseKept();
  CHECK(receiver.reactor->Wait(5000) > 0);
  REQUIRE(receiver.PollUntil([&] { return receiver.sink.size() == seq; }));
  CheckInOrder(receiver.sink.arrivals(), kSender, kReceiver);
  receiver.sink.ReleaseKept();
  CHECK(receiver.PoolInUse() == 0);
}

TEST_CASE("big and small frames keep their order in one channel", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  // Sizes around the inline limit (kInlineFrameBytes with the header).
  const uint32_t inline_max = kInlineFrameBytes - wire::kHeaderBytes;
  const uint32_t sizes[] = {0, 8, inline_max, inline_max + 1, 4000, 1, inline_max - 1, 60000};
  for (int i = 0; i < 2000; ++i, ++seq) {
    const uint32_t size = sizes[i % std::size(sizes)];
    REQUIRE(
        PostPumping(*route, NewFrame(t.sender, kSender, kReceiver, seq, size), t.receiver).ok());
  }
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == seq; }));
  const auto arrivals = t.receiver.sink.arrivals();
  CheckInOrder(arrivals, kSender, kReceiver);
  for (uint64_t i = 1; i < seq; ++i) {
    CHECK(arrivals[i].header.length == sizes[(i - 1) % std::size(sizes)]);
  }
}

TEST_CASE("a forged inline arrival closes its channel", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  SegmentView view(t.receiver.shm->address());
  Channel& channel = view.ChannelOf(kSender);
  std::string expected;
  SECTION("longer than an entry holds") {
    PublishForged(channel, Descriptor{0, kInlineFrameBytes + 1, 0}, ArrivalEntry::kInline);
    expected = fmt::format("an inline frame of {} bytes", kInlineFrameBytes + 1);
  }
  SECTION("shorter than a header") {
    PublishForged(channel, Descriptor{0, 10, 0}, ArrivalEntry::kInline);
    expected = "an inline frame of 10 bytes";
  }
  SECTION("of an unknown kind") {
    PublishForged(channel, Descriptor{0, 80, 0}, 7);
    expected = "an arrival of unknown kind 7";
  }
  SECTION("an empty frame that claims a payload") {
    PublishForged(channel, Descriptor{0, wire::kHeaderBytes + 8, 0}, ArrivalEntry::kInline);
    expected = "bad magic";  // the entry's frame bytes are zero
  }
  LogCapture log;
  t.receiver.shm->Poll();
  const std::string text = log.Text();
  INFO(text);
  CHECK_THAT(text, Catch::Matchers::Contains("closing the channel from h1.p1"));
  CHECK_THAT(text, Catch::Matchers::Contains(expected));
  CHECK(channel.state.load() == static_cast<uint32_t>(ChannelState::kClosed));
  t.receiver.shm->Housekeeping();
  CHECK(t.receiver.PoolInUse() == 0);
}

TEST_CASE("Post says TryAgain while the receiver is congested and everything arrives after",
          "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  t.receiver.sink.congested.store(true);

  // The receiver keeps polling but provides no more buffers: the sender
  // runs out of those it was given (frames too big to travel inline).
  uint64_t posted_while_congested = 0;
  Status status;
  for (;;) {
    detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq, 1000);
    status = route->Post(slot);
    if (!status.ok()) {
      t.sender.shm->pool().Unref(slot);  // not taken: still ours
      break;
    }
    ++seq;
    ++posted_while_congested;
    REQUIRE(posted_while_congested < 100000);
    t.receiver.PumpOnce();
  }
  CHECK(status.code() == StatusCode::kTryAgain);
  CHECK_FALSE(route->Broken());
  INFO("posted while congested: " << posted_while_congested);
  CHECK(posted_while_congested >= 64);  // at least one class's worth of provided buffers
  // Still TryAgain however long the receiver polls while congested.
  for (int i = 0; i < 100; ++i) t.receiver.PumpOnce();
  detail::BufferSlot* blocked = NewFrame(t.sender, kSender, kReceiver, seq, 1000);
  CHECK(route->Post(blocked).code() == StatusCode::kTryAgain);
  CHECK(t.receiver.sink.size() == seq);  // all posted so far did arrive

  t.receiver.sink.congested.store(false);
  REQUIRE(PostPumping(*route, blocked, t.receiver).ok());
  ++seq;
  const uint64_t total = seq + 500;
  for (; seq < total; ++seq) {
    REQUIRE(PostPumping(*route, NewFrame(t.sender, kSender, kReceiver, seq, 100 + seq % 900),
                        t.receiver)
                .ok());
  }
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == total; }));
  CheckInOrder(t.receiver.sink.arrivals(), kSender, kReceiver);
  CHECK(t.sender.PoolInUse() == 0);
}

TEST_CASE("the bell wakes a receiver sleeping on its reactor when a sender posts", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  t.receiver.shm->Poll();
  t.receiver.DrainBell();

  SECTION("with nothing posted the receiver sleeps its whole timeout") {
    REQUIRE(t.receiver.shm->PrepareToSleep());
    const auto start = Clock::now();
    CHECK(t.receiver.reactor->Wait(50) == 0);
    CHECK(Clock::now() - start >= 50ms);
    t.receiver.shm->FinishSleep();
  }

  SECTION("a post from another thread ends the sleep early") {
    REQUIRE(t.receiver.shm->PrepareToSleep());
    detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq++, 200);
    std::atomic<int> post_code{-1};
    std::thread poster([&] {
      Status status = route->Post(slot);  // buffers are provided: no need for the receiver
      post_code.store(static_cast<int>(status.code()));
    });
    const auto start = Clock::now();
    const int handled = t.receiver.reactor->Wait(20000);
    const auto slept = Clock::now() - start;
    poster.join();
    t.receiver.shm->FinishSleep();
    REQUIRE(post_code.load() == static_cast<int>(StatusCode::kOk));
    CHECK(handled == 1);
    CHECK(slept < 10s);
    CHECK(t.receiver.shm->Poll() == 1);
    CheckInOrder(t.receiver.sink.arrivals(), kSender, kReceiver);
  }

  SECTION("PrepareToSleep says no when a frame is already waiting") {
    REQUIRE(route->Post(NewFrame(t.sender, kSender, kReceiver, seq++, 200)).ok());
    CHECK_FALSE(t.receiver.shm->PrepareToSleep());
    t.receiver.shm->FinishSleep();
    CHECK(t.receiver.shm->Poll() == 1);
  }
}

TEST_CASE("a wake from inside the process before SleepAlone ends that one sleep", "[shm]") {
  ShmDir dir;
  Node node(kReceiver, dir.path());
  // The poller looked at what it waits for, then a thread woke it before it
  // announced its futex: the wake is kept, and the sleep does not start.
  node.shm->WakeSleeper();
  const auto deadline = Clock::now() + 30s;
  REQUIRE(node.shm->SleepAlone(deadline));
  CHECK(Clock::now() < deadline);
  // Used up: the next sleep lasts until its deadline.
  const auto short_deadline = Clock::now() + 50ms;
  while (Clock::now() < short_deadline) REQUIRE(node.shm->SleepAlone(short_deadline));
  CHECK(Clock::now() >= short_deadline);
}

TEST_CASE("after the receiver closes, the sender's posts fail with Unavailable", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  const std::string address = t.receiver.shm->address();
  t.receiver.shm->Close();
  CHECK_FALSE(std::filesystem::exists(address));

  detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq, 10);
  Status status = route->Post(slot);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Catch::Matchers::Contains("h1.p2"));
  CHECK(route->Broken());
  CHECK(slot->refs.load() == 1);  // not taken
  t.sender.shm->pool().Unref(slot);

  const wire::Header header = MessageHeader(kSender, kReceiver, seq, 0);
  CHECK(route->PostCopy(header, {}).code() == StatusCode::kUnavailable);

  // A new connection cannot be made either: the segment is gone.
  CHECK_FALSE(t.sender.shm->Connect(kReceiver, address).ok());
}

TEST_CASE("a lane post alone finds out that the receiver closed: Unavailable, the route broken",
          "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  REQUIRE(route->LaneFrameBytes() >= wire::kHeaderBytes + 8);
  const wire::Header header = MessageHeader(kSender, kReceiver, seq, 8);
  const std::vector<std::byte> payload(8, std::byte{3});
  const uint32_t lane = wire::LaneOf(Gid::FromRaw(header.destination));
  REQUIRE(route->PostLane(lane, header, payload).ok());
  t.receiver.shm->Close();
  // The runtime posts a pair's short messages on its lane only: nothing
  // else would find out.
  const Status status = route->PostLane(lane, header, payload);
  CHECK(status.code() == StatusCode::kUnavailable);
  CHECK_THAT(status.message(), Catch::Matchers::Contains("h1.p2"));
  CHECK(route->Broken());
}

TEST_CASE("a closed route frees its channel for a later sender", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  for (int round = 0; round < 3; ++round) {
    auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
    route.reset();
    t.receiver.shm->Housekeeping();  // reclaims channels their senders closed
  }
  SegmentView view(t.receiver.shm->address());
  int in_use = 0;
  for (uint32_t i = 0; i < kMaxChannels; ++i) {
    if (view.channel(i).state.load() != static_cast<uint32_t>(ChannelState::kFree)) ++in_use;
  }
  CHECK(in_use == 0);
  CHECK(t.receiver.PoolInUse() == 0);
  CHECK(t.receiver.sink.size() == 3);
}

TEST_CASE("RemoveStaleSegments removes segments of dead processes and keeps live ones", "[shm]") {
  ShmDir dir;
  Node live(kSender, dir.path());
  const std::string live_name = std::filesystem::path(live.shm->address()).filename();

  // Our own start time, read off our segment's name: tocl.<pid>.<start>.seg.
  const std::string prefix = "tocl." + std::to_string(getpid()) + ".";
  REQUIRE(live_name.starts_with(prefix));
  const uint64_t start = std::stoull(live_name.substr(prefix.size()));

  // A pid that is gone: a child that exited and was reaped.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);

  auto touch = [&](const std::string& name) {
    std::ofstream(dir.path() + "/" + name) << "x";
    return dir.path() + "/" + name;
  };
  const std::string dead = touch(fmt::format("tocl.{}.{}.0.seg", child, start));
  const std::string reused = touch(fmt::format("tocl.{}.{}.3.seg", getpid(), start + 1));
  const std::string other_suffix = touch(fmt::format("tocl.{}.{}.0.bell", child, start));
  const std::string foreign = touch("notes.txt");
  const std::string odd = touch("tocl.x.1.0.seg");

  CHECK(RemoveStaleSegments(dir.path()) == 2);
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK_FALSE(std::filesystem::exists(reused));  // our pid, but not our start: a reused pid
  CHECK(std::filesystem::exists(live.shm->address()));
  CHECK(std::filesystem::exists(other_suffix));
  CHECK(std::filesystem::exists(foreign));
  CHECK(std::filesystem::exists(odd));

  CHECK(RemoveStaleSegments(dir.path()) == 0);
  CHECK(RemoveStaleSegments(dir.path() + "/does-not-exist") == 0);
}

TEST_CASE("opening a shm subsystem clears stale segments from its directory", "[shm]") {
  ShmDir dir;
  const std::string stale = dir.path() + "/tocl.0.12345.0.seg";
  std::ofstream(stale) << "x";
  Node node(kSender, dir.path());
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(node.shm->address()));
}

TEST_CASE("a forged descriptor closes that channel with a log line and others keep working",
          "[shm]") {
  Trio t;
  uint64_t seq = 0;
  uint64_t second_seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  auto second = ConnectReady(t.second, kSecondSender, t.receiver, second_seq);
  SegmentView view(t.receiver.shm->address());
  Channel& channel = view.ChannelOf(kSender);

  std::string expected;
  SECTION("a slot index past the pool's table") {
    PublishForged(channel, Descriptor{0xFFFFFF, 64, 0});
    expected = "a descriptor for a buffer it was not given";
  }
  SECTION("a buffer provided to another sender") {
    Channel& others = view.ChannelOf(kSecondSender);
    auto& ring = others.provides[0];
    const Descriptor theirs = ring.entries[ring.head.value.load() % ring.kSize];
    PublishForged(channel, Descriptor{theirs.slot_index, 64, theirs.offset});
    expected = "a descriptor for a buffer it was not given";
  }
  SECTION("a provided buffer with the wrong offset") {
    auto& ring = channel.provides[0];
    const Descriptor mine = ring.entries[ring.head.value.load() % ring.kSize];
    PublishForged(channel, Descriptor{mine.slot_index, 64, mine.offset + 256});
    expected = "a descriptor for a buffer it was not given";
  }
  SECTION("a frame whose length disagrees with its descriptor") {
    auto& ring = channel.provides[0];
    const uint32_t head = ring.head.value.load();
    const Descriptor mine = ring.entries[head % ring.kSize];
    ring.head.value.store(head + 1);  // taken, as a sender takes it
    // Write a valid empty message into the receiver's buffer through the sender's view.
    const int fd = open(t.receiver.shm->address().c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const wire::Header header = MessageHeader(kSender, kReceiver, seq, 0);
    REQUIRE(pwrite(fd, &header, sizeof(header),
                   static_cast<off_t>(view.header().data_offset + mine.offset)) ==
            static_cast<ssize_t>(sizeof(header)));
    close(fd);
    PublishForged(channel, Descriptor{mine.slot_index, 64 + 100, mine.offset});
    expected = "frame length does not match its descriptor";
  }

  LogCapture log;
  t.receiver.shm->Poll();
  const std::string text = log.Text();
  INFO(text);
  CHECK_THAT(text, Catch::Matchers::Contains("closing the channel from h1.p1"));
  CHECK_THAT(text, Catch::Matchers::Contains(expected));
  CHECK(channel.state.load() == static_cast<uint32_t>(ChannelState::kClosed));

  // The forging sender's route is dead...
  detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq, 10);
  CHECK(route->Post(slot).code() == StatusCode::kUnavailable);
  t.sender.shm->pool().Unref(slot);
  CHECK(route->Broken());

  // ...the other sender's is not.
  for (int i = 0; i < 200; ++i) {
    REQUIRE(PostPumping(*second, NewFrame(t.second, kSecondSender, kReceiver, second_seq++, 50 * i),
                        t.receiver)
                .ok());
  }
  REQUIRE(t.receiver.PollUntil(
      [&] { return ArrivalsFrom(t.receiver.sink, kSecondSender).size() == second_seq; }));
  CheckInOrder(ArrivalsFrom(t.receiver.sink, kSecondSender), kSecondSender, kReceiver);
  CHECK(ArrivalsFrom(t.receiver.sink, kSender).size() == 1);  // only the first, genuine one

  // Once the bad channel's buffers are back, the pool holds nothing for it.
  second.reset();
  t.receiver.shm->Housekeeping();
  CHECK(t.receiver.PoolInUse() == 0);
}

TEST_CASE("a frame from a foreign source closes its channel", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  // kSender posing as a thread of kSecondSender.
  detail::BufferSlot* slot = NewFrame(t.sender, kSecondSender, kReceiver, seq, 10);
  LogCapture log;
  REQUIRE(route->Post(slot).ok());
  t.receiver.shm->Poll();
  const std::string text = log.Text();
  INFO(text);
  CHECK_THAT(text, Catch::Matchers::Contains("a frame with a foreign source or destination"));
  CHECK(t.receiver.sink.size() == 1);  // the genuine first frame only
  detail::BufferSlot* next = NewFrame(t.sender, kSender, kReceiver, seq, 10);
  CHECK(route->Post(next).code() == StatusCode::kUnavailable);
  t.sender.shm->pool().Unref(next);
}

TEST_CASE("a frame with an invalid header closes its channel naming the problem", "[shm]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq, 10);
  slot->header().flags = 4;
  LogCapture log;
  REQUIRE(route->Post(slot).ok());
  t.receiver.shm->Poll();
  const std::string text = log.Text();
  INFO(text);
  CHECK_THAT(text, Catch::Matchers::Contains("header flags 0x0004 on a frame of kind 1"));
  CHECK(t.receiver.sink.size() == 1);
  CHECK(t.receiver.PoolInUse() == 0);
}

// --- Receive lanes -------------------------------------------------------------
//
// Each channel has an inline-only ring per receive lane (wire/lanes.h) for
// the sender's short messages to the receiver's threads of that lane,
// drained only by the holder of the lane (Sink::TryEnterLane): the poller
// in Poll, or any thread in PollLane.

// The largest payload a lane carries (its frame travels in the entry).
constexpr uint32_t kLanePayloadMax = kInlineFrameBytes - wire::kHeaderBytes;

// Thread `index` of the receiver, in lane index % kReceiveLanes.
constexpr Gid ReceiverThread(uint32_t index) {
  return Gid::Thread(kReceiver, index);
}

// A short message as a sender hands it to PostLane, its payload's checksum
// in the tag.
struct LaneMessage {
  wire::Header header;
  std::vector<std::byte> payload;

  // Header and payload as they travel (what a forger writes into an entry).
  std::vector<std::byte> Frame() const {
    std::vector<std::byte> frame(wire::kHeaderBytes + payload.size());
    wire::EncodeHeader(header, frame.data());
    if (!payload.empty())
      std::memcpy(frame.data() + wire::kHeaderBytes, payload.data(), payload.size());
    return frame;
  }
};

LaneMessage MakeLaneMessage(Gid from, Gid to, uint64_t seq, size_t payload) {
  LaneMessage message;
  message.payload.resize(payload);
  FillPayload(message.payload.data(), payload, seq);
  message.header =
      wire::MessageHeader(from, to, Checksum(message.payload), static_cast<uint32_t>(payload), seq);
  return message;
}

// Posts `message` on `lane`, calling `meanwhile` (the receiver's progress)
// while the lane is full, until `deadline`.
Status PostLaneRetrying(Route& route, uint32_t lane, const LaneMessage& message,
                        Clock::time_point deadline, const std::function<void()>& meanwhile) {
  for (;;) {
    Status status = route.PostLane(lane, message.header, message.payload);
    if (status.code() != StatusCode::kTryAgain || Clock::now() > deadline) return status;
    meanwhile();
  }
}

// Posts `message` on `lane`, pumping the receiver while the lane is full.
Status PostLanePumping(Route& route, uint32_t lane, const LaneMessage& message, Node& receiver) {
  return PostLaneRetrying(route, lane, message, Clock::now() + 20s, [&] { receiver.PumpOnce(); });
}

// Looks at `done` every millisecond until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

// What arrived for receiver thread `to`, in the order it was delivered.
std::vector<Arrival> ArrivalsTo(const CollectingSink& sink, Gid to) {
  std::vector<Arrival> mine;
  for (const Arrival& arrival : sink.arrivals()) {
    if (Gid::FromRaw(arrival.header.destination) == to) mine.push_back(arrival);
  }
  return mine;
}

// `arrivals` are messages 0 .. count-1 of the pair (from, to), whole, each once.
void CheckPair(const std::vector<Arrival>& arrivals, Gid from, Gid to, uint64_t count,
               uint64_t first_seq = 0) {
  INFO("the pair " << from.ToString() << " -> " << to.ToString());
  REQUIRE(arrivals.size() == count);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const Arrival& arrival = arrivals[i];
    INFO("arrival " << i << " seq " << arrival.header.seq);
    REQUIRE(arrival.header.seq == first_seq + i);
    REQUIRE(arrival.from == from.process());
    REQUIRE(Gid::FromRaw(arrival.header.source) == from);
    REQUIRE(Gid::FromRaw(arrival.header.destination) == to);
    REQUIRE(arrival.intact);
  }
}

// Publishes an entry on `lane` of `channel` as a sender would: `frame`'s
// bytes in the entry, announced as `length` bytes of kind `kind`.
void PublishOnLane(Channel& channel, uint32_t lane, std::span<const std::byte> frame,
                   uint32_t length, uint32_t kind = ArrivalEntry::kInline) {
  auto& ring = channel.lanes[lane];
  const uint32_t tail = ring.tail.value.load(std::memory_order_relaxed);
  ArrivalEntry& entry = ring.entries[tail % ring.kSize];
  std::memcpy(entry.frame, frame.data(), std::min(frame.size(), sizeof(entry.frame)));
  entry.kind = kind;
  entry.desc = Descriptor{0, length, 0};
  entry.seq.store(tail + 1, std::memory_order_release);
  ring.tail.value.store(tail + 1, std::memory_order_seq_cst);
}

// Holds lane `lane` of `sink` on a thread of its own (a lane's lock is the
// holding thread's) until destroyed.
class LaneHolder {
 public:
  LaneHolder(CollectingSink& sink, uint32_t lane)
      : thread_([this, &sink, lane] {
          sink.EnterLane(lane);
          held_.store(true);
          while (!release_.load()) std::this_thread::yield();
          sink.LeaveLane(lane);
        }) {
    REQUIRE(Eventually([&] { return held_.load(); }));
  }
  ~LaneHolder() {
    release_.store(true);
    thread_.join();
  }
  LaneHolder(const LaneHolder&) = delete;
  LaneHolder& operator=(const LaneHolder&) = delete;

 private:
  std::atomic<bool> held_{false};
  std::atomic<bool> release_{false};
  std::thread thread_;
};

// The index of the channel `sender` holds (claimed or ready) in `view`'s segment.
std::optional<uint32_t> ChannelIndexOf(SegmentView& view, Gid sender) {
  for (uint32_t i = 0; i < kMaxChannels; ++i) {
    const uint32_t state = view.channel(i).state.load();
    if ((state == static_cast<uint32_t>(ChannelState::kClaimed) ||
         state == static_cast<uint32_t>(ChannelState::kReady)) &&
        view.channel(i).sender_process == sender.raw()) {
      return i;
    }
  }
  return std::nullopt;
}

TEST_CASE(
    "short messages on every receive lane arrive whole, once and in order per pair, whoever "
    "drains the lanes",
    "[shm][lanes]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  const size_t before = t.receiver.sink.size();
  // Two receiving threads per lane (indexes lane + 8 and lane + 16), each
  // fed by its own sending thread; one posting thread per lane (PostLane's
  // contract), the eight of them at once.
  constexpr uint32_t kPairsPerLane = 2;
  constexpr uint64_t kPerPair = 2000;
  constexpr uint64_t kTotal = wire::kReceiveLanes * kPairsPerLane * kPerPair;
  auto to_of = [](uint32_t lane, uint32_t pair) {
    return ReceiverThread(lane + wire::kReceiveLanes * (pair + 1));
  };
  auto from_of = [](uint32_t lane, uint32_t pair) {
    return Gid::Thread(kSender, 1 + lane * kPairsPerLane + pair);
  };

  enum class Drainers { kPoller, kLaneThreads, kBoth };
  Drainers drainers = Drainers::kPoller;
  uint32_t threads_per_lane = 0;
  std::string how;
  SECTION("the poller drains them (Poll)") {
    drainers = Drainers::kPoller;
    how = "Poll";
  }
  SECTION("each lane's own thread drains it (PollLane)") {
    drainers = Drainers::kLaneThreads;
    threads_per_lane = 1;
    how = "PollLane";
  }
  SECTION("the poller and two threads per lane drain them at once") {
    drainers = Drainers::kBoth;
    threads_per_lane = 2;
    how = "Poll and PollLane";
  }
  INFO("drained by " << how);

  const auto deadline = Clock::now() + 60s;
  std::atomic<bool> stop{false};
  std::vector<Status> posted(wire::kReceiveLanes);
  std::vector<std::thread> posters;
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    posters.emplace_back([&, lane] {
      for (uint64_t n = 0; n < kPerPair; ++n) {
        for (uint32_t pair = 0; pair < kPairsPerLane; ++pair) {
          const LaneMessage message = MakeLaneMessage(from_of(lane, pair), to_of(lane, pair), n,
                                                      (n * 7 + pair) % (kLanePayloadMax + 1));
          Status status =
              PostLaneRetrying(*route, lane, message, deadline, [] { std::this_thread::yield(); });
          if (!status.ok()) {
            posted[lane] = status;
            return;
          }
        }
      }
    });
  }
  std::vector<std::thread> lane_threads;
  std::vector<std::thread::id> drainer_of(wire::kReceiveLanes);
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    for (uint32_t i = 0; i < threads_per_lane; ++i) {
      lane_threads.emplace_back([&, lane] {
        while (!stop.load()) {
          if (t.receiver.shm->PollLane(lane) == 0) std::this_thread::yield();
        }
      });
      drainer_of[lane] = lane_threads.back().get_id();
    }
  }
  auto all_arrived = [&] { return t.receiver.sink.size() >= before + kTotal; };
  bool arrived = false;
  if (drainers == Drainers::kLaneThreads) {
    arrived = Eventually(all_arrived, 60s);
  } else {
    arrived = t.receiver.PollUntil(all_arrived, 60s);
  }
  stop.store(true);
  for (auto& thread : posters) thread.join();
  for (auto& thread : lane_threads) thread.join();
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    INFO("lane " << lane << ": " << posted[lane].ToString());
    CHECK(posted[lane].ok());
  }
  INFO("arrived " << t.receiver.sink.size() - before << " of " << kTotal);
  REQUIRE(arrived);
  // Nothing more comes, however long the lanes are polled.
  for (int i = 0; i < 20; ++i) {
    t.receiver.PumpOnce();
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) t.receiver.shm->PollLane(lane);
  }
  CHECK(t.receiver.sink.size() == before + kTotal);
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    for (uint32_t pair = 0; pair < kPairsPerLane; ++pair) {
      const auto arrivals = ArrivalsTo(t.receiver.sink, to_of(lane, pair));
      CheckPair(arrivals, from_of(lane, pair), to_of(lane, pair), kPerPair);
      if (drainers == Drainers::kLaneThreads) {
        // PollLane(k) drains lane k only: all of it came through k's thread.
        for (const Arrival& arrival : arrivals) REQUIRE(arrival.by == drainer_of[lane]);
      }
    }
  }
  CHECK(t.receiver.PoolInUse() == 0);
}

TEST_CASE("PostLane on a full lane says TryAgain and takes nothing, and takes again after a drain",
          "[shm][lanes]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  SegmentView view(t.receiver.shm->address());
  Channel& channel = view.ChannelOf(kSender);
  const size_t before = t.receiver.sink.size();
  const Gid from = Gid::Thread(kSender, 1);
  const Gid to = ReceiverThread(3);  // lane 3
  // Nobody drains: the lane fills up.
  uint64_t lane_seq = 0;
  for (; lane_seq < kLaneSlots; ++lane_seq) {
    const LaneMessage message = MakeLaneMessage(from, to, lane_seq, lane_seq % 100);
    REQUIRE(route->PostLane(3, message.header, message.payload).ok());
  }
  const LaneMessage refused = MakeLaneMessage(from, to, lane_seq, 60);
  Status full = route->PostLane(3, refused.header, refused.payload);
  CHECK(full.code() == StatusCode::kTryAgain);
  CHECK_FALSE(route->Broken());
  CHECK(channel.lanes[3].tail.value.load() == kLaneSlots);  // nothing written past the ring
  // The other lanes have their own room.
  const LaneMessage other = MakeLaneMessage(from, ReceiverThread(4), 0, 8);
  REQUIRE(route->PostLane(4, other.header, other.payload).ok());

  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == before + kLaneSlots + 1; }));
  for (int i = 0; i < 5; ++i) t.receiver.PumpOnce();
  CHECK(t.receiver.sink.size() == before + kLaneSlots + 1);  // the refused one was not taken
  CheckPair(ArrivalsTo(t.receiver.sink, to), from, to, kLaneSlots);

  REQUIRE(route->PostLane(3, refused.header, refused.payload).ok());
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == before + kLaneSlots + 2; }));
  CheckPair(ArrivalsTo(t.receiver.sink, to), from, to, kLaneSlots + 1);
}

TEST_CASE("a bad frame on a receive lane closes its channel with a log line, others keep working",
          "[shm][lanes]") {
  // Drained by the poller (Poll), or by another thread (PollLane).
  const bool by_lane_thread = GENERATE(false, true);
  INFO((by_lane_thread ? "drained by PollLane from another thread" : "drained by Poll"));
  Trio t;
  uint64_t seq = 0;
  uint64_t second_seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  auto second = ConnectReady(t.second, kSecondSender, t.receiver, second_seq);
  SegmentView view(t.receiver.shm->address());
  Channel& channel = view.ChannelOf(kSender);
  const size_t before = t.receiver.sink.size();
  constexpr uint32_t kLane = 2;
  const Gid from = Gid::Thread(kSender, 1);
  const Gid to = ReceiverThread(kLane + wire::kReceiveLanes);
  // A good message first on the lane: it is delivered.
  const LaneMessage good = MakeLaneMessage(from, to, 0, 30);
  REQUIRE(route->PostLane(kLane, good.header, good.payload).ok());

  std::string expected;
  SECTION("a frame for a thread of another lane") {
    const auto frame = MakeLaneMessage(from, ReceiverThread(5), 0, 30).Frame();
    PublishOnLane(channel, kLane, frame, static_cast<uint32_t>(frame.size()));
    expected = "a frame for another receive lane on lane 2";
  }
  SECTION("a frame that is not a short message") {
    LaneMessage grant = MakeLaneMessage(from, to, 1, 0);
    grant.header.kind = wire::FrameKind::kGrant;
    const auto frame = grant.Frame();
    PublishOnLane(channel, kLane, frame, static_cast<uint32_t>(frame.size()));
    expected = "a frame of kind 4 on receive lane 2: lanes carry short messages only";
  }
  SECTION("an entry that describes a buffer") {
    const auto frame = MakeLaneMessage(from, to, 1, 30).Frame();
    PublishOnLane(channel, kLane, frame, static_cast<uint32_t>(frame.size()),
                  ArrivalEntry::kDescribed);
    expected = "a described frame on a receive lane";
  }
  SECTION("a frame from a foreign source") {
    const auto frame = MakeLaneMessage(Gid::Thread(kSecondSender, 1), to, 0, 30).Frame();
    PublishOnLane(channel, kLane, frame, static_cast<uint32_t>(frame.size()));
    expected = "a frame with a foreign source or destination";
  }
  SECTION("an inline frame longer than an entry") {
    const auto frame = MakeLaneMessage(from, to, 1, 30).Frame();
    PublishOnLane(channel, kLane, frame, kInlineFrameBytes + 1);
    expected = fmt::format("an inline frame of {} bytes", kInlineFrameBytes + 1);
  }
  LogCapture log;
  if (by_lane_thread) {
    std::thread([&] { t.receiver.shm->PollLane(kLane); }).join();
    // The lane's drainer only marks the channel; the poller closes it.
    CHECK(channel.state.load() == static_cast<uint32_t>(ChannelState::kReady));
  }
  REQUIRE(t.receiver.PollUntil(
      [&] { return channel.state.load() == static_cast<uint32_t>(ChannelState::kClosed); }, 10s));
  const std::string text = log.Text();
  INFO(text);
  CHECK_THAT(text, Catch::Matchers::Contains("a bad frame from h1.p1 on receive lane 2"));
  CHECK_THAT(text, Catch::Matchers::Contains(expected));
  CHECK_THAT(text, Catch::Matchers::Contains("closing the channel from h1.p1"));
  CheckPair(ArrivalsTo(t.receiver.sink, to), from, to, 1);
  CHECK(t.receiver.sink.size() == before + 1);

  // The forger's route is dead...
  detail::BufferSlot* slot = NewFrame(t.sender, kSender, kReceiver, seq, 10);
  CHECK(route->Post(slot).code() == StatusCode::kUnavailable);
  t.sender.shm->pool().Unref(slot);

  // ...the other sender's is not, on its lanes or its arrival ring.
  constexpr uint64_t kEach = 100;
  const Gid second_from = Gid::Thread(kSecondSender, 1);
  for (uint64_t n = 0; n < kEach; ++n) {
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      REQUIRE(PostLanePumping(*second, lane,
                              MakeLaneMessage(second_from, ReceiverThread(lane + 16), n, n % 100),
                              t.receiver)
                  .ok());
    }
    REQUIRE(PostPumping(*second, NewFrame(t.second, kSecondSender, kReceiver, second_seq++, 500),
                        t.receiver)
                .ok());
  }
  REQUIRE(t.receiver.PollUntil(
      [&] { return t.receiver.sink.size() == before + 1 + kEach * (wire::kReceiveLanes + 1); }));
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    CheckPair(ArrivalsTo(t.receiver.sink, ReceiverThread(lane + 16)), second_from,
              ReceiverThread(lane + 16), kEach);
  }
  std::vector<Arrival> on_ring;  // the second sender's frames on its arrival ring
  for (const Arrival& arrival : ArrivalsTo(t.receiver.sink, Gid::Thread(kReceiver, 1))) {
    if (arrival.from == kSecondSender) on_ring.push_back(arrival);
  }
  CheckInOrder(on_ring, kSecondSender, kReceiver);
  CHECK(on_ring.size() == second_seq);

  second.reset();
  t.receiver.shm->Housekeeping();
  CHECK(t.receiver.PoolInUse() == 0);
}

TEST_CASE("lane frames wait in their rings while the receiver is congested and all arrive after",
          "[shm][lanes]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  const size_t before = t.receiver.sink.size();
  const Gid from = Gid::Thread(kSender, 1);
  t.receiver.sink.congested.store(true);
  // Lanes 1 and 6 full, lane 4 with a few (threads lane + 8): the congested receiver takes none.
  const std::pair<uint32_t, uint64_t> posts[] = {{1, kLaneSlots}, {6, kLaneSlots}, {4, 10}};
  uint64_t total = 0;
  for (auto [lane, count] : posts) {
    for (uint64_t n = 0; n < count; ++n) {
      const LaneMessage message = MakeLaneMessage(from, ReceiverThread(lane + 8), n, n % 100);
      REQUIRE(route->PostLane(lane, message.header, message.payload).ok());
    }
    total += count;
  }
  for (int i = 0; i < 20; ++i) {
    t.receiver.PumpOnce();
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) t.receiver.shm->PollLane(lane);
  }
  CHECK(t.receiver.sink.size() == before);
  const LaneMessage more = MakeLaneMessage(from, ReceiverThread(9), kLaneSlots, 8);
  CHECK(route->PostLane(1, more.header, more.payload).code() == StatusCode::kTryAgain);
  CHECK_FALSE(route->Broken());
  // The frames wait for the congestion's end, whose wake-up is the receive
  // side's (Sink::Congested's contract): the poller may sleep now...
  CHECK(t.receiver.shm->PrepareToSleep());
  t.receiver.shm->FinishSleep();
  // ...but not once it has ended.
  t.receiver.sink.congested.store(false);
  CHECK_FALSE(t.receiver.shm->PrepareToSleep());
  t.receiver.shm->FinishSleep();

  REQUIRE(PostLanePumping(*route, 1, more, t.receiver).ok());
  ++total;
  REQUIRE(t.receiver.PollUntil([&] { return t.receiver.sink.size() == before + total; }));
  CheckPair(ArrivalsTo(t.receiver.sink, ReceiverThread(9)), from, ReceiverThread(9),
            kLaneSlots + 1);
  CheckPair(ArrivalsTo(t.receiver.sink, ReceiverThread(14)), from, ReceiverThread(14), kLaneSlots);
  CheckPair(ArrivalsTo(t.receiver.sink, ReceiverThread(12)), from, ReceiverThread(12), 10);
  CHECK(t.receiver.PoolInUse() == 0);
}

TEST_CASE(
    "what a sender left on its lanes is delivered when it goes, and the channel's next sender "
    "starts from empty lanes",
    "[shm][lanes]") {
  Trio t;
  SegmentView view(t.receiver.shm->address());
  constexpr uint64_t kEach = 100;  // per lane, fewer than a lane holds
  // The leaver's messages go to threads lane + 8, the next sender's to lane + 16.
  auto leaver_to = [](uint32_t lane) { return ReceiverThread(lane + 8); };
  auto next_to = [](uint32_t lane) { return ReceiverThread(lane + 16); };
  Gid leaver;
  uint32_t index = kMaxChannels;
  size_t before = 0;

  SECTION("it closes its route") {
    leaver = kSender;
    uint64_t seq = 0;
    auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
    index = ChannelIndexOf(view, kSender).value_or(kMaxChannels);
    before = t.receiver.sink.size();
    for (uint64_t n = 0; n < kEach; ++n) {
      for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
        const LaneMessage message =
            MakeLaneMessage(Gid::Thread(leaver, 1), leaver_to(lane), n, (n + lane) % 100);
        REQUIRE(route->PostLane(lane, message.header, message.payload).ok());
      }
    }
    route.reset();  // nobody polled: everything waits on the lanes
  }
  SECTION("its process exits") {
    leaver = kSecondSender;
    int ready[2];
    int go[2];
    REQUIRE(pipe2(ready, O_CLOEXEC | O_NONBLOCK) == 0);
    REQUIRE(pipe2(go, O_CLOEXEC) == 0);
    const std::string directory = t.dir.Sub("tocl.b");
    const std::string address = t.receiver.shm->address();
    std::cout.flush();  // the child must not write the parent's buffered output again
    std::fflush(nullptr);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // No Catch2 in here: the exit code says what went wrong.
      buffers::PoolBudget budget(kBudgetBytes);
      auto reactor = runtime::EpollReactor::Create();
      if (!reactor.ok()) _exit(2);
      CollectingSink sink;
      ShmOptions options;
      options.self_process = kSecondSender;
      options.num_classes = kClasses;
      options.directory = directory;
      auto shm = OpenShm(options, **reactor, sink, budget);
      if (!shm.ok()) _exit(3);
      auto route = (*shm)->Connect(kReceiver, address);
      if (!route.ok()) _exit(4);
      // The first message goes once the receiver adopted the channel.
      const auto deadline = Clock::now() + 20s;
      for (uint64_t n = 0; n < kEach; ++n) {
        for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
          const LaneMessage message =
              MakeLaneMessage(Gid::Thread(leaver, 1), leaver_to(lane), n, (n + lane) % 100);
          Status status =
              PostLaneRetrying(**route, lane, message, deadline, [] { std::this_thread::yield(); });
          if (!status.ok()) _exit(5);
          if (n == 0 && lane == 0) {
            // Adopted: the rest waits on the lanes until the parent says go.
            char byte = 1;
            char answer = 0;
            if (write(ready[1], &byte, 1) != 1 || read(go[0], &answer, 1) != 1) _exit(6);
          }
        }
      }
      _exit(0);  // no destructors: the route is not closed, as when a process is killed
    }
    close(ready[1]);
    close(go[0]);
    char byte = 0;
    // Polls (adopting the channel, taking the first message) until the child is ready.
    REQUIRE(t.receiver.PollUntil([&] { return read(ready[0], &byte, 1) == 1; }));
    index = ChannelIndexOf(view, kSecondSender).value_or(kMaxChannels);
    REQUIRE(write(go[1], &byte, 1) == 1);
    int wstatus = 0;
    REQUIRE(waitpid(child, &wstatus, 0) == child);
    close(ready[0]);
    close(go[1]);
    REQUIRE(WIFEXITED(wstatus));
    REQUIRE(WEXITSTATUS(wstatus) == 0);
    before = t.receiver.sink.size() - 1;  // the first message came before it left
  }
  REQUIRE(index < kMaxChannels);
  INFO("the leaver " << leaver.ToString() << " had channel " << index);

  // Housekeeping finds it gone: it drains the lanes first, then frees the channel.
  t.receiver.shm->Housekeeping();
  CHECK(t.receiver.sink.size() == before + kEach * wire::kReceiveLanes);
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    CheckPair(ArrivalsTo(t.receiver.sink, leaver_to(lane)), Gid::Thread(leaver, 1), leaver_to(lane),
              kEach);
  }
  CHECK(view.channel(index).state.load() == static_cast<uint32_t>(ChannelState::kFree));
  CHECK(t.receiver.PoolInUse() == 0);

  // The next sender gets that channel, with empty lanes: nothing arrives
  // before it posts, then exactly what it posts.
  const size_t left = t.receiver.sink.size();
  auto next = t.sender.shm->Connect(kReceiver, t.receiver.shm->address());
  REQUIRE(next.ok());
  REQUIRE(ChannelIndexOf(view, kSender) == index);
  REQUIRE(t.receiver.PollUntil([&] {
    return view.channel(index).state.load() == static_cast<uint32_t>(ChannelState::kReady);
  }));
  for (int i = 0; i < 5; ++i) {
    t.receiver.PumpOnce();
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) t.receiver.shm->PollLane(lane);
  }
  CHECK(t.receiver.sink.size() == left);
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    INFO("lane " << lane);
    CHECK(view.channel(index).lanes[lane].head.value.load() == 0);
    CHECK(view.channel(index).lanes[lane].tail.value.load() == 0);
  }
  CHECK(t.receiver.shm->PrepareToSleep());
  t.receiver.shm->FinishSleep();
  constexpr uint64_t kNext = 3;
  for (uint64_t n = 0; n < kNext; ++n) {
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      REQUIRE(PostLanePumping(**next, lane,
                              MakeLaneMessage(Gid::Thread(kSender, 2), next_to(lane), n, 16),
                              t.receiver)
                  .ok());
    }
  }
  REQUIRE(t.receiver.PollUntil(
      [&] { return t.receiver.sink.size() >= left + kNext * wire::kReceiveLanes; }));
  for (int i = 0; i < 5; ++i) t.receiver.PumpOnce();
  CHECK(t.receiver.sink.size() == left + kNext * wire::kReceiveLanes);
  for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
    CheckPair(ArrivalsTo(t.receiver.sink, next_to(lane)), Gid::Thread(kSender, 2), next_to(lane),
              kNext);
  }
}

TEST_CASE("a receiver does not sleep past a frame on a lane, and a post on a lane wakes it",
          "[shm][lanes]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  t.receiver.shm->Poll();
  t.receiver.DrainBell();
  SegmentView view(t.receiver.shm->address());
  const size_t before = t.receiver.sink.size();
  constexpr uint32_t kLane = 5;
  const Gid from = Gid::Thread(kSender, 1);
  const Gid to = ReceiverThread(kLane);
  const LaneMessage message = MakeLaneMessage(from, to, 0, 50);
  // SegmentHeader::sleeping: how the owner sleeps (shm_subsystem.cc).
  constexpr uint32_t kInEpoll = 1;
  constexpr uint32_t kOnFutex = 2;

  SECTION("PrepareToSleep says no while a lane holds a frame nobody drained") {
    REQUIRE(t.receiver.shm->PrepareToSleep());
    t.receiver.shm->FinishSleep();
    REQUIRE(route->PostLane(kLane, message.header, message.payload).ok());
    CHECK_FALSE(t.receiver.shm->PrepareToSleep());
    t.receiver.shm->FinishSleep();
    {
      // The lane's holder is another thread, which may stop polling before
      // it looks again: the poller cannot drain the lane, and must not sleep.
      LaneHolder holder(t.receiver.sink, kLane);
      CHECK(t.receiver.shm->Poll() == 0);
      CHECK_FALSE(t.receiver.shm->PrepareToSleep());
      t.receiver.shm->FinishSleep();
      CHECK(t.receiver.sink.size() == before);
    }
    CHECK(t.receiver.shm->Poll() == 1);
    CHECK(t.receiver.shm->PrepareToSleep());
    t.receiver.shm->FinishSleep();
  }
  SECTION("a post on a lane rings the bell of a receiver asleep in its reactor") {
    REQUIRE(t.receiver.shm->PrepareToSleep());
    Status posted = Internal("not posted");
    std::thread poster([&] {
      if (Eventually([&] { return view.header().sleeping.load() == kInEpoll; }, 10s)) {
        posted = route->PostLane(kLane, message.header, message.payload);
      }
    });
    const auto start = Clock::now();
    const int handled = t.receiver.reactor->Wait(15000);
    const auto slept = Clock::now() - start;
    poster.join();
    t.receiver.shm->FinishSleep();
    INFO(posted.ToString());
    REQUIRE(posted.ok());
    CHECK(handled == 1);
    CHECK(slept < 10s);
    CHECK(t.receiver.shm->Poll() == 1);
  }
  SECTION("a post on a lane wakes a receiver asleep on its futex") {
    Status posted = Internal("not posted");
    std::thread poster([&] {
      if (Eventually([&] { return view.header().sleeping.load() == kOnFutex; }, 10s)) {
        posted = route->PostLane(kLane, message.header, message.payload);
      }
    });
    const auto start = Clock::now();
    const bool slept_alone = t.receiver.shm->SleepAlone(start + 15s);
    const auto slept = Clock::now() - start;
    poster.join();
    INFO(posted.ToString());
    REQUIRE(posted.ok());
    CHECK(slept_alone);
    CHECK(slept < 10s);
    CHECK(t.receiver.shm->Poll() == 1);
  }
  CheckPair(ArrivalsTo(t.receiver.sink, to), from, to, 1);
}

TEST_CASE("PollLane after Close delivers nothing and does no harm", "[shm][lanes]") {
  Trio t;
  uint64_t seq = 0;
  auto route = ConnectReady(t.sender, kSender, t.receiver, seq);
  const Gid from = Gid::Thread(kSender, 1);
  // Not a lane: nothing, before Close or after.
  CHECK(t.receiver.shm->PollLane(wire::kReceiveLanes) == 0);
  CHECK(t.receiver.shm->PollLane(~0u) == 0);

  SECTION("frames left on the lanes at Close stay there") {
    for (uint64_t n = 0; n < 20; ++n) {
      for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
        const LaneMessage message = MakeLaneMessage(from, ReceiverThread(lane + 8), n, 20);
        REQUIRE(route->PostLane(lane, message.header, message.payload).ok());
      }
    }
    const size_t at_close = t.receiver.sink.size();
    t.receiver.shm->Close();
    std::atomic<int> delivered{0};
    std::vector<std::thread> pollers;
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      pollers.emplace_back([&, lane] {
        for (int i = 0; i < 100; ++i) delivered += t.receiver.shm->PollLane(lane);
      });
    }
    for (auto& poller : pollers) poller.join();
    CHECK(delivered.load() == 0);
    CHECK(t.receiver.sink.size() == at_close);
  }
  SECTION("threads polling their lanes while Close runs stop delivering when it returns") {
    std::atomic<bool> stop{false};
    std::atomic<bool> closed{false};
    std::atomic<int> after_close{0};  // delivered by PollLane calls begun after Close
    std::atomic<uint32_t> polls_after_close{0};
    std::thread poster([&] {
      for (uint64_t n = 0; !stop.load(); ++n) {
        for (uint32_t lane = 0; lane < wire::kReceiveLanes && !stop.load(); ++lane) {
          const LaneMessage message = MakeLaneMessage(from, ReceiverThread(lane + 8), n, 20);
          while (!stop.load() && route->PostLane(lane, message.header, message.payload).code() ==
                                     StatusCode::kTryAgain) {
            std::this_thread::yield();
          }
        }
      }
    });
    std::vector<std::thread> pollers;
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      pollers.emplace_back([&, lane] {
        while (!stop.load()) {
          const bool after = closed.load();
          const int got = t.receiver.shm->PollLane(lane);
          if (after) {
            after_close += got;
            ++polls_after_close;
          }
          if (got == 0) std::this_thread::yield();
        }
      });
    }
    const bool flowing = Eventually([&] { return t.receiver.sink.size() > 2000; });
    t.receiver.shm->Close();
    const size_t at_close = t.receiver.sink.size();
    closed.store(true);
    const bool polled = Eventually([&] { return polls_after_close.load() >= 800; });
    stop.store(true);
    poster.join();
    for (auto& poller : pollers) poller.join();
    REQUIRE(flowing);
    REQUIRE(polled);
    CHECK(after_close.load() == 0);
    CHECK(t.receiver.sink.size() == at_close);
  }
  CHECK(t.receiver.shm->PollLane(0) == 0);
}

}  // namespace
}  // namespace tocl::subsystem::shm
