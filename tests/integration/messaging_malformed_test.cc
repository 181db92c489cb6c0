// Bytes that are not tocl frames, written by hand to a process's tcp port
// (the endpoint it published in the directory): garbage, truncated headers,
// bad magic, versions and kinds, impossible lengths, messages before the
// hello, for other processes or for threads that do not exist. Each must
// close that connection (DESIGN.md §6), or at least change nothing, and the
// process must go on serving: a normal message from another process still
// gets its echo.
//
// Frames are built from the wire header (libtocl/src/wire/frame.h).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "raw_handshake.h"
#include "runtime/internal_threads.h"
#include "runtime/multicast_protocol.h"
#include "security/cluster_key.h"
#include "status_assertions.h"
#include "wire/frame.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// A connected TCP socket, closed by the destructor.
class RawConnection {
 public:
  static Result<RawConnection> Open(const std::string& endpoint) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("no port in " + endpoint);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
    if (::inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &address.sin_addr) != 1) {
      return InvalidArgument("not an IPv4 address: " + endpoint);
    }
    RawConnection connection(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connection.fd_ < 0) return Internal("socket: " + std::string(std::strerror(errno)));
    if (::connect(connection.fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) !=
        0) {
      return Unavailable("connect " + endpoint + ": " + std::strerror(errno));
    }
    timeval send_timeout = {10, 0};
    ::setsockopt(connection.fd_, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    return connection;
  }
  RawConnection(RawConnection&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RawConnection& operator=(RawConnection&&) = delete;
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }

  enum class Written { kAll, kClosed, kStuck };
  // Writes everything it can; a peer that closes early is not an error
  // here, one that stops reading for 10 s is kStuck.
  Written Write(std::span<const std::byte> bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Written::kStuck;
      if (n <= 0) return Written::kClosed;
      done += static_cast<size_t>(n);
    }
    return Written::kAll;
  }
  void EndWrites() { ::shutdown(fd_, SHUT_WR); }
  // The data plane's handshake as `from` (a process without cluster
  // credentials, like the target).
  Status Handshake(Gid from, Gid to) {
    return RawTcpHandshake(fd_, from, to, security::ClusterKey());
  }

  // True once the other side has closed the connection (EOF or reset),
  // reading and dropping anything it sends first.
  bool ClosedByPeer(milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    char sink[4096];
    while (steady_clock::now() < deadline) {
      pollfd poll_fd = {fd_, POLLIN | POLLRDHUP, 0};
      int ready = ::poll(&poll_fd, 1, 100);
      if (ready <= 0) continue;
      ssize_t n = ::recv(fd_, sink, sizeof sink, MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return true;
    }
    return false;
  }

 private:
  explicit RawConnection(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Frames as bytes.
class Frames {
 public:
  Frames& Add(const wire::Header& header, std::span<const std::byte> payload = {}) {
    const size_t at = bytes_.size();
    bytes_.resize(at + wire::kHeaderBytes);
    wire::EncodeHeader(header, bytes_.data() + at);
    bytes_.insert(bytes_.end(), payload.begin(), payload.end());
    return *this;
  }
  // A hello frame (header and a nonce of zeros), whole.
  Frames& AddHello(const wire::Header& hello) {
    const std::vector<std::byte> nonce(wire::kHandshakeNonceBytes);
    return Add(hello, nonce);
  }
  Frames& Raw(std::span<const std::byte> raw) {
    bytes_.insert(bytes_.end(), raw.begin(), raw.end());
    return *this;
  }
  Frames& Truncate(size_t size) {
    bytes_.resize(size);
    return *this;
  }
  std::span<const std::byte> bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<std::byte> bytes_;
};

// A hello's header (its payload, a nonce, is added by Frames::AddHello).
wire::Header Hello(Gid from_process, Gid to_process) {
  wire::Header header;
  header.kind = wire::FrameKind::kHello;
  header.length = wire::kHandshakeNonceBytes;
  header.source = from_process.raw();
  header.destination = to_process.raw();
  return header;
}

// `seq` counts the messages of one source process to one destination
// process, from 0: the receiver delivers them in that order.
wire::Header Message(Gid from, Gid to, Tag tag, size_t length, uint64_t seq = 0) {
  wire::Header header;
  header.kind = wire::FrameKind::kMessage;
  header.tag = tag;
  header.length = static_cast<uint32_t>(length);
  header.total = length;
  header.source = from.raw();
  header.destination = to.raw();
  header.seq = seq;
  return header;
}

// The target's budget for unexpected messages.
constexpr size_t kUnexpectedCap = size_t{4} << 20;

TEST_CASE("malformed frames on a process's tcp port close that connection, the process serves on",
          "[integration][msg][tcp]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  MsgWorker echo = REQUIRE_VALUE(MsgWorker::Start(
      daemon, MsgWorkerArgs("echo", "target").Subsystems("tcp").UnexpectedCap(kUnexpectedCap)));
  const Gid target = echo.threads().front();
  const Gid target_process = echo.process();
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "honest", "tcp"));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  INFO("target output:\n" << echo.Output());

  auto ping = [&](const std::string& text) -> Status {
    TOCL_RETURN_IF_ERROR(runtime->Send(me, target, 1, Bytes(text)));
    TOCL_ASSIGN_OR_RETURN(Buffer reply, runtime->RecvFor(me, seconds(15), target, 1));
    if (Text(reply) != text) return Internal("the echo of '" + text + "' is '" + Text(reply) + "'");
    return Status::Ok();
  };
  REQUIRE_OK(ping("before anything"));

  auto client = REQUIRE_VALUE(daemon.Connect());
  const std::string endpoint = REQUIRE_VALUE(TcpEndpointOf(*client, target_process));
  INFO("target's tcp endpoint: " << endpoint);
  REQUIRE_OK(RawConnection::Open(endpoint));

  // Processes that do not exist, on the target's host: the "attackers",
  // one per experiment so that each starts a sequence of its own.
  uint32_t next_stranger = Gid::kMaxProcess - 1;
  auto new_stranger = [&] { return Gid::Process(target.host_index(), next_stranger--); };
  const Gid stranger = new_stranger();
  const Gid stranger_thread = Gid::Thread(stranger, 1);
  const Gid honest_process = runtime->gid();
  // What the target has received: echo prints "progress ... received=N".
  uint64_t target_received = 1;
  auto target_receives = [&](uint64_t more) {
    target_received += more;
    return echo.WaitForValue("progress", "received", target_received, seconds(15));
  };

  {
    INFO(
        "a well-formed frame written by hand is delivered (the cases below are right but for "
        "one thing)");
    RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
    const Gid writer = new_stranger();
    const std::string text = "by hand";
    REQUIRE_OK(raw.Handshake(writer, target_process));
    CHECK(raw.Write(Frames()
                        .Add(Message(Gid::Thread(writer, 1), target, 5, text.size()), Bytes(text))
                        .bytes()) == RawConnection::Written::kAll);
    // The target receives it (its echo to a process that does not exist fails).
    CHECK(target_receives(1));
    CHECK_FALSE(raw.ClosedByPeer(milliseconds(300)));
  }

  struct Case {
    std::string what;
    Frames frames;
    bool end_writes = false;  // shut our side down after writing
    bool must_close = true;   // the target must close the connection
    Gid handshake_as{};       // not null: a whole handshake as it first
  };
  std::vector<std::byte> garbage(4096);
  std::mt19937 random(42);
  for (std::byte& b : garbage) b = static_cast<std::byte>(random());
  const std::string payload = "0123456789";
  auto hello = [&] { return Frames().AddHello(Hello(stranger, target_process)); };

  std::vector<Case> cases;
  cases.push_back({"random bytes", Frames().Raw(garbage)});
  cases.push_back({"a header cut short, then the end of the stream", hello().Truncate(20),
                   /*end_writes=*/true});
  cases.push_back({"a message header cut short after the handshake, then the end of the stream",
                   Frames().Add(Message(stranger_thread, target, 1, 0)).Truncate(30), true, true,
                   stranger});
  cases.push_back({"a payload cut short, then the end of the stream",
                   Frames().Add(Message(stranger_thread, target, 1, 1000), Bytes(payload)), true,
                   true, stranger});
  {
    wire::Header bad = Hello(stranger, target_process);
    bad.magic = 0xDEADBEEF;
    cases.push_back({"a hello with bad magic", Frames().AddHello(bad)});
  }
  {
    wire::Header bad = Message(stranger_thread, target, 1, payload.size());
    bad.magic = 0x4C434F55;
    cases.push_back({"a message with bad magic after the handshake",
                     Frames().Add(bad, Bytes(payload)), false, true, stranger});
  }
  {
    wire::Header bad = Hello(stranger, target_process);
    bad.version = 9;
    cases.push_back({"an unknown version", Frames().AddHello(bad)});
  }
  {
    wire::Header bad = Message(stranger_thread, target, 1, 0);
    bad.kind = static_cast<wire::FrameKind>(77);
    cases.push_back({"an unknown frame kind", Frames().Add(bad), false, true, stranger});
  }
  {
    wire::Header bad = Message(stranger_thread, target, 1, 0);
    bad.length = 0xFFFF'FFFFu;  // 4 GiB
    bad.total = bad.length;
    cases.push_back({"a length of 4 GiB", Frames().Add(bad).Raw(garbage), false, true, stranger});
  }
  {
    wire::Header bad = Message(stranger_thread, target, 1, payload.size());
    bad.total = uint64_t{1} << 40;
    cases.push_back({"a total length that is not the length", Frames().Add(bad, Bytes(payload)),
                     false, true, stranger});
  }
  {
    wire::Header bad = Message(stranger_thread, target, 1, payload.size());
    bad.reserved = 1;
    cases.push_back(
        {"reserved bits set", Frames().Add(bad, Bytes(payload)), false, true, stranger});
  }
  cases.push_back(
      {"a message before the hello",
       Frames().Add(Message(stranger_thread, target, 1, payload.size()), Bytes(payload))});
  cases.push_back(
      {"a hello for another process", Frames().AddHello(Hello(stranger, honest_process))});
  cases.push_back({"a hello from a thread, not a process",
                   Frames().AddHello(Hello(stranger_thread, target_process))});
  cases.push_back(
      {"a message before the handshake proof",
       hello().Add(Message(stranger_thread, target, 1, payload.size()), Bytes(payload))});
  {
    // What a stranger without the cluster's secret can send: a proof of
    // zeros (the target has no credentials, and the empty key's proof is not
    // zeros either).
    wire::Header proof = Hello(stranger, target_process);
    proof.kind = wire::FrameKind::kProof;
    proof.length = wire::kHandshakeMacBytes;
    const std::vector<std::byte> zeros(wire::kHandshakeMacBytes);
    cases.push_back({"a forged handshake proof", hello().Add(proof, zeros)});
  }
  cases.push_back({"a second hello", hello(), false, true, stranger});
  cases.push_back(
      {"a message for another process",
       Frames().Add(Message(stranger_thread, Gid::Thread(honest_process, 1), 1, payload.size()),
                    Bytes(payload)),
       false, true, stranger});
  cases.push_back({"a message from another process than the handshake's",
                   Frames().Add(Message(Gid::Thread(honest_process, 1), target, 1, payload.size()),
                                Bytes(payload)),
                   false, true, stranger});
  cases.push_back({"a message from a process id, not a thread",
                   Frames().Add(Message(stranger, target, 1, payload.size()), Bytes(payload)),
                   false, true, stranger});
  // Not a framing error: the target drops it (or closes); either way it
  // must neither keep it forever nor stop.
  cases.push_back(
      {"a message for a thread that does not exist",
       Frames().Add(Message(stranger_thread, Gid::Thread(target_process, 4000), 1, payload.size()),
                    Bytes(payload)),
       false, /*must_close=*/false, stranger});
  // Long-message frames (issue #4), each from a process of its own.
  {
    const Gid sender = new_stranger();
    wire::Header start = Message(Gid::Thread(sender, 1), target, 1, 0);
    start.kind = wire::FrameKind::kLongStart;
    start.total = uint64_t{1} << 40;
    start.reserved = 1;  // 2^40 fragments: refused before any memory is taken
    cases.push_back({"a long-message start in 2^40 one-byte fragments", Frames().Add(start), false,
                     true, sender});
  }
  {
    const Gid sender = new_stranger();
    wire::Header fragment = Message(Gid::Thread(sender, 1), target, 1, payload.size());
    fragment.kind = wire::FrameKind::kFragment;
    fragment.total = 1 << 20;
    fragment.offset = 4096;
    cases.push_back({"a fragment of a message never started",
                     Frames().Add(fragment, Bytes(payload)), false, /*must_close=*/false, sender});
  }
  {
    const Gid sender = new_stranger();
    wire::Header ack = Message(Gid::Thread(sender, 1), target, 1, 0);
    ack.kind = wire::FrameKind::kAck;
    ack.total = 65536;
    wire::Header grant = Message(Gid::Thread(sender, 1), target, 1, 0);
    grant.kind = wire::FrameKind::kGrant;
    cases.push_back({"acknowledgements and grants for messages never sent",
                     Frames().Add(ack).Add(grant), false, /*must_close=*/false, sender});
  }
  // Multicast (issue #19): relayed frames, and requests to the relay.
  {
    wire::Header bad = Hello(stranger, target_process);
    bad.flags = wire::kFlagRelayed;
    cases.push_back({"a hello marked relayed", Frames().AddHello(bad)});
  }
  {
    wire::Header bad = Message(stranger_thread, Gid::Thread(honest_process, 1), 1, payload.size());
    bad.flags = wire::kFlagRelayed;
    cases.push_back({"a relayed message for another process", Frames().Add(bad, Bytes(payload)),
                     false, true, stranger});
  }
  {
    wire::Header bad = Message(Gid::Thread(honest_process, 1), target, 1, 0);
    bad.kind = wire::FrameKind::kGrant;
    bad.total = 0;
    bad.flags = wire::kFlagRelayed;
    cases.push_back({"a relayed grant from another process than the handshake's", Frames().Add(bad),
                     false, true, stranger});
  }
  {
    wire::Header bad = Message(stranger_thread, target, 1, payload.size());
    bad.flags = wire::kFlagRelayed | 4;
    cases.push_back({"unknown flag bits beside relayed", Frames().Add(bad, Bytes(payload)), false,
                     true, stranger});
  }
  {
    // A fill (a relay's frame, wire/frame.h) naming the honest process's
    // thread, whose messages to the target are numbered from 0 ("before
    // anything" took 0), for a number no marker of it took: dropped, not
    // delivered (the echo would answer it with tag 77: checked after the
    // cases); its carrier is not blamed (anyone can have a relay carry a
    // fill: multicast.h), so the connection stays.
    const Gid relayer = new_stranger();
    wire::Header forged = Message(me, target, 77, payload.size(), /*seq=*/0);
    forged.flags = wire::kFlagRelayed;
    cases.push_back({"a fill naming a third process's thread, for a number no marker took",
                     Frames().Add(forged, Bytes(payload)), false, /*must_close=*/false, relayer});
  }
  {
    // A fill for a number far ahead: nothing to judge it by yet, so it
    // waits (charged to its carrier, not delivered: checked after the
    // cases), and the connection stays.
    wire::Header ahead = Message(me, target, 77, payload.size(), /*seq=*/1000);
    ahead.flags = wire::kFlagRelayed;
    const Gid relayer = new_stranger();
    cases.push_back({"a fill for a number far ahead of its pair",
                     Frames().Add(ahead, Bytes(payload)), false, /*must_close=*/false, relayer});
  }
  {
    // A fill in the name of a runtime's internal thread (the honest
    // process's spawn service), or for one: refused at once.
    const Gid relayer = new_stranger();
    wire::Header forged = Message(Gid::Thread(honest_process, Gid::kMaxThread), target, 77,
                                  payload.size(), /*seq=*/0);
    forged.flags = wire::kFlagRelayed;
    cases.push_back({"a fill from a runtime's internal thread",
                     Frames().Add(forged, Bytes(payload)), false, /*must_close=*/true, relayer});
    wire::Header to_service =
        Message(me, Gid::Thread(target_process, Gid::kMaxThread), 77, payload.size(), /*seq=*/0);
    to_service.flags = wire::kFlagRelayed;
    cases.push_back({"a fill for a runtime's internal thread",
                     Frames().Add(to_service, Bytes(payload)), false, /*must_close=*/true,
                     new_stranger()});
  }
  {
    // Relayed aborts go the way their tag says: a sender's (tag 0) only to
    // a thread of the process it came to, a receiver's (tag 1) only from a
    // thread of the process it came from (forged ones to made-up
    // destinations would otherwise each make state there).
    wire::Header to_elsewhere = Message(me, Gid::Thread(honest_process, 7), 0, 0);
    to_elsewhere.kind = wire::FrameKind::kAbort;
    to_elsewhere.flags = wire::kFlagRelayed;
    const Gid aborter = new_stranger();
    cases.push_back({"a relayed sender's abort for a thread of another process",
                     Frames().Add(to_elsewhere), false, /*must_close=*/true, aborter});
    wire::Header in_anothers_name = Message(me, target, 0, 0);
    in_anothers_name.kind = wire::FrameKind::kAbort;
    in_anothers_name.tag = 1;
    in_anothers_name.flags = wire::kFlagRelayed;
    cases.push_back({"a relayed receiver's abort in another process's thread's name",
                     Frames().Add(in_anothers_name), false, /*must_close=*/true, new_stranger()});
  }
  {
    // A marker only comes from its sender's own process.
    const Gid relayer = new_stranger();
    cases.push_back({"a marker for another process's thread",
                     Frames().Add(wire::MarkerHeader(me, target, 77, payload.size(), relayer, 0)),
                     false, /*must_close=*/true, relayer});
  }
  {
    // Garbage, and a request from a user thread, to the target's multicast
    // relay (the thread index before the spawn service's): refused with a
    // log line, never answered to a user thread, and the target goes on.
    const Gid sender = new_stranger();
    const Gid relay = Gid::Thread(target_process, Gid::kMaxThread - 1);
    Frames frames;
    frames.Add(Message(Gid::Thread(sender, 1), relay, 3, garbage.size(), 0), garbage);
    std::vector<std::byte> truncated(garbage.begin(), garbage.begin() + 40);
    const uint32_t magic = 0x32514D54;  // "TMQ2": a request cut short after its marker
    std::memcpy(truncated.data(), &magic, sizeof magic);
    frames.Add(Message(Gid::Thread(sender, 1), relay, 3, truncated.size(), 1), truncated);
    cases.push_back({"malformed multicast requests to the relay", std::move(frames), false,
                     /*must_close=*/false, sender});
  }
  // Left open: the target must not wait for the rest of it.
  cases.push_back({"a header cut short, left open", hello().Truncate(20), false, false});
  cases.push_back({"a payload cut short, left open",
                   Frames().Add(Message(stranger_thread, target, 1, 1000), Bytes(payload)), false,
                   false, stranger});
  cases.push_back({"nothing at all, left open", Frames(), false, false});

  std::vector<RawConnection> left_open;
  for (Case& test : cases) {
    INFO("case: " << test.what);
    RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
    if (!test.handshake_as.is_null()) {
      REQUIRE_OK(raw.Handshake(test.handshake_as, target_process));
    }
    const auto written = raw.Write(test.frames.bytes());
    CHECK(written != RawConnection::Written::kStuck);
    if (test.end_writes) raw.EndWrites();
    if (test.must_close) {
      CHECK(raw.ClosedByPeer(seconds(10)));
    } else {
      left_open.push_back(std::move(raw));
    }
    REQUIRE(echo.child().running());
    CHECK_OK(ping("after " + test.what));
    ++target_received;
  }

  // Nothing forged was delivered: the echo would have answered it.
  CHECK(runtime->TryRecv(me, Gid(), 77).status().code() == StatusCode::kTryAgain);

  // Many idle connections at once do not starve the honest one.
  for (int i = 0; i < 100; ++i) {
    left_open.push_back(REQUIRE_VALUE(RawConnection::Open(endpoint)));
    if (i % 2 == 0) (void)left_open.back().Write(hello().Truncate(10).bytes());
  }
  CHECK_OK(ping("with a hundred idle connections open"));
  ++target_received;
  // A flood of messages for threads that do not exist is not kept.
  {
    RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
    const Gid flooder = new_stranger();
    REQUIRE_OK(raw.Handshake(flooder, target_process));
    Frames flood;
    for (uint32_t i = 0; i < 20000; ++i) {
      flood.Add(Message(Gid::Thread(flooder, 1), Gid::Thread(target_process, 5000 + i), 1,
                        payload.size(), /*seq=*/i),
                Bytes(payload));
    }
    const int64_t rss_before = REQUIRE_VALUE(ProcessRssKib(echo.pid()));
    // Dropped or refused (closed), but not kept while the sender waits.
    CHECK(raw.Write(flood.bytes()) != RawConnection::Written::kStuck);
    CHECK_OK(ping("after a flood for absent threads"));
    ++target_received;
    const int64_t rss_after = REQUIRE_VALUE(ProcessRssKib(echo.pid()));
    INFO("target RSS " << rss_before << " -> " << rss_after << " KiB");
    if (!SanitizedBuild()) CHECK(rss_after - rss_before < 32 * 1024);
  }
  // Messages after a gap in a sequence that never closes (message 0 never
  // comes) wait for it, but within the unexpected-message budget (4 MiB),
  // not with 64 MiB.
  {
    RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
    const Gid gapper = new_stranger();
    REQUIRE_OK(raw.Handshake(gapper, target_process));
    Frames gapped;
    const std::vector<std::byte> big(16 * 1024, std::byte{0x42});
    for (uint32_t i = 1; i <= 2000; ++i) {
      gapped.Add(Message(Gid::Thread(gapper, 1), target, 1, big.size(), /*seq=*/i), big);
    }
    const int64_t rss_before = REQUIRE_VALUE(ProcessRssKib(echo.pid()));
    const auto written = raw.Write(gapped.bytes());
    raw.EndWrites();
    // Once the target has read to the end of the stream it closes it (a
    // target that stopped reading has bounded what it keeps).
    const bool read_to_the_end = raw.ClosedByPeer(seconds(10));
    CHECK_OK(ping("after a sequence with a gap"));
    ++target_received;
    const int64_t rss_after = REQUIRE_VALUE(ProcessRssKib(echo.pid()));
    INFO(
        "wrote: " << (written == RawConnection::Written::kAll      ? "all"
                      : written == RawConnection::Written::kClosed ? "closed"
                                                                   : "stuck")
                  << (read_to_the_end ? ", the target read it all" : ", the target stopped reading")
                  << "; target RSS " << rss_before << " -> " << rss_after << " KiB");
    if (!SanitizedBuild()) CHECK(rss_after - rss_before < 20 * 1024);
  }
  left_open.clear();
  CHECK_OK(ping("after everything"));

  Result<int> code = echo.Finish(seconds(30));
  REQUIRE_OK(code);
  CHECK(*code == 0);
}

