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

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
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
  CHECK_THAT(text, Catch::Matchers::Contains("reserved header bits are set"));
  CHECK(t.receiver.sink.size() == 1);
  CHECK(t.receiver.PoolInUse() == 0);
}

}  // namespace
}  // namespace tocl::subsystem::shm
