// tocl-msg-worker: a tocl process that sends and receives messages, for the
// messaging integration tests.
//
//   tocl-msg-worker --daemon unix:/tmp/x/toclsd.sock --role echo --threads 2 --name e1
//   tocl-msg-worker --daemon ... --role ping --peer-name e1 --peer-threads 2 --count 1000
//   tocl-msg-worker --daemon ... --role stream --threads 64 --peer-name b --peer-threads 64
//                   --count 500000 --linger
//   tocl-msg-worker --daemon ... --role source --to h1.p3.t1 --count 20000 [--track]
//   tocl-msg-worker --daemon ... --role sink --threads 1
//   tocl-msg-worker --daemon ... --role stamp --to h1.p3.t1 --count 1
//   tocl-msg-worker --daemon ... --role source --to h1.p3.t1 --count 200 --pause-before 1
//                   --kill-self
//
// Starts a tocl::Runtime, enrolls --threads threads, and prints on stdout
//   process h1.p5
//   thread h1.p5.t1          one line per enrolled thread
//   ready
// then plays its role, printing "progress sent=N received=M" lines while it
// runs and one "done ..." line at the end, then (--linger) waits for stdin
// to close before it shuts down. Roles:
//   echo    every thread sends each message it receives back to its source,
//           unchanged (the received buffer itself), until stdin closes.
//   ping    thread i sends --count/threads pings to peer thread i % peers and
//           checks each echoed reply byte for byte.
//   stream  every thread sends its share of --count messages (sizes up to
//           --size) to random peer threads, then an end marker to each peer
//           thread; every thread receives and checks everything the peer's
//           threads send it: checksums, exactly once, per-pair order.
//   source  every thread sends its share of --count messages (0: until stdin
//           closes) to the --to threads (or the peer's) in turn (with
//           --pairwise: thread i to peer i % peers only); with --track it
//           sends through a ring of lvalue buffers and watches their state,
//           stopping at the first kFailed or Send error; with --copy it
//           sends from its own memory (Send of a span: over shm, short
//           messages take the receiving thread's lane).
//   sink    every thread receives and checks per-source order until stdin
//           closes (or --count messages arrived).
//   stamp   every thread sends its share of --count messages to the --to
//           threads (or the peer's) in turn, each carrying the steady clock
//           (ns, CLOCK_MONOTONIC: the same for every process of the host)
//           read just before its Send in its first 8 bytes (--size bytes in
//           all), and prints "sent t=NS" when the Send returned: the
//           receiver measures how long the message took.
//   idle    does nothing until stdin closes.
//   destroy-in-handler
//           registers a message handler on its first thread that destroys
//           the Runtime, sends that thread a message, prints "sent", and
//           waits for stdin to close: the library is expected to abort
//           the process (tocl/handler.h), not to hang.
//   packed  every thread sends its share of --count packed messages
//           (tocl/packed_message.h) to the --to threads (or the peer's) in
//           turn: a header of 16 u64 values (PackedHeaderValue) and a body of
//           --packed-body bytes (PackedBodyByte), packed by reference when
//           it is that long (PackedOptions' default threshold), then End.
//           With --kill-on-stdin-close the process SIGKILLs itself when stdin
//           closes, whatever it is doing (a body in flight).
//   packed-read
//           the first thread receives one packed message of --tag (from
//           anyone) and unpacks the 16 u64 values of its header ("header
//           in_use=N": the pool buffers in use, the header's among them);
//           then receives a plain message of tag --tag + 1 from the same
//           sender (the go: sent after the rest of the packed message, so
//           the pair order has delivered that by then), prints what the
//           next piece is ("next length=N by_reference=0|1"), unpacks it
//           as a byte range and prints "body ok bytes=N" or "body error
//           <status>"; then, the reader dropped, "left receivable=N
//           in_use=M": whether a receive of any tag still finds a message,
//           and the pool buffers still in use (a message queued holds one).
// --pause-before N (source, stamp): before message N (0: the first), wait
// for stdin to close (the test's go: with N > 0, the route is up by then).
// --kill-self: SIGKILL itself as soon as the role is done (every Send
// returned), before the runtime could flush or say goodbye.
// Before the runtime shuts down, "stopping t=NS" gives the steady clock.
// Peers are named threads of another process: --peer-name finds the running
// process of that name in the directory and waits until it has
// --peer-threads threads; --to lists thread gids directly.
//
// echo, sink, idle and source with --count 0 run until stdin closes: spawn
// them with a stdin pipe.
//
// Exit codes: 0 success, 1 a check failed or an unexpected error (lines
// starting "error " say what), 2 usage, 3 a send failed (source: the
// "failed" line says how), 4 the runtime did not start ("start-failed").
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "messaging_payload.h"
#include "stdin_watch.h"
#include "tocl/directory_client.h"
#include "tocl/runtime.h"

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using tocl::Gid;
using tocl::StatusCode;
using tocl::testing::CheckPayload;
using tocl::testing::FillPayload;
using tocl::testing::kPayloadHeaderBytes;
using tocl::testing::PayloadKind;
using tocl::testing::ReadPayloadHeader;
using tocl::testing::StdinWatch;