// The control frames of a long message (tag: kAbort's side, 0 = its sender).
wire::Header LongControl(wire::FrameKind kind, Gid from, Gid to, uint64_t seq) {
  wire::Header header;
  header.kind = kind;
  header.source = from.raw();
  header.destination = to.raw();
  header.seq = seq;
  return header;
}

TEST_CASE(
    "a long message whose start never came: its sender's abort lets the pair's later "
    "messages through, a late start is dropped",
    "[integration][msg][tcp][long]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "receiver", "tcp"));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  auto client = REQUIRE_VALUE(daemon.Connect());
  const std::string endpoint = REQUIRE_VALUE(TcpEndpointOf(*client, runtime->gid()));
  // The sender: frames written by hand as a process that the receiver
  // never needs to look up (nothing here answers it).
  const Gid sender = Gid::Process(me.host_index(), Gid::kMaxProcess - 1);
  const Gid from = Gid::Thread(sender, 1);
  RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
  REQUIRE_OK(raw.Handshake(sender, runtime->gid()));
  auto write = [&](const Frames& frames) {
    REQUIRE(raw.Write(frames.bytes()) == RawConnection::Written::kAll);
  };
  auto message = [&](const std::string& text, uint64_t seq) {
    Frames frames;
    frames.Add(Message(from, me, 1, text.size(), seq), Bytes(text));
    return frames;
  };
  wire::Header start = LongControl(wire::FrameKind::kLongStart, from, me, 1);
  start.tag = 1;
  start.total = 200000;
  start.reserved = 1024;  // fragment size
  const wire::Header abort = LongControl(wire::FrameKind::kAbort, from, me, 1);
  auto next_text = [&] {
    auto got = runtime->RecvFor(me, seconds(10));
    return got.ok() ? Text(*got) : got.status().ToString();
  };
  auto nothing_more = [&] {
    return runtime->RecvFor(me, milliseconds(300)).status().code() == StatusCode::kDeadlineExceeded;
  };

  write(message("a", 0));
  CHECK(next_text() == "a");
  // Seq 1 was a long message whose start was lost: what follows it waits.
  write(message("c", 2));
  CHECK(nothing_more());
  // Its sender gave up and says so: the pair goes on.
  write(Frames().Add(abort));
  CHECK(next_text() == "c");
  // The start comes after all, between two messages: it is dropped, the
  // connection stays.
  write(message("d", 3).Add(start).Add(Message(from, me, 1, 1, 4), Bytes("e")));
  CHECK(next_text() == "d");
  CHECK(next_text() == "e");
  CHECK(nothing_more());

  // A start that came but waits behind a lost message (seq 5) is dropped by
  // its abort; when seq 5 comes late, the pair goes on past both.
  start.seq = 7;
  wire::Header abort7 = abort;
  abort7.seq = 7;
  write(message("g", 6).Add(start));
  CHECK(nothing_more());
  write(Frames().Add(abort7));
  CHECK(nothing_more());
  write(message("f", 5).Add(Message(from, me, 1, 1, 8), Bytes("h")));
  CHECK(next_text() == "f");
  CHECK(next_text() == "g");
  CHECK(next_text() == "h");
  CHECK(nothing_more());
  CHECK_FALSE(raw.ClosedByPeer(milliseconds(300)));
}

