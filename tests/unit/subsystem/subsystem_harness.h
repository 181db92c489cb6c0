// What a subsystem test needs besides the subsystem: a polling loop over
// several "sides" (one process's reactor + subsystem each) driven by the
// test thread or a background thread, frames whose payload checksum rides
// in the tag, a capture of spdlog output, and raw client sockets.
//
// Adapted from tcp_subsystem_test.cc's harness, made independent of the
// subsystem: a side only has to say how to run one round of its poller.
#pragma once

#include <fmt/format.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "buffers/buffer_pool.h"
#include "buffers/buffer_slot.h"
#include "buffers/size_class.h"
#include "collecting_sink.h"
#include "core/logger.h"
#include "core/posix.h"
#include "subsystem/subsystem.h"
#include "subsystem/tcp/socket.h"
#include "wire/frame.h"

namespace tocl::subsystem::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One process's polling thread, as far as the test drives it.
class Polled {
 public:
  virtual ~Polled() = default;
  // One round of the polling thread; true when something happened.
  virtual bool PumpOnce() = 0;
};

using Sides = std::vector<Polled*>;

inline void Pump(const Sides& sides) {
  bool busy = false;
  for (Polled* side : sides) busy = side->PumpOnce() || busy;
  if (!busy) std::this_thread::sleep_for(50us);
}

inline bool PumpUntil(const Sides& sides, const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    Pump(sides);
  }
  return true;
}

// Pumps `sides` for `rounds` rounds (to show that nothing more happens).
inline void PumpRounds(const Sides& sides, int rounds) {
  for (int i = 0; i < rounds; ++i) Pump(sides);
}

// The polling thread of `sides`, for tests that post from other threads.
class PumpThread {
 public:
  explicit PumpThread(Sides sides)
      : sides_(std::move(sides)), thread_([this] {
          while (!stop_.load()) Pump(sides_);
        }) {}
  ~PumpThread() {
    stop_.store(true);
    thread_.join();
  }
  PumpThread(const PumpThread&) = delete;
  PumpThread& operator=(const PumpThread&) = delete;

 private:
  const Sides sides_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the rest is built
};

// Waits (without pumping: another thread does) until `done`, or false at the timeout.
inline bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

// Posts, pumping `sides` while the route says TryAgain.
inline Status PostPumping(Route& route, detail::BufferSlot* slot, const Sides& sides,
                          std::chrono::milliseconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Status status = route.Post(slot);
    if (status.code() != StatusCode::kTryAgain || Clock::now() > deadline) return status;
    Pump(sides);
  }
}

// Posts while the route says TryAgain, until `timeout`, for a test whose
// PumpThread makes the room.
inline Status PostRetrying(Route& route, detail::BufferSlot* slot,
                           std::chrono::milliseconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  Status status;
  while ((status = route.Post(slot)).code() == StatusCode::kTryAgain && Clock::now() < deadline) {
    std::this_thread::sleep_for(20us);
  }
  return status;
}

inline void FillPayload(std::byte* payload, size_t length, uint64_t seq) {
  for (size_t i = 0; i < length; ++i) {
    payload[i] = static_cast<std::byte>((seq * 7 + i * 13 + (i >> 8)) & 0xff);
  }
}

// A message frame from thread 1..3 of `from` to thread 1 of `to`, its
// checksum in the tag, in a buffer of `pool` (refs = 1) of the payload's class.
inline detail::BufferSlot* NewFrame(buffers::BufferPool& pool, Gid from, Gid to, uint64_t seq,
                                    size_t payload) {
  detail::BufferSlot* slot = pool.TryGet(buffers::ClassFor(payload));
  REQUIRE(slot != nullptr);
  wire::Header& header = slot->header();
  header = wire::Header{};
  header.kind = wire::FrameKind::kMessage;
  header.source = Gid::Thread(from, 1 + static_cast<uint32_t>(seq % 3)).raw();
  header.destination = Gid::Thread(to, 1).raw();
  header.seq = seq;
  header.length = static_cast<uint32_t>(payload);
  header.total = payload;
  FillPayload(slot->payload(), payload, seq);
  header.tag = Checksum({slot->payload(), payload});
  return slot;
}

inline uint64_t PoolInUse(const buffers::BufferPool& pool) {
  uint64_t in_use = 0;
  for (const auto& stats : pool.Stats()) in_use += stats.in_use;
  return in_use;
}

// Captures spdlog output at `level` and above while alive (lines from
// every thread: the connection manager logs too).
class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::warn)
      : sink_(std::make_shared<LineSink>()) {
    sink_->set_pattern("%v");
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(level);
    previous_ = ReplaceLog(std::move(logger));
  }
  ~LogCapture() { ReplaceLog(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> Lines() { return sink_->Lines(); }
  // Whether some line contains `text`.
  bool Contains(std::string_view text) {
    for (const std::string& line : Lines()) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  void Clear() { sink_->Clear(); }

 private:
  class LineSink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::vector<std::string> Lines() {
      std::lock_guard lock(mutex_);
      return lines_;
    }
    void Clear() {
      std::lock_guard lock(mutex_);
      lines_.clear();
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {  // under mutex_
      spdlog::memory_buf_t formatted;
      formatter_->format(msg, formatted);
      std::string line = fmt::to_string(formatted);
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      lines_.push_back(std::move(line));
    }
    void flush_() override {}

   private:
    std::vector<std::string> lines_;  // guarded by mutex_
  };

  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<LineSink> sink_;
};

// Destroys the tcp sockets matching `filter` (an `ss` filter) with `ss -K`;
// false when this kernel cannot (no CONFIG_INET_DIAG_DESTROY) or `ss` is
// missing.
inline bool KillSockets(const std::string& filter) {
  const std::string command = "ss -K '" + filter + "' >/dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

// A blocking client socket connected to `address` ("IP:PORT").
inline Fd RawConnect(const std::string& address) {
  auto parsed = tcp::SocketAddress::Parse(address);
  REQUIRE(parsed.ok());
  Fd fd(socket(parsed->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  REQUIRE(connect(fd.get(), parsed->get(), parsed->length()) == 0);
  return fd;
}

inline void RawWrite(const Fd& fd, std::span<const std::byte> bytes) {
  REQUIRE(send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

// Reads exactly `count` bytes within `timeout`, pumping `sides` meanwhile;
// fewer when the peer closes first.
inline std::vector<std::byte> RawRead(const Fd& fd, size_t count, const Sides& sides,
                                      std::chrono::milliseconds timeout = 5s) {
  std::vector<std::byte> bytes;
  const auto deadline = Clock::now() + timeout;
  while (bytes.size() < count && Clock::now() < deadline) {
    Pump(sides);
    pollfd entry{fd.get(), POLLIN, 0};
    if (poll(&entry, 1, 1) != 1) continue;
    std::byte chunk[256];
    const ssize_t n =
        recv(fd.get(), chunk, std::min(sizeof(chunk), count - bytes.size()), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    if (n > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  }
  return bytes;
}

// Whether the other end closed `fd` (EOF or reset), pumping `sides` meanwhile.
// Bytes that arrive first are skipped.
inline bool ClosedByPeer(const Fd& fd, const Sides& sides, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    Pump(sides);
    pollfd entry{fd.get(), POLLIN, 0};
    if (poll(&entry, 1, 1) == 1) {
      std::byte scratch[256];
      const ssize_t n = recv(fd.get(), scratch, sizeof(scratch), MSG_DONTWAIT);
      if (n > 0) continue;
      return n == 0 || (n < 0 && errno == ECONNRESET);
    }
  }
  return false;
}

}  // namespace tocl::subsystem::testing
