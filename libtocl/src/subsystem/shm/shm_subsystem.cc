#include "subsystem/shm/shm_subsystem.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>

#include "core/logger.h"
#include "core/posix.h"
#include "core/proc_files.h"
#include "subsystem/shm/segment_layout.h"

namespace tocl::subsystem::shm {

namespace {

Status Errno(std::string_view what, std::string_view path) {
  return ErrnoStatus(fmt::format("{} {}", what, path), errno);
}

// When the process started (core/proc_files.h), 0 when it is gone. With the
// pid it names a process for good (pids are reused).
uint64_t ProcessStart(int pid) {
  return ProcessStartTicks(pid).value_or(0);
}

bool ProcessAlive(int pid, uint64_t start) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  return ProcessStart(pid) == start;
}

// Depth of provided buffers per channel and class: ~256 KiB per class, at
// least 8 and at most 64 buffers.
uint32_t ProvideDepth(uint32_t class_index) {
  size_t depth = (size_t{256} << 10) / buffers::ClassBytes(class_index);
  return static_cast<uint32_t>(std::clamp<size_t>(depth, 8, 64));
}

// A mapping of a whole segment, ours or a peer's.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~Mapping() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Mapping(Mapping&& other) noexcept : base_(other.base_), bytes_(other.bytes_) {
    other.base_ = nullptr;
  }
  Mapping& operator=(Mapping&&) = delete;

  static Result<Mapping> Open(const std::string& path, bool create, size_t bytes) {
    int fd = open(path.c_str(),
                  create ? (O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC) : (O_RDWR | O_CLOEXEC), 0600);
    if (fd < 0) return Errno(create ? "create" : "open", path);
    if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      Status status = Errno("ftruncate", path);
      close(fd);
      return status;
    }
    if (!create) {
      struct stat st;
      if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < SegmentLayout::kDataOffset) {
        close(fd);
        return FailedPrecondition(fmt::format("{} is not a tocl shm segment", path));
      }
      bytes = static_cast<size_t>(st.st_size);
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    Status status = base == MAP_FAILED ? Errno("mmap", path) : Status::Ok();
    close(fd);
    if (!status.ok()) return status;
    return Mapping(base, bytes);
  }

  std::byte* bytes() const { return static_cast<std::byte*>(base_); }
  size_t size() const { return bytes_; }
  SegmentHeader& header() const { return *static_cast<SegmentHeader*>(base_); }
  Channel& channel(uint32_t i) const {
    return reinterpret_cast<Channel*>(bytes() + SegmentLayout::kChannelsOffset)[i];
  }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// A bell is an abstract unix datagram socket named after the segment: a
// sleeping owner's epoll set watches it, and a sender rings it with one
// datagram. No file to clean up, and no SIGPIPE when the owner is gone.
sockaddr_un BellAddress(const std::string& segment_path, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::string name = segment_path.substr(0, segment_path.size() - 4) + ".bell";
  name = name.substr(0, sizeof(address.sun_path) - 2);
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return address;
}

// A socket connected to the bell of `segment_path`, or -1.
int ConnectBell(const std::string& segment_path) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t length;
  sockaddr_un address = BellAddress(segment_path, length);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// SegmentHeader::sleeping: how the owner sleeps, so a sender knows how to
// wake it.
constexpr uint32_t kAwake = 0;
constexpr uint32_t kInEpoll = 1;  // ring the bell
constexpr uint32_t kOnFutex = 2;  // futex-wake the word itself