TEST_CASE(
    "forged relayed aborts and probes about a long message in flight are ignored at both ends, "
    "and the message arrives",
    "[integration][msg][tcp][long][multicast]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto sender = REQUIRE_VALUE(StartRuntime(daemon, "sender", "tcp"));
  const Gid s = REQUIRE_VALUE(sender->EnrollThread("s"));
  // Its grant waits for a RecvInto: the message stays in flight meanwhile.
  RuntimeOptions small = RuntimeOptionsFor(daemon, "receiver", "tcp");
  small.reassembly_cap = size_t{256} << 10;
  auto receiver = REQUIRE_VALUE(StartRuntime(small));
  const Gid r = REQUIRE_VALUE(receiver->EnrollThread("r"));
  const std::vector<std::byte> payload = PatternBytes(size_t{1} << 20, 19);

  const uint64_t heard_before = FramesReceived(*sender);
  auto sent = std::async(std::launch::async, [&] { return sender->Send(s, r, 3, payload); });
  // The receiver has the start once it answers the sender's probe ("waits
  // for memory"): the first frame the sender hears (nobody else talks to
  // it). (A start waiting for memory is not visible to Probe.)
  const auto deadline = steady_clock::now() + seconds(20);
  while (FramesReceived(*sender) == heard_before && steady_clock::now() < deadline) {
    REQUIRE(sent.wait_for(milliseconds(20)) == std::future_status::timeout);
  }
  REQUIRE(FramesReceived(*sender) > heard_before);

  // A third process, relay-flagged: the sender's abort and probe to the
  // receiver, the receiver's abort to the sender (message 0 of the pair).
  auto client = REQUIRE_VALUE(daemon.Connect());
  const Gid forger = Gid::Process(s.host_index(), Gid::kMaxProcess - 2);
  auto forge = [&](Runtime& target, wire::Header header) {
    header.flags = wire::kFlagRelayed;
    const std::string endpoint = REQUIRE_VALUE(TcpEndpointOf(*client, target.gid()));
    RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
    REQUIRE_OK(raw.Handshake(forger, target.gid()));
    // Then a frame with a bad magic, which closes the connection: once
    // it is closed, the forged frame before it was handled (the frames of
    // a connection are taken in order), while the message is in flight.
    wire::Header closer = header;
    closer.magic = 0;
    REQUIRE(raw.Write(Frames().Add(header).Add(closer).bytes()) == RawConnection::Written::kAll);
    REQUIRE(raw.ClosedByPeer(seconds(20)));
    REQUIRE(sent.wait_for(milliseconds(0)) == std::future_status::timeout);
  };
  forge(*receiver, LongControl(wire::FrameKind::kAbort, s, r, 0));  // "its sender gave up"
  forge(*receiver, LongControl(wire::FrameKind::kProbe, s, r, 0));
  wire::Header receiver_abort = LongControl(wire::FrameKind::kAbort, r, s, 0);
  receiver_abort.tag = 1;  // "its receiver gave up"
  forge(*sender, receiver_abort);

  std::vector<std::byte> out(payload.size());
  MessageInfo info = REQUIRE_VALUE(receiver->RecvIntoFor(r, out, seconds(30), s, 3));
  CHECK(info.size == payload.size());
  CHECK(out == payload);
  CHECK_OK(sent.get());
}