struct Options {
  std::string daemon;
  std::string subsystems;
  std::string name = "msg-worker";
  std::string role = "echo";
  uint32_t threads = 1;
  std::string peer_name;
  uint32_t peer_threads = 1;
  std::vector<std::string> to;
  uint64_t count = 0;
  size_t size = 64;
  bool random_size = false;
  uint32_t tag = 1;
  size_t unexpected_cap = 0;    // 0: the runtime's default
  size_t send_queue_depth = 0;  // 0: the runtime's default
  size_t pool_cap = 0;          // 0: the runtime's default
  uint32_t duration_ms = 0;     // spread the sends over at least this long
  uint32_t recv_timeout_ms = 30000;
  bool track = false;
  bool copy = false;      // source: Send from a span, not from a pool buffer
  bool pairwise = false;  // source: thread i sends to peer i % peers only
  bool linger = false;
  int64_t pause_before = -1;  // source, stamp: before this message, wait for stdin to close
  bool kill_self = false;
  size_t packed_body = 4 << 20;      // packed: body bytes
  bool kill_on_stdin_close = false;  // SIGKILL as soon as stdin closes
};

// --- output ----------------------------------------------------------------

std::mutex g_print_mutex;

void Say(const std::string& line) {
  std::lock_guard lock(g_print_mutex);
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

void Complain(const std::string& line) {
  std::lock_guard lock(g_print_mutex);
  fmt::print(stderr, "tocl-msg-worker: {}\n", line);
  std::fflush(stderr);
}

// The steady clock in ns (CLOCK_MONOTONIC: one clock for every process of the host).
int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             steady_clock::now().time_since_epoch())
      .count();
}

std::string CodeName(StatusCode code) {
  std::string name(tocl::StatusCodeName(code));
  std::replace(name.begin(), name.end(), ' ', '_');
  return name;
}

// --- the worker --------------------------------------------------------------

class Worker {
 public:
  explicit Worker(Options options) : options_(std::move(options)) {}

  int Run();

 private:
  tocl::Status FindPeers();
  uint64_t ShareOf(size_t thread_index) const {
    uint64_t share = options_.count / options_.threads;
    if (thread_index < options_.count % options_.threads) ++share;
    return share;
  }
  size_t PayloadSize(std::mt19937_64& random) const {
    if (!options_.random_size) return options_.size;
    std::uniform_int_distribution<size_t> size(kPayloadHeaderBytes, options_.size);
    return size(random);
  }
  void Error(const std::string& what) {
    errors_++;
    Complain("error " + what);
    std::lock_guard lock(error_mutex_);
    if (first_error_.empty()) first_error_ = what;
  }
  // Sends a payload of `size` bytes through a pool buffer (by rvalue).
  tocl::Status SendPayload(Gid from, Gid to, uint64_t seq, size_t size, PayloadKind kind);
  // Waits (pacing) until message `index` of `total` is due.
  void Pace(steady_clock::time_point start, uint64_t index, uint64_t total) const;

  void Echo(Gid self);
  void Ping(size_t index);
  void StreamSend(size_t index);
  void StreamReceive(size_t index);
  void Source(size_t index);
  void Sink(size_t index);
  void Stamp(size_t index);
  void DestroyInHandler();
  void Packed(size_t index);
  void PackedRead();
  // Waits for stdin to close before message `i` (0-based) if --pause-before says so.
  void PauseBefore(uint64_t i) {
    if (options_.pause_before >= 0 && i == static_cast<uint64_t>(options_.pause_before)) {
      stdin_.Wait();
    }
  }