// One datagram; a full queue (EAGAIN) has rung already, a gone owner
// (ECONNREFUSED) needs no ringing.
void RingBell(int bell_fd) {
  if (bell_fd < 0) return;
  char byte = 1;
  [[maybe_unused]] ssize_t n = send(bell_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Why frames wait in a ring (a drain stopped before them): nothing, our
// receivers are congested, or our pool has no buffer for the next one.
enum class Stall : uint32_t { kNone, kCongested, kNoBuffer };

// Carves pool slabs out of our segment's data region.
class SegmentSlabMemory final : public buffers::SlabMemory {
 public:
  SegmentSlabMemory(std::byte* base, size_t bytes) : base_(base), bytes_(bytes) {}
  Result<buffers::Slab> Allocate(size_t bytes) override {
    std::lock_guard lock(mu_);
    if (next_ + bytes > bytes_) {
      return ResourceExhausted(
          fmt::format("the shm segment's {} byte data region is full", bytes_));
    }
    buffers::Slab slab{base_ + next_, next_};
    next_ += bytes;
    return slab;
  }

 private:
  std::byte* const base_;
  const size_t bytes_;
  std::mutex mu_;
  size_t next_ = 0;  // guarded by mu_
};

// Sending side: our channel in a peer's segment.
class ShmRoute final : public Route {
 public:
  ShmRoute(Mapping mapping, uint32_t channel_index, int bell_fd, Gid peer, uint32_t num_classes)
      : mapping_(std::move(mapping)),
        channel_(mapping_.channel(channel_index)),
        bell_fd_(bell_fd),
        peer_(peer),
        num_classes_(num_classes),
        owner_pid_(mapping_.header().owner_pid),
        owner_start_(mapping_.header().owner_start),
        data_(mapping_.bytes() + mapping_.header().data_offset),
        data_bytes_(mapping_.header().data_bytes) {}

  ~ShmRoute() override {
    // Let the owner reclaim the channel at once: we are not coming back.
    uint32_t expected = static_cast<uint32_t>(ChannelState::kReady);
    channel_.state.compare_exchange_strong(expected, static_cast<uint32_t>(ChannelState::kClosed));
    if (bell_fd_ >= 0) {
      WakeOwner();
      close(bell_fd_);
    }
  }

  Status Post(detail::BufferSlot* slot) override {
    const uint32_t length = static_cast<uint32_t>(wire::kHeaderBytes + slot->header().length);
    std::byte* target = nullptr;
    Descriptor desc;
    TOCL_RETURN_IF_ERROR(Reserve(slot->class_index, length, desc, target));
    std::memcpy(target, slot->bytes, length);
    Publish(desc);
    slot->set_state(BufferState::kSent);
    slot->pool->Unref(slot);
    return Status::Ok();
  }

  Status PostCopy(const wire::Header& header, std::span<const std::byte> payload) override {
    const uint32_t length = static_cast<uint32_t>(wire::kHeaderBytes + payload.size());
    std::byte* target = nullptr;
    Descriptor desc;
    TOCL_RETURN_IF_ERROR(Reserve(buffers::ClassFor(payload.size()), length, desc, target));
    wire::EncodeHeader(header, target);
    // memcpy from the null data() of an empty span is undefined, even for 0 bytes.
    if (!payload.empty()) std::memcpy(target + wire::kHeaderBytes, payload.data(), payload.size());
    Publish(desc);
    return Status::Ok();
  }

  Status PostLane(uint32_t lane, const wire::Header& header,
                  std::span<const std::byte> payload) override {
    const uint32_t length = static_cast<uint32_t>(wire::kHeaderBytes + payload.size());
    if (lane >= wire::kReceiveLanes || length > kInlineFrameBytes) {
      return Status(StatusCode::kUnimplemented, "not a frame for a lane");
    }
    LaneCache& cache = lane_cache_[lane];
    // A lane post finds a closed channel by itself, as Reserve does: the
    // runtime may post a pair's short messages nowhere else.
    if (!ChannelOpen()) return ChannelNotOpen(cache.stalls);
    auto& ring = channel_.lanes[lane];
    uint32_t& head_cache = cache.head;
    const uint32_t tail = ring.tail.value.load(std::memory_order_relaxed);
    if (tail - head_cache >= ring.kSize) {
      head_cache = ring.head.value.load(std::memory_order_acquire);
      if (tail - head_cache >= ring.kSize) {
        // A full lane of an owner that exited stays full.
        if (!OwnerAliveThrottled(cache.stalls)) return Fail("exited");
        return Status(StatusCode::kTryAgain, "lane full");  // short: no allocation
      }
    }
    ArrivalEntry& entry = ring.entries[tail % ring.kSize];
    wire::EncodeHeader(header, entry.frame);
    if (!payload.empty())
      std::memcpy(entry.frame + wire::kHeaderBytes, payload.data(), payload.size());
    entry.kind = ArrivalEntry::kInline;
    entry.desc = Descriptor{0, length, 0};
    entry.seq.store(tail + 1, std::memory_order_release);
    ring.tail.value.store(tail + 1,
                          std::memory_order_seq_cst);  // Dekker with `sleeping`, as Publish
    WakeOwner();
    return Status::Ok();
  }

  uint32_t LaneFrameBytes() const override { return kInlineFrameBytes; }
  bool Drained() const override { return true; }  // a frame is done when Post returns
  bool Broken() const override { return broken_.load(std::memory_order_relaxed); }
  // Wakes the owner however it sleeps (bell or futex), e.g. to adopt a
  // channel just claimed.
  void WakeOwnerNow() { WakeOwner(); }

 private:
  // Finds a provided buffer of class >= `class_index` and room on the
  // arrival ring. TryAgain when there is none (the owner has not provided
  // yet, or is congested), Unavailable when the owner is gone.
  // `desc` says what Publish will announce, `target` where the frame goes:
  // the next arrival entry itself, or the provided buffer `desc` names.
  Status Reserve(uint32_t class_index, uint32_t length, Descriptor& desc, std::byte*& target) {
    if (!ChannelOpen()) return ChannelNotOpen(stalls_);
    auto& arrivals = channel_.arrivals;
    const uint32_t tail = arrivals.tail.value.load(std::memory_order_relaxed);
    if (tail - arrival_head_cache_ >= arrivals.kSize) {
      arrival_head_cache_ = arrivals.head.value.load(std::memory_order_acquire);
      if (tail - arrival_head_cache_ >= arrivals.kSize) return Stall();
    }
    if (length <= kInlineFrameBytes) {
      // In the arrival entry itself: no provided buffer needed.
      desc = Descriptor{0, length, 0};
      target = arrivals.entries[tail % arrivals.kSize].frame;
      return Status::Ok();
    }
    if (class_index >= num_classes_) {
      return InvalidArgument(fmt::format("a {} byte frame is larger than {}'s largest buffer",
                                         length, peer_.ToString()));
    }
    if (PopProvided(class_index, length, desc, target)) return Status::Ok();
    if (broken_.load(std::memory_order_relaxed))
      return Fail("provided a buffer outside its segment");
    // None: ask the owner to ring our bell when it provides more, then look
    // once more (it may have provided between our look and the flag; it
    // stores its ring's tail and then loads the flag, both seq_cst).
    channel_.sender_waiting.store(1, std::memory_order_seq_cst);
    if (PopProvided(class_index, length, desc, target)) return Status::Ok();
    if (broken_.load(std::memory_order_relaxed))
      return Fail("provided a buffer outside its segment");
    return Stall();
  }

  // Takes a provided buffer of the smallest class >= class_index that holds
  // `length` bytes inside the owner's data region. A descriptor that does
  // not breaks the route (and counts as taken).
  bool PopProvided(uint32_t class_index, uint32_t length, Descriptor& desc, std::byte*& target) {
    for (uint32_t c = class_index; c < num_classes_; ++c) {
      auto& ring = channel_.provides[c];
      const uint32_t head = ring.head.value.load(std::memory_order_relaxed);
      if (head == provide_tail_cache_[c]) {
        provide_tail_cache_[c] = ring.tail.value.load(std::memory_order_seq_cst);
        if (head == provide_tail_cache_[c]) continue;
      }
      desc = ring.entries[head % ring.kSize];
      ring.head.value.store(head + 1, std::memory_order_release);
      if (desc.offset + buffers::ClassBytes(c) > data_bytes_ || length > buffers::ClassBytes(c)) {
        broken_.store(true, std::memory_order_relaxed);
        return false;
      }
      desc.length = length;
      target = data_ + desc.offset;
      return true;
    }
    return false;
  }

  // Publishes the entry Reserve chose (its frame written by then): the
  // frame inline when it fits, else the descriptor of the provided buffer.
  // The entry's fields are written here, next to `seq`, not in Reserve:
  // the owner spins on this cache line, and every store spread out before
  // the frame's copy gives it a chance to take the line back in between
  // (measured: ~170 ns more per 8 B one-way).
  void Publish(const Descriptor& desc) {
    auto& arrivals = channel_.arrivals;
    const uint32_t tail = arrivals.tail.value.load(std::memory_order_relaxed);
    ArrivalEntry& entry = arrivals.entries[tail % arrivals.kSize];
    entry.kind =
        desc.length <= kInlineFrameBytes ? ArrivalEntry::kInline : ArrivalEntry::kDescribed;
    entry.desc = desc;
    // The owner polls `seq` (release: the entry and frame before it).
    entry.seq.store(tail + 1, std::memory_order_release);
    // seq_cst store, then seq_cst load of `sleeping` in WakeOwner: the
    // owner does the mirror image (store sleeping, load tail), so one of
    // the two sees the other (Dekker).
    arrivals.tail.value.store(tail + 1, std::memory_order_seq_cst);
    WakeOwner();
  }

  void WakeOwner() {
    auto& sleeping = mapping_.header().sleeping;
    if (sleeping.load(std::memory_order_seq_cst) == kAwake) return;
    switch (sleeping.exchange(kAwake, std::memory_order_seq_cst)) {
      case kInEpoll:
        RingBell(bell_fd_);
        break;
      case kOnFutex:
        FutexWakeAll(sleeping, FutexScope::kShared);
        break;
      default:
        break;
    }
  }

  // No buffer (or no room on the arrival ring): the owner rings our bell
  // when it provides more.
  Status Stall() {
    channel_.sender_waiting.store(1, std::memory_order_seq_cst);
    if (!OwnerAliveThrottled(stalls_)) return Fail("exited");
    // A message short enough for the string's own buffer: this is the
    // stream's every-message path while the receiver is behind.
    return Status(StatusCode::kTryAgain, "no room yet");
  }

  // The route is open and the owner has made the channel ready: the check
  // of every post (a bool, no Status built on the way of a message).
  bool ChannelOpen() const {
    return !broken_.load(std::memory_order_relaxed) &&
           channel_.state.load(std::memory_order_acquire) ==
               static_cast<uint32_t>(ChannelState::kReady);
  }
  // Why not: TryAgain while the owner has not looked yet (and lives),
  // Unavailable (the route broken) once it closed the channel or went.
  // `stalls`: the caller's count for OwnerAliveThrottled.
  Status ChannelNotOpen(uint64_t& stalls) {
    if (broken_.load(std::memory_order_relaxed)) {
      return Unavailable(fmt::format("shm route to {} is closed", peer_.ToString()));
    }
    // Loaded again: ready by now (since ChannelOpen looked) is a retry too.
    auto state = static_cast<ChannelState>(channel_.state.load(std::memory_order_acquire));
    if (state == ChannelState::kReady ||
        (state == ChannelState::kClaimed && OwnerAliveThrottled(stalls))) {
      return Status(StatusCode::kTryAgain, "channel not ready");
    }
    return Fail("closed its shm channel");
  }

  // `stalls`: the caller's count (the route's, or a lane's: each is written
  // under its own lock).
  bool OwnerAliveThrottled(uint64_t& stalls) const {
    if (++stalls % 4096 != 1) return true;
    return ProcessAlive(owner_pid_, owner_start_);
  }

  // Also by a lane's poster: broken_ only ever goes from false to true.
  Status Fail(std::string_view why) {
    broken_.store(true, std::memory_order_relaxed);
    return Unavailable(fmt::format("process {} {}", peer_.ToString(), why));
  }

  Mapping mapping_;
  Channel& channel_;
  int bell_fd_;
  Gid peer_;
  uint32_t num_classes_;
  int owner_pid_;
  uint64_t owner_start_;
  std::byte* data_;
  uint64_t data_bytes_;
  // Consumer/producer caches: only this side writes them (under the
  // runtime's per-destination lock; a lane's under that lane's lock).
  uint32_t arrival_head_cache_ = 0;
  uint32_t provide_tail_cache_[buffers::kMaxClasses] = {};
  struct alignas(64) LaneCache {
    uint32_t head = 0;
    uint64_t stalls = 0;
  };
  LaneCache lane_cache_[wire::kReceiveLanes];
  uint64_t stalls_ = 0;
  // Set (false to true only) by the route's lock holder or a lane's
  // poster, read by both.
  std::atomic<bool> broken_{false};
};

class ShmSubsystemImpl final : public Subsystem, public FdHandler {
 public:
  ShmSubsystemImpl(const ShmOptions& options, Reactor& reactor, Sink& sink,
                   buffers::PoolBudget& budget, std::string path, Mapping mapping, int bell_fd)
      : options_(options),
        reactor_(reactor),
        sink_(sink),
        path_(std::move(path)),
        mapping_(std::move(mapping)),
        bell_fd_(bell_fd),
        slab_memory_(mapping_.bytes() + SegmentLayout::kDataOffset,
                     mapping_.size() - SegmentLayout::kDataOffset),
        pool_(Network::kShm, options.num_classes, slab_memory_, budget),
        limits_{static_cast<uint32_t>(buffers::ClassBytes(options.num_classes - 1) -
                                      wire::kHeaderBytes)},
        self_start_(ProcessStart(getpid())) {
    // Inline frames left in a ring for want of a buffer (Drain): the next
    // release wakes the poller however it sleeps.
    pool_.SetReleaseHook([this] { reactor_.Wake(); });
  }

  ~ShmSubsystemImpl() override { Close(); }

  Network network() const override { return Network::kShm; }
  const std::string& address() const override { return path_; }
  buffers::BufferPool& pool() override { return pool_; }

  bool Reaches(Gid peer_process, std::string_view address) const override {
    return peer_process.host() == options_.self_process.host() &&
           address.starts_with(options_.directory + "/tocl.") && address.ends_with(".seg");
  }

  Result<std::unique_ptr<Route>> Connect(Gid peer_process, std::string_view address) override {
    if (!Reaches(peer_process, address)) {
      return InvalidArgument(fmt::format("'{}' is not a shm address on this host", address));
    }
    std::string path(address);
    TOCL_ASSIGN_OR_RETURN(Mapping mapping, Mapping::Open(path, false, 0));
    SegmentHeader& header = mapping.header();
    if (header.magic != kSegmentMagic || header.version != kSegmentVersion ||
        header.owner_process != peer_process.raw() ||
        header.data_offset != SegmentLayout::kDataOffset ||
        header.data_offset + header.data_bytes > mapping.size()) {
      return FailedPrecondition(
          fmt::format("{} is not the shm segment of {}", path, peer_process.ToString()));
    }
    if (!ProcessAlive(header.owner_pid, header.owner_start)) {
      return Unavailable(fmt::format("process {} has exited", peer_process.ToString()));
    }
    int bell = ConnectBell(path);
    if (bell < 0) return Errno("connect to the bell of", path);
    for (uint32_t i = 0; i < kMaxChannels; ++i) {
      Channel& channel = mapping.channel(i);
      uint32_t expected = static_cast<uint32_t>(ChannelState::kFree);
      if (!channel.state.compare_exchange_strong(expected,
                                                 static_cast<uint32_t>(ChannelState::kClaiming))) {
        continue;
      }
      channel.sender_process = options_.self_process.raw();
      channel.sender_pid = getpid();
      channel.sender_start = self_start_;
      std::snprintf(channel.sender_segment, kPathBytes, "%s", path_.c_str());
      channel.state.store(static_cast<uint32_t>(ChannelState::kClaimed), std::memory_order_release);
      header.attach_seq.fetch_add(1, std::memory_order_seq_cst);
      auto route =
          std::make_unique<ShmRoute>(std::move(mapping), i, bell, peer_process, header.num_classes);
      // The owner adopts new channels from its poll loop: wake it however
      // it sleeps (a futex sleeper does not hear the bell).
      route->WakeOwnerNow();
      RingBell(bell);
      return std::unique_ptr<Route>(std::move(route));
    }
    close(bell);
    return ResourceExhausted(fmt::format("process {} has no free shm channel ({} senders)",
                                         peer_process.ToString(), kMaxChannels));
  }

  int Poll() override {
    SegmentHeader& header = mapping_.header();
    const uint32_t attach_seq = header.attach_seq.load(std::memory_order_acquire);
    if (attach_seq != seen_attach_seq_) {
      seen_attach_seq_ = attach_seq;
      AdoptChannels();
    }
    int delivered = 0;
    for (auto& in : inbound_) {
      if (in.index == kNone) continue;
      if (lanes_[in.index].broken.load(std::memory_order_acquire)) {
        ProtocolError(in, "a bad frame on a receive lane (logged above)");
        continue;
      }
      delivered += Drain(in);
    }
    // One look at every lane of every channel, then a drain of those with
    // something (the poller's every round: it must stay short).
    uint32_t waiting = 0;  // bit k: lane k has arrivals
    for (uint64_t channels = lane_channels_.load(std::memory_order_acquire); channels != 0;
         channels &= channels - 1) {
      waiting |= LanesWithArrivals(static_cast<uint32_t>(std::countr_zero(channels)));
    }
    for (; waiting != 0; waiting &= waiting - 1) {
      delivered += DrainLaneIfFree(static_cast<uint32_t>(std::countr_zero(waiting)));
    }
    if (!topup_.empty() && !sink_.Congested()) TopUpAll();
    return delivered;
  }

  int PollLane(uint32_t lane) override {
    if (lane >= wire::kReceiveLanes) return 0;
    for (uint64_t channels = lane_channels_.load(std::memory_order_acquire); channels != 0;
         channels &= channels - 1) {
      const uint32_t i = static_cast<uint32_t>(std::countr_zero(channels));
      if ((LanesWithArrivals(i) & (1u << lane)) != 0) return DrainLaneIfFree(lane);
    }
    return 0;
  }

  bool PrepareToSleep() override { return AnnounceSleep(kInEpoll); }

  bool SleepAlone(std::chrono::steady_clock::time_point deadline) override {
    if (!topup_.empty()) return false;  // retried by polling, not by a peer
    // A wake from inside the process may come after the poller's last look
    // at what it waits for and before it announced the futex: it is kept
    // (wake_pending_) and ends this sleep before it starts.
    if (AnnounceSleep(kOnFutex) && !wake_pending_.load(std::memory_order_seq_cst))
      FutexWait(mapping_.header().sleeping, kOnFutex, deadline, FutexScope::kShared);
    FinishSleep();
    wake_pending_.store(false, std::memory_order_relaxed);
    return true;
  }

  void WakeSleeper() override {
    // seq_cst store, then the CAS's load of `sleeping`; SleepAlone stores
    // `sleeping`, then loads this: one of them sees the other.
    wake_pending_.store(true, std::memory_order_seq_cst);
    uint32_t expected = kOnFutex;
    auto& sleeping = mapping_.header().sleeping;
    if (sleeping.compare_exchange_strong(expected, kAwake))
      FutexWakeAll(sleeping, FutexScope::kShared);
  }

  // Tells senders how to wake us, then looks once more (they publish, then
  // read the flag; we set the flag, then read their rings: seq_cst both).
  bool AnnounceSleep(uint32_t how) {
    SegmentHeader& header = mapping_.header();
    header.sleeping.store(how, std::memory_order_seq_cst);
    if (header.attach_seq.load(std::memory_order_seq_cst) != seen_attach_seq_) return false;
    for (auto& in : inbound_) {
      if (in.index == kNone) continue;
      // Frames left waiting while congested: receiving below the cap wakes
      // us (Sink::Congested's contract), not the sender.
      // Frames left waiting for a buffer: the pool's release hook wakes us.
      if (in.stall == Stall::kCongested && sink_.Congested()) continue;
      if (in.stall == Stall::kNoBuffer) continue;
      Channel& channel = mapping_.channel(in.index);
      if (channel.arrivals.tail.value.load(std::memory_order_seq_cst) != in.head) return false;
    }
    // A lane's frames wait for its holder, who may be about to stop
    // polling: sleep only when a stall's own wake-up is due (as above).
    for (uint64_t channels = lane_channels_.load(std::memory_order_seq_cst); channels != 0;
         channels &= channels - 1) {
      const uint32_t i = static_cast<uint32_t>(std::countr_zero(channels));
      for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
        if (mapping_.channel(i).lanes[lane].tail.value.load(std::memory_order_seq_cst) ==
            lanes_[i].head[lane].load(std::memory_order_seq_cst)) {
          continue;
        }
        const Stall stall = lanes_[i].stall[lane].load(std::memory_order_relaxed);
        if (stall == Stall::kCongested && sink_.Congested()) continue;
        if (stall == Stall::kNoBuffer) continue;
        return false;
      }
    }
    return true;
  }

  void FinishSleep() override {
    mapping_.header().sleeping.store(kAwake, std::memory_order_relaxed);
  }

  void OnReady(uint32_t) override {
    char drain[64];
    while (recv(bell_fd_, drain, sizeof(drain), MSG_DONTWAIT) > 0) {
    }
  }

  void Housekeeping() override {
    for (auto& in : inbound_) {
      if (in.index == kNone) continue;
      Channel& channel = mapping_.channel(in.index);
      const bool closed = channel.state.load(std::memory_order_acquire) ==
                          static_cast<uint32_t>(ChannelState::kClosed);
      if (closed || !ProcessAlive(in.sender_pid, in.sender_start)) {
        // What it published before it went is delivered (once there is
        // memory for it: a stalled channel is released later).
        if (DrainChannel(in) && in.index != kNone) Release(in, /*free_channel=*/true);
      }
    }
  }

  bool DrainFrom(Gid process) override {
    bool empty = true;
    for (auto& in : inbound_) {
      if (in.index != kNone && in.sender == process) empty = DrainChannel(in) && empty;
    }
    return empty;
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    // No lane drain is running or starts once every lane was entered.
    closing_.store(true, std::memory_order_seq_cst);
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      sink_.EnterLane(lane);
      sink_.LeaveLane(lane);
    }
    for (uint32_t i = 0; i < kMaxChannels; ++i) {
      mapping_.channel(i).state.store(static_cast<uint32_t>(ChannelState::kClosed),
                                      std::memory_order_release);
    }
    for (auto& in : inbound_) {
      if (in.sender_bell >= 0) {
        RingBell(in.sender_bell);
        close(in.sender_bell);
        in.sender_bell = -1;
      }
    }
    reactor_.Remove(bell_fd_);
    close(bell_fd_);
    unlink(path_.c_str());
  }

  void Start() { (void)reactor_.Add(bell_fd_, EPOLLIN, this); }

 private:
  static constexpr uint32_t kNone = ~0u;

  struct Inbound {
    uint32_t index = kNone;  // channel index in our segment
    Gid sender;
    int sender_pid = 0;
    uint64_t sender_start = 0;
    int sender_bell = -1;
    uint32_t head = 0;  // our copy of the arrival ring's head
    uint32_t provided[buffers::kMaxClasses] = {};
    Stall stall = Stall::kNone;
    bool took_provided = false;  // since the last TopUp
  };

  // Everything the sender of `in` published, on its arrival ring and its
  // lanes, handed to the sink as far as memory allows. True when nothing is
  // left (also when a bad frame closed the channel: `in` is then free).
  // By the poller.
  bool DrainChannel(Inbound& in) {
    Drain(in);
    if (in.index == kNone) return true;  // closed for a protocol error
    bool lanes_stalled = false;
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      sink_.EnterLane(lane);
      DrainLane(in.index, lane);
      lanes_stalled = lanes_stalled ||
                      lanes_[in.index].stall[lane].load(std::memory_order_relaxed) != Stall::kNone;
      sink_.LeaveLane(lane);
    }
    if (lanes_[in.index].broken.load(std::memory_order_acquire)) {
      ProtocolError(in, "a bad frame on a receive lane (logged above)");
      return true;
    }
    return in.stall == Stall::kNone && !lanes_stalled;
  }

  void AdoptChannels() {
    for (uint32_t i = 0; i < kMaxChannels; ++i) {
      Channel& channel = mapping_.channel(i);
      if (channel.state.load(std::memory_order_acquire) !=
          static_cast<uint32_t>(ChannelState::kClaimed)) {
        continue;
      }
      Inbound in;
      in.index = i;
      in.sender = Gid::FromRaw(channel.sender_process);
      in.sender_pid = channel.sender_pid;
      in.sender_start = channel.sender_start;
      std::string sender_segment(channel.sender_segment,
                                 strnlen(channel.sender_segment, kPathBytes));
      if (!in.sender.is_process() || !sender_segment.ends_with(".seg")) {
        Log().warn("tocl shm: rejecting channel {} claimed by {} ({})", i, in.sender.ToString(),
                   sender_segment);
        channel.state.store(static_cast<uint32_t>(ChannelState::kClosed),
                            std::memory_order_release);
        continue;
      }
      in.sender_bell = ConnectBell(sender_segment);
      auto slot = std::find_if(inbound_.begin(), inbound_.end(),
                               [](const Inbound& x) { return x.index == kNone; });
      if (slot == inbound_.end()) {
        inbound_.push_back(in);
        slot = inbound_.end() - 1;
      } else {
        *slot = in;
      }
      TopUp(*slot);
      // Its lanes are empty (a new segment, or Release reset them).
      lanes_[i].sender.store(in.sender.raw(), std::memory_order_release);
      lane_channels_.fetch_or(uint64_t{1} << i, std::memory_order_seq_cst);
      channel.state.store(static_cast<uint32_t>(ChannelState::kReady), std::memory_order_release);
      RingBell(slot->sender_bell);
    }
  }

  // The frame of `entry` in a buffer of our pool: copied out of the entry
  // when inline, else the provided buffer it names (checked against what
  // we provided to this channel); `length` is the frame's length as checked.
  // nullptr with `error` ok: it must wait (in.stall says why); with an
  // error: the sender broke the protocol.
  detail::BufferSlot* TakeFrame(Inbound& in, const ArrivalEntry& entry, uint32_t& length,
                                Status& error) {
    // The sender can still write the entry: read what is checked once.
    const uint32_t kind = entry.kind;
    const Descriptor desc = entry.desc;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    length = desc.length;
    if (kind == ArrivalEntry::kInline) return TakeInline(entry, length, in.stall, error);
    if (kind != ArrivalEntry::kDescribed) {
      error = InvalidArgument(fmt::format("an arrival of unknown kind {}", kind));
      return nullptr;
    }
    detail::BufferSlot* slot = pool_.SlotAt(desc.slot_index);
    if (slot == nullptr || slot->offset != desc.offset || desc.slot_index >= owner_.size() ||
        owner_[desc.slot_index] != in.index + 1) {
      error = InvalidArgument("a descriptor for a buffer it was not given");
      return nullptr;
    }
    owner_[desc.slot_index] = 0;
    in.took_provided = true;
    --in.provided[slot->class_index];
    pool_.CountProvided(slot->class_index, -1);
    return slot;
  }

  // The inline frame of `entry` (`length` bytes as the entry says, read
  // once) copied into a buffer of our pool; nullptr with `error` ok when it
  // must wait (`stall` says why).
  detail::BufferSlot* TakeInline(const ArrivalEntry& entry, uint32_t length, Stall& stall,
                                 Status& error) {
    if (length < wire::kHeaderBytes || length > kInlineFrameBytes) {
      error = InvalidArgument(fmt::format("an inline frame of {} bytes", length));
      return nullptr;
    }
    if (sink_.Congested()) {
      stall = Stall::kCongested;
      return nullptr;
    }
    const uint32_t class_index = buffers::ClassFor(length - wire::kHeaderBytes);
    detail::BufferSlot* slot = pool_.TryGet(class_index);
    if (slot == nullptr) {
      // Ask to be woken by the next release, then look once more.
      pool_.WantRelease();
      slot = pool_.TryGet(class_index);
    }
    if (slot == nullptr) {
      stall = Stall::kNoBuffer;
      return nullptr;
    }
    std::memcpy(slot->bytes, entry.frame, length);
    return slot;
  }

  // The checks of a frame taken from a channel of `sender`: a valid header
  // that matches the entry's length, from that sender to us.
  Status ValidateFrame(Gid sender, detail::BufferSlot& slot, uint32_t length) const {
    const wire::Header& header = slot.header();
    TOCL_RETURN_IF_ERROR(wire::ValidateHeader(header, limits_));
    if (length != wire::kHeaderBytes + header.length ||
        length > buffers::ClassBytes(slot.class_index)) {
      return InvalidArgument("frame length does not match its descriptor");
    }
    if (header.kind == wire::FrameKind::kHello || !wire::SourceFits(header, sender) ||
        !wire::DestinationFits(header, options_.self_process)) {
      return InvalidArgument("a frame with a foreign source or destination");
    }
    return Status::Ok();
  }

  // `in` waits for memory (congestion, our pool at its cap): the next
  // polls look at it again.
  void NoteShort(Inbound& in) {
    if (std::find(topup_.begin(), topup_.end(), in.index) == topup_.end()) {
      topup_.push_back(in.index);
    }
  }

  int Drain(Inbound& in) {
    Channel& channel = mapping_.channel(in.index);
    auto& arrivals = channel.arrivals;
    int delivered = 0;
    uint32_t head = in.head;
    in.stall = Stall::kNone;
    for (;; ++head) {
      ArrivalEntry& entry = arrivals.entries[head % arrivals.kSize];
      if (entry.seq.load(std::memory_order_acquire) != head + 1) break;
      Status valid;
      uint32_t length = 0;
      detail::BufferSlot* slot = TakeFrame(in, entry, length, valid);
      // Congested, or our pool at its cap: the frame waits in the ring (its
      // sender waits for room), nothing is lost.
      if (slot == nullptr && valid.ok()) break;
      if (slot == nullptr) {
        ProtocolError(in, valid.message());
        return delivered;
      }
      valid = ValidateFrame(in.sender, *slot, length);
      if (!valid.ok()) {
        pool_.Unref(slot);
        arrivals.head.value.store(head + 1, std::memory_order_release);
        in.head = head + 1;
        ProtocolError(in, valid.message());
        return delivered;
      }
      ++delivered;
      if (Status status = sink_.OnMessage(in.sender, buffers::SlotRef(slot)); !status.ok()) {
        arrivals.head.value.store(head + 1, std::memory_order_release);
        in.head = head + 1;
        ProtocolError(in, status.message());
        return delivered;
      }
    }
    if (head == in.head) {
      if (in.stall != Stall::kNone) NoteShort(in);
      return 0;
    }
    in.head = head;
    arrivals.head.value.store(head, std::memory_order_release);
    if (sink_.Congested()) {
      NoteShort(in);
    } else if (in.took_provided) {
      // Only frames in provided buffers use them up (inline ones do not).
      in.took_provided = false;
      TopUp(in);
    }
    return delivered;
  }

  // Lane `lane` of channel `i`: what its sender posted for our threads of
  // that lane, delivered in order. By the holder of the lane only.
  int DrainLane(uint32_t i, uint32_t lane) {
    ChannelLanes& channel_lanes = lanes_[i];
    const uint64_t sender_raw = channel_lanes.sender.load(std::memory_order_acquire);
    if (sender_raw == 0 || channel_lanes.broken.load(std::memory_order_relaxed)) return 0;
    const Gid sender = Gid::FromRaw(sender_raw);
    auto& ring = mapping_.channel(i).lanes[lane];
    const uint32_t first = channel_lanes.head[lane].load(std::memory_order_relaxed);
    uint32_t head = first;
    Stall stall = Stall::kNone;
    int delivered = 0;
    for (;; ++head) {
      ArrivalEntry& entry = ring.entries[head % ring.kSize];
      if (entry.seq.load(std::memory_order_acquire) != head + 1) break;
      // The sender can still write the entry: read what is checked once.
      const uint32_t kind = entry.kind;
      const uint32_t length = entry.desc.length;
      std::atomic_signal_fence(std::memory_order_seq_cst);
      Status error;
      detail::BufferSlot* slot = nullptr;
      if (kind != ArrivalEntry::kInline) {
        error = InvalidArgument("a described frame on a receive lane");
      } else {
        slot = TakeInline(entry, length, stall, error);
        if (slot == nullptr && error.ok()) break;  // waits in the ring: nothing is lost
      }
      if (slot != nullptr) {
        error = ValidateFrame(sender, *slot, length);
        const wire::Header& header = slot->header();
        if (error.ok() && header.kind != wire::FrameKind::kMessage) {
          error = InvalidArgument(
              fmt::format("a frame of kind {} on receive lane {}: lanes carry short messages only",
                          static_cast<int>(header.kind), lane));
        } else if (error.ok() && wire::LaneOf(Gid::FromRaw(header.destination)) != lane) {
          error = InvalidArgument(fmt::format("a frame for another receive lane on lane {}", lane));
        }
        if (error.ok()) {
          ++delivered;
          // Not assigned to `error` unless it is one: an assignment per
          // frame shows in a stream's profile.
          if (Status status = sink_.OnMessage(sender, buffers::SlotRef(slot)); !status.ok()) {
            error = std::move(status);
          }
        } else {
          pool_.Unref(slot);
        }
      }
      if (!error.ok()) {
        // The poller closes the channel (it owns the channel's state).
        Log().warn("tocl shm: a bad frame from {} on receive lane {}: {}", sender.ToString(), lane,
                   error.message());
        channel_lanes.broken.store(true, std::memory_order_release);
        reactor_.Wake();
        ++head;
        break;
      }
    }
    channel_lanes.stall[lane].store(stall, std::memory_order_relaxed);
    if (head != first) {
      channel_lanes.head[lane].store(head, std::memory_order_relaxed);
      ring.head.value.store(head, std::memory_order_release);
    }
    return delivered;
  }

  // The lanes of channel `i` where a frame waits (bit k: lane k): a look at
  // their next entries only, the sender's cache lines a drain reads anyway.
  uint32_t LanesWithArrivals(uint32_t i) const {
    const Channel& channel = mapping_.channel(i);
    const ChannelLanes& channel_lanes = lanes_[i];
    uint32_t waiting = 0;
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      const uint32_t head = channel_lanes.head[lane].load(std::memory_order_relaxed);
      const auto& ring = channel.lanes[lane];
      if (ring.entries[head % ring.kSize].seq.load(std::memory_order_relaxed) == head + 1) {
        waiting |= 1u << lane;
      }
    }
    return waiting;
  }

  // Drains lane `lane` of every channel unless another thread does.
  int DrainLaneIfFree(uint32_t lane) {
    if (closing_.load(std::memory_order_acquire) || !sink_.TryEnterLane(lane)) return 0;
    int delivered = 0;
    if (!closing_.load(std::memory_order_acquire)) {
      for (uint64_t channels = lane_channels_.load(std::memory_order_acquire); channels != 0;
           channels &= channels - 1) {
        delivered += DrainLane(static_cast<uint32_t>(std::countr_zero(channels)), lane);
      }
    }
    sink_.LeaveLane(lane);
    return delivered;
  }

  // Channel `i`'s lanes stop being drained (no holder of a lane is inside
  // them once this returns) and are empty for its next sender. Undrained
  // frames are dropped with the channel.
  void ReleaseLanes(uint32_t i) {
    ChannelLanes& channel_lanes = lanes_[i];
    lane_channels_.fetch_and(~(uint64_t{1} << i), std::memory_order_seq_cst);
    channel_lanes.sender.store(0, std::memory_order_seq_cst);
    Channel& channel = mapping_.channel(i);
    for (uint32_t lane = 0; lane < wire::kReceiveLanes; ++lane) {
      sink_.EnterLane(lane);
      auto& ring = channel.lanes[lane];
      ring.head.value.store(0, std::memory_order_relaxed);
      ring.tail.value.store(0, std::memory_order_relaxed);
      for (auto& entry : ring.entries) entry.seq.store(0, std::memory_order_relaxed);
      channel_lanes.head[lane].store(0, std::memory_order_relaxed);
      channel_lanes.stall[lane].store(Stall::kNone, std::memory_order_relaxed);
      sink_.LeaveLane(lane);
    }
    channel_lanes.broken.store(false, std::memory_order_relaxed);
  }

  void TopUp(Inbound& in) {
    Channel& channel = mapping_.channel(in.index);
    bool provided_any = false;
    bool starved = false;
    for (uint32_t c = 0; c < options_.num_classes; ++c) {
      const uint32_t depth = ProvideDepth(c);
      if (in.provided[c] >= depth / 2 && in.provided[c] != 0) continue;
      auto& ring = channel.provides[c];
      uint32_t tail = ring.tail.value.load(std::memory_order_relaxed);
      detail::BufferSlot* batch[64];
      // Fewer than asked: the pool is at its cap; senders wait, nothing is lost.
      const size_t got = pool_.TryGetMany(c, std::min<size_t>(depth - in.provided[c], 64), batch);
      for (size_t i = 0; i < got; ++i) {
        detail::BufferSlot* slot = batch[i];
        if (slot->index >= owner_.size()) owner_.resize(slot->index + 1024, 0);
        owner_[slot->index] = static_cast<uint16_t>(in.index + 1);
        ring.entries[tail % ring.kSize] = Descriptor{slot->index, 0, slot->offset};
        ++tail;
      }
      if (got > 0) {
        in.provided[c] += static_cast<uint32_t>(got);
        pool_.CountProvided(c, static_cast<int64_t>(got));
        provided_any = true;
      }
      ring.tail.value.store(tail, std::memory_order_seq_cst);
      starved = starved || in.provided[c] == 0;
    }
    // The pool is at its cap: try again on later polls, as the application
    // releases buffers (nothing arrives on this channel to trigger it).
    if (starved && std::find(topup_.begin(), topup_.end(), in.index) == topup_.end()) {
      topup_.push_back(in.index);
    }
    if (provided_any && channel.sender_waiting.load(std::memory_order_seq_cst) != 0 &&
        channel.sender_waiting.exchange(0) != 0) {
      RingBell(in.sender_bell);
    }
  }

  void TopUpAll() {
    // TopUp puts back what it still cannot fill; swapping keeps both
    // vectors' capacity (no allocation per poll while starved).
    topping_up_.swap(topup_);
    for (auto& in : inbound_) {
      if (in.index != kNone &&
          std::find(topping_up_.begin(), topping_up_.end(), in.index) != topping_up_.end()) {
        TopUp(in);
      }
    }
    topping_up_.clear();
  }

  void ProtocolError(Inbound& in, std::string_view reason) {
    Log().warn("tocl shm: closing the channel from {}: {}", in.sender.ToString(), reason);
    mapping_.channel(in.index).state.store(static_cast<uint32_t>(ChannelState::kClosed),
                                           std::memory_order_release);
    // The channel stays closed (its sender sees that); only the buffers come back.
    Release(in, /*free_channel=*/false);
  }

  // Takes back every buffer still provided to the channel and frees it for
  // the next sender.
  void Release(Inbound& in, bool free_channel) {
    for (uint32_t i = 0; i < owner_.size(); ++i) {
      if (owner_[i] != in.index + 1) continue;
      owner_[i] = 0;
      detail::BufferSlot* slot = pool_.SlotAt(i);
      pool_.CountProvided(slot->class_index, -1);
      pool_.Unref(slot);
    }
    Channel& channel = mapping_.channel(in.index);
    channel.arrivals.head.value.store(0, std::memory_order_relaxed);
    channel.arrivals.tail.value.store(0, std::memory_order_relaxed);
    // The next sender starts at seq 1 again: no old entry may look published.
    for (auto& entry : channel.arrivals.entries) entry.seq.store(0, std::memory_order_relaxed);
    for (auto& ring : channel.provides) {
      ring.head.value.store(0, std::memory_order_relaxed);
      ring.tail.value.store(0, std::memory_order_relaxed);
    }
    channel.sender_waiting.store(0, std::memory_order_relaxed);
    ReleaseLanes(in.index);
    if (in.sender_bell >= 0) close(in.sender_bell);
    if (free_channel && !closed_) {
      channel.state.store(static_cast<uint32_t>(ChannelState::kFree), std::memory_order_release);
    }
    in = Inbound{};
  }

  const ShmOptions options_;
  Reactor& reactor_;
  Sink& sink_;
  const std::string path_;
  Mapping mapping_;
  int bell_fd_;
  SegmentSlabMemory slab_memory_;
  buffers::BufferPool pool_;
  const wire::Limits limits_;
  const uint64_t self_start_;

  // WakeSleeper (any thread) came since the last SleepAlone ended.
  std::atomic<bool> wake_pending_{false};

  // The receive lanes of each channel, as we drained them. A lane's `head`
  // and `stall` are written by the holder of that lane only (the poller
  // reads them as hints before it sleeps).
  struct alignas(64) ChannelLanes {
    // The sender's Gid once adopted (release), 0 before and after.
    std::atomic<uint64_t> sender{0};
    // A lane drain found a bad frame: the poller closes the channel.
    std::atomic<bool> broken{false};
    // Per lane: our copy of the lane ring's head, and why a drain stopped.
    // Together, so that the poller's look at every lane reads one line.
    std::atomic<uint32_t> head[wire::kReceiveLanes] = {};
    std::atomic<Stall> stall[wire::kReceiveLanes] = {};
  };
  static_assert(kMaxChannels <= 64, "lane_channels_ is a bit set");
  std::array<ChannelLanes, kMaxChannels> lanes_;  // by channel index
  std::atomic<uint64_t> lane_channels_{0};        // bit i: channel i's lanes are drained
  std::atomic<bool> closing_{false};

  // Poller-only state.
  uint32_t seen_attach_seq_ = 0;
  std::vector<Inbound> inbound_;
  std::vector<uint16_t> owner_;       // slot index -> channel index + 1 it is provided to
  std::vector<uint32_t> topup_;       // channels left short (congested, or the pool at its cap)
  std::vector<uint32_t> topping_up_;  // TopUpAll's copy of topup_
  bool closed_ = false;
};

}  // namespace