TEST_CASE(
    "a forged relay answer is ignored: the sender waits for its relay's, then gives the message "
    "itself",
    "[integration][msg][tcp][multicast]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  // The relay (the lowest receiving process), stopped: it answers nothing.
  MsgWorker relay = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("idle", "stuck-relay")));
  auto sender = REQUIRE_VALUE(StartRuntime(daemon, "answered-sender", "shm,tcp"));
  const Gid s = REQUIRE_VALUE(sender->EnrollThread("s"));
  auto other = REQUIRE_VALUE(StartRuntime(daemon, "answered-other"));
  const Gid o = REQUIRE_VALUE(other->EnrollThread("o"));
  REQUIRE(relay.process() < other->gid());
  const std::vector<Gid> to{relay.threads().at(0), o};
  REQUIRE_OK(relay.child().Signal(SIGSTOP));

  const std::vector<std::byte> payload = PatternBytes(300, 23);
  const uint64_t other_heard = FramesReceived(*other);
  auto pending = std::async(std::launch::async, [&] {
    return sender->Multicast(s, to, 7, payload, {.timeout = seconds(60), .relay_local = true});
  });
  // Its marker reached `other`: the sender waits for the relay's answer.
  const auto deadline = steady_clock::now() + seconds(20);
  while (FramesReceived(*other) == other_heard && steady_clock::now() < deadline) {
    REQUIRE(pending.wait_for(milliseconds(5)) == std::future_status::timeout);
  }
  REQUIRE(FramesReceived(*other) > other_heard);

  // A process outside the multicast's tree answers "ok" for the relay's
  // group, as the relay would: the sender's first request (id 1), to each
  // reply mailbox it may wait on.
  runtime::MulticastReply forged{.id = 1, .relay = relay.process()};
  for (Gid receiver : to) forged.receivers.push_back({receiver, Status::Ok()});
  const std::vector<std::byte> answer = runtime::EncodeMulticastReply(forged);
  const Gid forger = Gid::Process(s.host_index(), Gid::kMaxProcess - 3);
  auto client = REQUIRE_VALUE(daemon.Connect());
  const std::string endpoint = REQUIRE_VALUE(TcpEndpointOf(*client, sender->gid()));
  RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
  REQUIRE_OK(raw.Handshake(forger, sender->gid()));
  Frames frames;
  for (uint32_t k = 0; k < 4; ++k) {
    const Gid mailbox = Gid::Thread(sender->gid(), runtime::kFirstInternalThread + k);
    frames.Add(
        Message(runtime::RelayOf(forger), mailbox, runtime::kMulticastReplyTag, answer.size()),
        answer);
  }
  // Then a frame with a bad magic: once the sender closes the connection
  // for it, the answers before it are in its reply mailboxes (the frames
  // of a connection are taken in order), where the waiting call takes
  // them at once.
  wire::Header closer = Message(runtime::RelayOf(forger), Gid::Thread(sender->gid(), 1), 1, 0);
  closer.magic = 0;
  frames.Add(closer);
  REQUIRE(raw.Write(frames.bytes()) == RawConnection::Written::kAll);
  REQUIRE(raw.ClosedByPeer(seconds(20)));
  REQUIRE(pending.wait_for(milliseconds(0)) == std::future_status::timeout);

  // Killed, the relay fails the wait (the directory says so): the sender
  // gives `other` the message itself. Taken as the relay's answer, the
  // forgery would have ended the call with nobody sending to `other`.
  REQUIRE_VALUE(relay.child().Kill());
  auto result = REQUIRE_VALUE(pending.get());
  REQUIRE(result.receivers.size() == 2);
  CHECK_FALSE(result.receivers[0].status.ok());  // the relay's own thread died with it
  INFO(result.receivers[1].status.ToString());
  CHECK(result.receivers[1].status.ok());
  CHECK(result.receivers[1].carried_by == sender->gid());
  Buffer got = REQUIRE_VALUE(other->RecvFor(o, seconds(20), s, 7));
  CHECK(got.size() == payload.size());
  CHECK(other->TryRecv(o, s, 7).status().code() == StatusCode::kTryAgain);
}