  void ReportProgress(std::stop_token stop);

  Options options_;
  StdinWatch stdin_;
  std::unique_ptr<tocl::Runtime> runtime_;
  std::vector<Gid> threads_;
  std::vector<Gid> peers_;
  std::atomic<uint64_t> sent_{0};      // messages sent (pings, stream and end markers)
  std::atomic<uint64_t> received_{0};  // messages received and checked
  std::atomic<uint64_t> send_failures_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> rtt_ns_{0};
  std::mutex error_mutex_;
  std::string first_error_;  // guarded by error_mutex_
  std::mutex failed_mutex_;
  std::string failed_;  // source: the first send failure; guarded by failed_mutex_
};

tocl::Status Worker::SendPayload(Gid from, Gid to, uint64_t seq, size_t size, PayloadKind kind) {
  TOCL_ASSIGN_OR_RETURN(tocl::Buffer buffer, runtime_->GetBuffer(size));
  if (!buffer.resize(size)) {
    return tocl::Internal(
        fmt::format("GetBuffer({}) gave a buffer of capacity {}", size, buffer.capacity()));
  }
  FillPayload(buffer.span(), from, to, seq, kind);
  return runtime_->Send(from, to, options_.tag, std::move(buffer));
}

void Worker::Pace(steady_clock::time_point start, uint64_t index, uint64_t total) const {
  if (options_.duration_ms == 0 || total == 0) return;
  auto due = start + milliseconds(options_.duration_ms) * index / total;
  std::this_thread::sleep_until(due);
}

tocl::Status Worker::FindPeers() {
  for (const std::string& text : options_.to) {
    TOCL_ASSIGN_OR_RETURN(Gid gid, Gid::Parse(text));
    peers_.push_back(gid);
  }
  if (options_.peer_name.empty()) return tocl::Status::Ok();

  TOCL_ASSIGN_OR_RETURN(auto client, tocl::DirectoryClient::Connect(options_.daemon));
  const auto deadline = steady_clock::now() + seconds(60);
  tocl::Status last = tocl::NotFound("no attempt yet");
  while (steady_clock::now() < deadline) {
    auto processes = client->QueryAll(
        fmt::format("kind=process and state=running and name=\"{}\"", options_.peer_name));
    if (processes.ok() && processes->size() == 1) {
      Gid process = processes->front().gid;
      auto threads = client->QueryAll(
          fmt::format("kind=thread and state=running and process={}", process.ToString()));
      if (threads.ok() && threads->size() >= options_.peer_threads) {
        for (const tocl::Entity& thread : *threads) peers_.push_back(thread.gid);
        return tocl::Status::Ok();
      }
      last = threads.ok()
                 ? tocl::NotFound(fmt::format("{} has {} of {} threads", process.ToString(),
                                              threads->size(), options_.peer_threads))
                 : threads.status();
    } else {
      last = processes.ok() ? tocl::NotFound(fmt::format("{} running processes named {}",
                                                         processes->size(), options_.peer_name))
                            : processes.status();
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return last.WithContext("find peer " + options_.peer_name);
}

// --- roles --------------------------------------------------------------------

void Worker::Echo(Gid self) {
  while (!stdin_.closed()) {
    auto message = runtime_->RecvFor(self, milliseconds(50));
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kDeadlineExceeded) continue;
      Error(fmt::format("{}: RecvFor: {}", self.ToString(), message.status().ToString()));
      return;
    }
    received_++;
    const Gid source = message->source();
    const tocl::Tag tag = message->tag();
    // The received buffer itself goes back: no copy.
    tocl::Status sent = runtime_->Send(self, source, tag, std::move(*message));
    if (sent.ok()) {
      sent_++;
    } else {
      send_failures_++;
      Complain(fmt::format("echo from {} to {}: {}", self.ToString(), source.ToString(),
                           sent.ToString()));
    }
  }
}