int RemoveStaleSegments(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    int pid = 0;
    unsigned long long start = 0;
    unsigned instance = 0;
    char suffix[8] = {};
    if (std::sscanf(entry->d_name, "tocl.%d.%llu.%u.%4s", &pid, &start, &instance, suffix) != 4) {
      continue;
    }
    if (std::strcmp(suffix, "seg") != 0) continue;
    if (ProcessAlive(pid, start)) continue;
    if (unlinkat(dirfd(dir), entry->d_name, 0) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

Result<std::unique_ptr<Subsystem>> OpenShm(const ShmOptions& options, Reactor& reactor, Sink& sink,
                                           buffers::PoolBudget& budget) {
  if (options.num_classes == 0 || options.num_classes > buffers::kMaxClasses) {
    return InvalidArgument("bad number of shm size classes");
  }
  int removed = RemoveStaleSegments(options.directory);
  if (removed > 0) Log().info("tocl shm: removed {} stale segment files", removed);
  const uint64_t start = ProcessStart(getpid());
  // A process may run several runtimes (several enrollments): each has its own.
  static std::atomic<unsigned> instances{0};
  const std::string base =
      fmt::format("{}/tocl.{}.{}.{}", options.directory, getpid(), start, instances.fetch_add(1));
  const std::string path = base + ".seg";
  const size_t data_bytes = (budget.cap() + 4095) / 4096 * 4096;
  int bell = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (bell < 0) return Errno("socket for the bell of", path);
  socklen_t length;
  sockaddr_un address = BellAddress(path, length);
  if (bind(bell, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    Status status = Errno("bind the bell of", path);
    close(bell);
    return status;
  }
  auto mapping = Mapping::Open(path, true, SegmentLayout::kDataOffset + data_bytes);
  if (!mapping.ok()) {
    close(bell);
    return mapping.status();
  }
  SegmentHeader& header = mapping->header();
  new (&header) SegmentHeader();
  // The channels are all zero in a new file: kFree with empty rings.
  header.version = kSegmentVersion;
  header.num_classes = options.num_classes;
  header.owner_process = options.self_process.raw();
  header.owner_pid = getpid();
  header.owner_start = start;
  header.data_offset = SegmentLayout::kDataOffset;
  header.data_bytes = data_bytes;
  // Peers find the segment through the directory, after this returns.
  header.magic = kSegmentMagic;
  auto subsystem = std::make_unique<ShmSubsystemImpl>(options, reactor, sink, budget, path,
                                                      std::move(*mapping), bell);
  subsystem->Start();
  return std::unique_ptr<Subsystem>(std::move(subsystem));
}

}  // namespace tocl::subsystem::shm