// A third process's relay thread passes a request (as a parent relay in a
// tree would) to `relay`'s relay thread: carry `bytes` as number `seq` of
// (s, r), r a thread of the receiving process, with no nonce. s's process sent
// the relay no ticket for it (multicast_tickets.h), so the relay waits for
// one (the request's 200 ms), then refuses it, answering s's process.
// Returns once that answer reached the sender (nobody else talks to it
// meanwhile). (Whether the relay carried anything is for the caller to
// check at r, and for the relay unit tests: counting r's frames here
// would be racy, a fill on another connection may land after the answer.)
void ForgeRelayRequest(Daemon& daemon, Runtime& relay, Runtime& sender, Gid s, Gid r, uint64_t seq,
                       Tag tag, const std::vector<std::byte>& bytes) {
  const Gid forger = Gid::Process(s.host_index(), Gid::kMaxProcess - 4);
  runtime::MulticastRequest request{
      .id = 1000,  // not the sender's: its answer is ignored there
      .source = s,
      .reply_to = Gid::Thread(sender.gid(), runtime::kFirstInternalThread),
      .tag = tag,
      .wait_ms = 200,
      .payload = bytes};
  const std::vector<runtime::MulticastGroup> groups{
      runtime::MulticastGroup{relay.gid(), {{r, seq}}}};
  const std::vector<std::byte> encoded = runtime::EncodeMulticastRequest(request, groups);
  auto client = REQUIRE_VALUE(daemon.Connect());
  const std::string endpoint = REQUIRE_VALUE(TcpEndpointOf(*client, relay.gid()));
  RawConnection raw = REQUIRE_VALUE(RawConnection::Open(endpoint));
  REQUIRE_OK(raw.Handshake(forger, relay.gid()));
  const uint64_t answers = FramesReceived(sender);
  REQUIRE(raw.Write(Frames()
                        .Add(Message(runtime::RelayOf(forger), runtime::RelayOf(relay.gid()),
                                     runtime::kMulticastRequestTag, encoded.size()),
                             encoded)
                        .bytes()) == RawConnection::Written::kAll);
  const auto deadline = steady_clock::now() + seconds(20);
  while (FramesReceived(sender) == answers && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  REQUIRE(FramesReceived(sender) > answers);
}

// Three processes under one daemon: a relay (thread q) that is the lowest
// receiving process, a receiver (thread r) that has seen nothing of the
// sender (thread s), so s's next message to r takes number 0 of the pair.
struct DeputyCast {
  explicit DeputyCast(const std::string& name) {
    REQUIRE_OK(daemon.Start());
    relay = REQUIRE_VALUE(StartRuntime(daemon, name + "-relay", "shm,tcp"));
    q = REQUIRE_VALUE(relay->EnrollThread("q"));
    receiver = REQUIRE_VALUE(StartRuntime(daemon, name + "-receiver"));
    r = REQUIRE_VALUE(receiver->EnrollThread("r"));
    sender = REQUIRE_VALUE(StartRuntime(daemon, name + "-sender"));
    s = REQUIRE_VALUE(sender->EnrollThread("s"));
    REQUIRE(relay->gid() < receiver->gid());
  }

  Daemon daemon;
  std::unique_ptr<Runtime> relay, receiver, sender;
  Gid q, r, s;
};

TEST_CASE(
    "a relay asked by a third process to carry bytes in a sender's name: its receiver gets the "
    "sender's own message, not those bytes",
    "[integration][msg][tcp][multicast]") {
  // The multicast takes number 0 of (s, r).
  DeputyCast cast("deputy");
  auto& [daemon, relay, receiver, sender, q, r, s] = cast;
  const std::vector<std::byte> real = PatternBytes(300, 31);
  const std::vector<std::byte> forged = PatternBytes(300, 97);  // same size and tag
  constexpr Tag kTag = 12;

  // A forged request for (s, r, 0), with its own bytes and no nonce: the
  // relay refuses it (no ticket), r never sees it.
  ForgeRelayRequest(daemon, *relay, *sender, s, r, 0, kTag, forged);
  CHECK(receiver->TryRecv(r, s, kTag).status().code() == StatusCode::kTryAgain);

  // The real multicast, through the same relay.
  const std::vector<Gid> to{q, r};
  auto result = REQUIRE_VALUE(sender->Multicast(s, to, kTag, real, {.relay_local = true}));
  for (const MulticastOutcome& outcome : result.receivers) {
    INFO(outcome.receiver.ToString() << ": " << outcome.status.ToString());
    CHECK(outcome.status.ok());
  }
  Buffer got = REQUIRE_VALUE(receiver->RecvFor(r, seconds(20), s, kTag));
  CHECK(std::vector<std::byte>(got.span().begin(), got.span().end()) == real);
  Buffer at_relay = REQUIRE_VALUE(relay->RecvFor(q, seconds(20), s, kTag));
  CHECK(std::vector<std::byte>(at_relay.span().begin(), at_relay.span().end()) == real);
  // The relay is not cut off from r: the next multicast comes through it.
  auto again =
      REQUIRE_VALUE(sender->Multicast(s, to, kTag, PatternBytes(40, 5), {.relay_local = true}));
  CHECK(again.all_delivered());
  Buffer next = REQUIRE_VALUE(receiver->RecvFor(r, seconds(20), s, kTag));
  CHECK(next.size() == 40);
  CHECK(receiver->TryRecv(r, s, kTag).status().code() == StatusCode::kTryAgain);
}

TEST_CASE(
    "a relay asked by a third process to carry a fill for a plain message's number is not cut off: "
    "the sender's message, a multicast through it and its own message all arrive",
    "[integration][msg][tcp][multicast]") {
  // Review 3 item 1: number 0 of (s, r) is s's plain Send; the relay
  // refuses to carry the forged fill for it (no ticket from s's process).
  DeputyCast cast("plain");
  auto& [daemon, relay, receiver, sender, q, r, s] = cast;
  constexpr Tag kTag = 13;
  ForgeRelayRequest(daemon, *relay, *sender, s, r, 0, kTag, PatternBytes(300, 97));
  CHECK(receiver->TryRecv(r, s, kTag).status().code() == StatusCode::kTryAgain);

  const std::vector<std::byte> plain = PatternBytes(200, 3);
  REQUIRE_OK(sender->Send(s, r, kTag, plain));
  const std::vector<std::byte> multicast = PatternBytes(250, 4);
  const std::vector<Gid> to{q, r};
  auto result = REQUIRE_VALUE(sender->Multicast(s, to, kTag, multicast, {.relay_local = true}));
  for (const MulticastOutcome& outcome : result.receivers) {
    INFO(outcome.receiver.ToString() << ": " << outcome.status.ToString());
    CHECK(outcome.status.ok());
    if (outcome.receiver == r) CHECK(outcome.carried_by == relay->gid());
  }
  const std::vector<std::byte> own = PatternBytes(150, 5);
  REQUIRE_OK(relay->Send(q, r, kTag, own));

  auto bytes_of = [](const Buffer& buffer) {
    return std::vector<std::byte>(buffer.span().begin(), buffer.span().end());
  };
  CHECK(bytes_of(REQUIRE_VALUE(receiver->RecvFor(r, seconds(20), s, kTag))) == plain);
  CHECK(bytes_of(REQUIRE_VALUE(receiver->RecvFor(r, seconds(20), s, kTag))) == multicast);
  CHECK(bytes_of(REQUIRE_VALUE(receiver->RecvFor(r, seconds(20), q, kTag))) == own);
  CHECK(bytes_of(REQUIRE_VALUE(relay->RecvFor(q, seconds(20), s, kTag))) == multicast);
  CHECK(receiver->TryRecv(r, s, kTag).status().code() == StatusCode::kTryAgain);
}

}  // namespace
}  // namespace tocl::testing