void Worker::Ping(size_t index) {
  const Gid self = threads_[index];
  const Gid peer = peers_[index % peers_.size()];
  std::mt19937_64 random(self.raw());
  const uint64_t count = ShareOf(index);
  std::vector<std::byte> expected;
  for (uint64_t seq = 0; seq < count; ++seq) {
    expected.assign(PayloadSize(random), std::byte{0});
    FillPayload(expected, self, peer, seq);
    const auto start = steady_clock::now();
    tocl::Status sent = runtime_->Send(self, peer, options_.tag, std::span(expected));
    if (!sent.ok()) {
      Error(fmt::format("ping {} from {} to {}: {}", seq, self.ToString(), peer.ToString(),
                        sent.ToString()));
      return;
    }
    sent_++;
    auto reply =
        runtime_->RecvFor(self, milliseconds(options_.recv_timeout_ms), peer, options_.tag);
    if (!reply.ok()) {
      Error(fmt::format("reply {} from {} to {}: {}", seq, peer.ToString(), self.ToString(),
                        reply.status().ToString()));
      return;
    }
    rtt_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(steady_clock::now() - start).count());
    if (reply->source() != peer || reply->tag() != options_.tag ||
        reply->size() != expected.size() ||
        std::memcmp(reply->data(), expected.data(), expected.size()) != 0) {
      Error(fmt::format("reply {} to {}: from {} tag {} size {} (sent {}), contents {}", seq,
                        self.ToString(), reply->source().ToString(), reply->tag(), reply->size(),
                        expected.size(),
                        reply->size() == expected.size() &&
                                std::memcmp(reply->data(), expected.data(), expected.size()) == 0
                            ? "equal"
                            : "differ"));
      return;
    }
    received_++;
  }
}

void Worker::StreamSend(size_t index) {
  const Gid self = threads_[index];
  std::mt19937_64 random(self.raw() * 31 + 7);
  std::uniform_int_distribution<size_t> pick(0, peers_.size() - 1);
  std::vector<uint64_t> next_seq(peers_.size(), 0);
  const uint64_t count = ShareOf(index);
  const auto start = steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    Pace(start, i, count);
    const size_t peer = pick(random);
    tocl::Status sent =
        SendPayload(self, peers_[peer], next_seq[peer], PayloadSize(random), PayloadKind::kData);
    if (!sent.ok()) {
      Error(fmt::format("send {} of {} from {} to {}: {}", i, count, self.ToString(),
                        peers_[peer].ToString(), sent.ToString()));
      return;
    }
    next_seq[peer]++;
    sent_++;
  }
  for (size_t peer = 0; peer < peers_.size(); ++peer) {
    tocl::Status sent =
        SendPayload(self, peers_[peer], next_seq[peer], kPayloadHeaderBytes, PayloadKind::kEnd);
    if (!sent.ok()) {
      Error(fmt::format("end marker from {} to {}: {}", self.ToString(), peers_[peer].ToString(),
                        sent.ToString()));
      return;
    }
  }
}

void Worker::StreamReceive(size_t index) {
  const Gid self = threads_[index];
  std::map<Gid, uint64_t> next_seq;  // per source: the next data message expected
  for (Gid peer : peers_) next_seq[peer] = 0;
  size_t ended = 0;
  while (ended < peers_.size()) {
    auto message = runtime_->RecvFor(self, milliseconds(options_.recv_timeout_ms));
    if (!message.ok()) {
      Error(fmt::format("{} waiting for the stream ({} of {} peers ended, {} received): {}",
                        self.ToString(), ended, peers_.size(), received_.load(),
                        message.status().ToString()));
      return;
    }
    const Gid source = message->source();
    auto expected = next_seq.find(source);
    if (expected == next_seq.end()) {
      Error(
          fmt::format("{} got a message from {}, not a peer", self.ToString(), source.ToString()));
      return;
    }
    if (message->tag() != options_.tag) {
      Error(
          fmt::format("{} got tag {} from {}", self.ToString(), message->tag(), source.ToString()));
      return;
    }
    if (std::string problem = CheckPayload(message->span(), source, self); !problem.empty()) {
      Error(fmt::format("{}: {}", self.ToString(), problem));
      return;
    }
    const auto header = ReadPayloadHeader(message->span());
    if (header.seq != expected->second) {
      Error(fmt::format("{} from {}: message {} where {} was due ({})", self.ToString(),
                        source.ToString(), header.seq, expected->second,
                        header.seq < expected->second ? "duplicate or reordered" : "lost"));
      return;
    }
    if (header.kind == static_cast<uint32_t>(PayloadKind::kEnd)) {
      // No more from this source: anything later would not match the map.
      next_seq.erase(expected);
      ++ended;
    } else {
      expected->second++;
      received_++;
    }
  }
}

void Worker::Source(size_t index) {
  const Gid self = threads_[index];
  const uint64_t count = ShareOf(index);
  std::mt19937_64 random(self.raw());
  std::vector<uint64_t> next_seq(peers_.size(), 0);
  std::vector<std::byte> payload;  // --copy
  constexpr size_t kRing = 32;
  std::vector<tocl::Buffer> ring(options_.track ? kRing : 0);
  auto fail = [&](uint64_t i, const std::string& how) {
    std::lock_guard lock(failed_mutex_);
    if (failed_.empty()) failed_ = fmt::format("after={} {}", i, how);
  };
  const auto start = steady_clock::now();
  for (uint64_t i = 0; count == 0 || i < count; ++i) {
    PauseBefore(i);
    if (count == 0 && stdin_.closed()) break;
    {
      std::lock_guard lock(failed_mutex_);
      if (!failed_.empty()) return;
    }
    Pace(start, i, count);
    const size_t peer = (options_.pairwise ? index : i) % peers_.size();
    const Gid to = peers_[peer];
    const size_t size = PayloadSize(random);
    tocl::Status sent;
    if (options_.copy) {
      payload.resize(size);
      FillPayload(payload, self, to, next_seq[peer]);
      sent = runtime_->Send(self, to, options_.tag, std::span<const std::byte>(payload));
    } else if (!options_.track) {
      sent = SendPayload(self, to, next_seq[peer], size, PayloadKind::kData);
    } else {
      tocl::Buffer& buffer = ring[i % kRing];
      if (!buffer.valid()) {
        auto fresh = runtime_->GetBuffer(size);
        if (!fresh.ok()) {
          fail(i, fmt::format("code={} get-buffer: {}", CodeName(fresh.status().code()),
                              fresh.status().ToString()));
          return;
        }
        buffer = std::move(*fresh);
      }
      // The handle may be written again once the library is done with it.
      const auto deadline = steady_clock::now() + seconds(120);
      while (buffer.state() == tocl::BufferState::kQueued ||
             buffer.state() == tocl::BufferState::kInFlight) {
        if (steady_clock::now() > deadline) {
          Error(fmt::format("buffer of message {} still {} after 120 s", i,
                            tocl::BufferStateName(buffer.state())));
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (buffer.state() == tocl::BufferState::kFailed) {
        fail(i, "state=failed (an earlier message of this buffer was not delivered)");
        return;
      }
      if (!buffer.resize(size)) {
        Error(fmt::format("resize to {} (capacity {})", size, buffer.capacity()));
        return;
      }
      FillPayload(buffer.span(), self, to, next_seq[peer]);
      sent = runtime_->Send(self, to, options_.tag, buffer);
    }
    if (!sent.ok()) {
      fail(i, fmt::format("code={} send: {}", CodeName(sent.code()), sent.ToString()));
      return;
    }
    next_seq[peer]++;
    sent_++;
  }
  // Tracking: every buffer still out must end sent, or the failure is reported.
  for (tocl::Buffer& buffer : ring) {
    const auto deadline = steady_clock::now() + seconds(120);
    while (buffer.valid() && (buffer.state() == tocl::BufferState::kQueued ||
                              buffer.state() == tocl::BufferState::kInFlight)) {
      if (steady_clock::now() > deadline) {
        Error(fmt::format("a buffer is still {} 120 s after the last send",
                          tocl::BufferStateName(buffer.state())));
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (buffer.valid() && buffer.state() == tocl::BufferState::kFailed) {
      fail(count, "state=failed (after the last send)");
      return;
    }
  }
}

void Worker::Sink(size_t index) {
  const Gid self = threads_[index];
  std::map<Gid, uint64_t> next_seq;
  while (!stdin_.closed() && (options_.count == 0 || received_.load() < options_.count)) {
    auto message = runtime_->RecvFor(self, milliseconds(50));
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kDeadlineExceeded) continue;
      Error(fmt::format("{}: RecvFor: {}", self.ToString(), message.status().ToString()));
      return;
    }
    const Gid source = message->source();
    if (std::string problem = CheckPayload(message->span(), source, self); !problem.empty()) {
      Error(fmt::format("{}: {}", self.ToString(), problem));
      return;
    }
    const uint64_t seq = ReadPayloadHeader(message->span()).seq;
    uint64_t& expected = next_seq[source];
    if (seq != expected) {
      Error(fmt::format("{} from {}: message {} where {} was due", self.ToString(),
                        source.ToString(), seq, expected));
      return;
    }
    ++expected;
    received_++;
  }
}

void Worker::DestroyInHandler() {
  const Gid self = threads_[0];
  auto registered =
      runtime_->RegisterHandler(self, Gid(), tocl::kAnyTag, [this](tocl::HandlerContext&) {
        Say("destroying");
        runtime_.reset();
        Say("destroyed");  // not expected
      });
  if (!registered.ok()) {
    Error("register: " + registered.status().ToString());
    return;
  }
  const char text[] = "go";
  tocl::Status sent = runtime_->Send(self, self, 1, std::as_bytes(std::span(text, 2)));
  if (!sent.ok()) {
    Error("send: " + sent.ToString());
    return;
  }
  Say("sent");
  stdin_.Wait();
}

void Worker::Stamp(size_t index) {
  const Gid self = threads_[index];
  std::vector<std::byte> payload(options_.size);
  for (uint64_t i = 0; i < ShareOf(index); ++i) {
    PauseBefore(i);
    const Gid to = peers_[i % peers_.size()];
    const int64_t now = SteadyNanos();
    std::memcpy(payload.data(), &now, sizeof(now));
    tocl::Status sent = runtime_->Send(self, to, options_.tag, std::span<const std::byte>(payload));
    if (!sent.ok()) {
      Error(fmt::format("stamp {} from {} to {}: {}", i, self.ToString(), to.ToString(),
                        sent.ToString()));
      return;
    }
    Say(fmt::format("sent t={}", SteadyNanos()));
    sent_++;
  }
}

void Worker::Packed(size_t index) {
  const Gid self = threads_[index];
  std::vector<std::byte> body(options_.packed_body);
  for (uint64_t i = 0; i < ShareOf(index); ++i) {
    PauseBefore(i);
    const Gid to = peers_[i % peers_.size()];
    for (size_t j = 0; j < body.size(); ++j) body[j] = tocl::testing::PackedBodyByte(i, j);
    auto writer = runtime_->BeginPacked(self, to, options_.tag);
    tocl::Status status = writer.status();
    for (uint32_t v = 0; status.ok() && v < tocl::testing::kPackedHeaderValues; ++v) {
      status = writer->Pack(tocl::testing::PackedHeaderValue(i, v, body.size()));
    }
    if (status.ok()) status = writer->PackBytes(body);
    if (status.ok()) status = writer->End();
    if (!status.ok()) {
      Error(fmt::format("packed {} from {} to {}: {}", i, self.ToString(), to.ToString(),
                        status.ToString()));
      return;
    }
    sent_++;
  }
}

// Pool buffers of every network and class that are in use (held, queued
// or in flight).
uint64_t PoolInUse(const tocl::Runtime& runtime) {
  uint64_t in_use = 0;
  for (const tocl::PoolClassStats& stats : runtime.PoolStats()) in_use += stats.in_use;
  return in_use;
}

void Worker::PackedRead() {
  const Gid self = threads_[0];
  const auto timeout = milliseconds(options_.recv_timeout_ms);
  auto header = runtime_->RecvFor(self, timeout, Gid(), options_.tag);
  if (!header.ok()) return Error("packed-read: the header: " + header.status().ToString());
  auto reader = runtime_->OpenPacked(self, std::move(*header));
  if (!reader.ok()) return Error("packed-read: " + reader.status().ToString());
  for (uint32_t v = 0; v < tocl::testing::kPackedHeaderValues; ++v) {
    auto value = reader->Unpack<uint64_t>();
    if (!value.ok()) return Error("packed-read: " + value.status().ToString());
  }
  Say(fmt::format("header in_use={}", PoolInUse(*runtime_)));
  auto go = runtime_->RecvFor(self, timeout, reader->info().source, options_.tag + 1);
  if (!go.ok()) return Error("packed-read: the go: " + go.status().ToString());
  *go = tocl::Buffer();
  auto next = reader->Peek();
  if (!next.ok()) return Error("packed-read: " + next.status().ToString());
  Say(fmt::format("next length={} by_reference={}", next->length, next->by_reference ? 1 : 0));
  std::vector<std::byte> body(next->length);
  auto got = reader->UnpackBytes(body);
  Say(got.ok() ? fmt::format("body ok bytes={}", *got)
               : fmt::format("body error {}", got.status().ToString()));
  *reader = tocl::PackedReader();
  const uint64_t in_use = PoolInUse(*runtime_);  // before TryRecv takes what it finds
  auto left = runtime_->TryRecv(self);
  Say(fmt::format("left receivable={} in_use={}", left.ok() ? 1 : 0, in_use));
}

void Worker::ReportProgress(std::stop_token stop) {
  uint64_t last_sent = 0, last_received = 0;
  while (!stop.stop_requested()) {
    std::this_thread::sleep_for(milliseconds(50));
    const uint64_t sent = sent_.load(), received = received_.load();
    if (sent != last_sent || received != last_received) {
      Say(fmt::format("progress sent={} received={}", sent, received));
      last_sent = sent;
      last_received = received;
    }
  }
}

int Worker::Run() {
  stdin_.Start();
  tocl::RuntimeOptions runtime_options;
  runtime_options.daemon_address = options_.daemon;
  runtime_options.name = options_.name;
  runtime_options.attributes = {{"role", options_.role}};
  runtime_options.subsystems = options_.subsystems;
  if (options_.unexpected_cap != 0) runtime_options.unexpected_cap = options_.unexpected_cap;
  if (options_.send_queue_depth != 0) runtime_options.send_queue_depth = options_.send_queue_depth;
  if (options_.pool_cap != 0) runtime_options.pool_cap = options_.pool_cap;
  auto runtime = tocl::Runtime::Start(runtime_options);
  if (!runtime.ok()) {
    Say("start-failed " + runtime.status().ToString());
    return 4;
  }
  runtime_ = std::move(*runtime);
  Say("process " + runtime_->gid().ToString());
  for (uint32_t i = 0; i < options_.threads; ++i) {
    auto thread = runtime_->EnrollThread(fmt::format("{}-{}", options_.name, i));
    if (!thread.ok()) {
      Say("error enroll: " + thread.status().ToString());
      return 1;
    }
    threads_.push_back(*thread);
    Say("thread " + thread->ToString());
  }
  Say("ready");

  const bool needs_peers = options_.role == "ping" || options_.role == "stream" ||
                           options_.role == "source" || options_.role == "stamp" ||
                           options_.role == "packed";
  if (tocl::Status found = FindPeers(); !found.ok()) {
    Say("error " + found.ToString());
    return 1;
  }
  if (needs_peers && peers_.empty()) {
    Say("error the role needs --peer-name or --to");
    return 2;
  }
  if (needs_peers) {
    std::string list;
    for (Gid peer : peers_) list += " " + peer.ToString();
    Say("peers" + list);
  }

  std::jthread progress([this](std::stop_token stop) { ReportProgress(stop); });
  std::jthread killer;
  if (options_.kill_on_stdin_close) {
    killer = std::jthread([this] {
      stdin_.Wait();
      ::kill(::getpid(), SIGKILL);
    });
  }
  const auto start = steady_clock::now();
  {
    std::vector<std::jthread> workers;
    for (size_t i = 0; i < threads_.size(); ++i) {
      if (options_.role == "echo") {
        workers.emplace_back([this, i] { Echo(threads_[i]); });
      } else if (options_.role == "ping") {
        workers.emplace_back([this, i] { Ping(i); });
      } else if (options_.role == "stream") {
        workers.emplace_back([this, i] { StreamReceive(i); });
        workers.emplace_back([this, i] { StreamSend(i); });
      } else if (options_.role == "source") {
        workers.emplace_back([this, i] { Source(i); });
      } else if (options_.role == "sink") {
        workers.emplace_back([this, i] { Sink(i); });
      } else if (options_.role == "stamp") {
        workers.emplace_back([this, i] { Stamp(i); });
      } else if (options_.role == "packed") {
        workers.emplace_back([this, i] { Packed(i); });
      } else if (options_.role == "packed-read" && i == 0) {
        workers.emplace_back([this] { PackedRead(); });
      }
    }
    if (options_.role == "idle") stdin_.Wait();
    if (options_.role == "destroy-in-handler") DestroyInHandler();
  }
  if (options_.kill_self) ::kill(::getpid(), SIGKILL);
  const auto elapsed_ms =
      std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count();
  progress.request_stop();
  progress.join();

  // Exactly once: after a stream, nothing more may be waiting.
  if (options_.role == "stream" && errors_ == 0) {
    for (Gid self : threads_) {
      auto extra = runtime_->TryRecv(self);
      if (extra.ok()) {
        Error(fmt::format("{} has an extra message from {} after every stream ended",
                          self.ToString(), extra->source().ToString()));
      }
    }
  }

  std::string failed;
  {
    std::lock_guard lock(failed_mutex_);
    failed = failed_;
  }
  if (!failed.empty()) Say("failed " + failed);
  const uint64_t pings = received_.load();
  Say(fmt::format("done sent={} received={} send_failures={} errors={} ms={} rtt_avg_us={}",
                  sent_.load(), received_.load(), send_failures_.load(), errors_.load(), elapsed_ms,
                  pings == 0 ? 0 : rtt_ns_.load() / pings / 1000));
  if (errors_ > 0) {
    std::lock_guard lock(error_mutex_);
    Say("error " + first_error_);
  }
  if (options_.linger) stdin_.Wait();

  Say(fmt::format("stopping t={}", SteadyNanos()));
  tocl::Status shutdown = runtime_->Shutdown();
  if (!shutdown.ok()) Complain("shutdown: " + shutdown.ToString());
  runtime_.reset();
  Say("exiting");
  if (errors_ > 0) return 1;
  if (!failed.empty()) return 3;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"A tocl process for the messaging tests: echo, ping, stream, source, sink, stamp."};
  app.add_option("--daemon", options.daemon, "daemon address (unix:/path or host:port)")
      ->required();
  app.add_option("--role", options.role, "what to do")
      ->check(CLI::IsMember({"echo", "ping", "stream", "source", "sink", "stamp", "idle",
                             "destroy-in-handler", "packed", "packed-read"}));
  app.add_option("--subsystems", options.subsystems, "networks to open (shm, tcp, shm,tcp)");
  app.add_option("--name", options.name, "process name");
  app.add_option("--threads", options.threads, "threads to enroll")->check(CLI::Range(1u, 1024u));
  app.add_option("--peer-name", options.peer_name, "the peer process's name");
  app.add_option("--peer-threads", options.peer_threads, "threads the peer will have")
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--to", options.to, "peer thread gids");
  app.add_option("--count", options.count, "messages to send (the whole process)");
  app.add_option("--size", options.size, "payload bytes (the largest with --random-size)")
      ->check(CLI::Range(kPayloadHeaderBytes, size_t{1} << 20));
  app.add_flag("--random-size", options.random_size, "payload sizes from the header to --size");
  app.add_option("--tag", options.tag, "message tag");
  app.add_option("--unexpected-cap", options.unexpected_cap, "RuntimeOptions::unexpected_cap");
  app.add_option("--send-queue-depth", options.send_queue_depth,
                 "RuntimeOptions::send_queue_depth");
  app.add_option("--pool-cap", options.pool_cap, "RuntimeOptions::pool_cap");
  app.add_option("--duration-ms", options.duration_ms, "spread the sends over this long");
  app.add_option("--recv-timeout-ms", options.recv_timeout_ms,
                 "ping, stream: how long to wait for one message");
  auto* track =
      app.add_flag("--track", options.track, "source: send lvalue buffers and watch their state");
  app.add_flag("--copy", options.copy, "source: send from the thread's own memory (a span)")
      ->excludes(track);
  app.add_flag("--pairwise", options.pairwise, "source: thread i sends to peer i % peers only");
  app.add_flag("--linger", options.linger, "after the role, wait for stdin to close");
  app.add_option("--pause-before", options.pause_before,
                 "source, stamp: before this message (0: the first), wait for stdin to close");
  app.add_flag("--kill-self", options.kill_self, "SIGKILL itself as soon as the role is done");
  app.add_option("--packed-body", options.packed_body, "packed: body bytes")
      ->check(CLI::Range(size_t{0}, size_t{1} << 30));
  app.add_flag("--kill-on-stdin-close", options.kill_on_stdin_close,
               "SIGKILL itself as soon as stdin closes");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  return Worker(std::move(options)).Run();
}
