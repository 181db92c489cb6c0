// What Send, GetBuffer and Runtime::Start say when they cannot do what is
// asked: unknown destinations, threads that left, processes that exited,
// oversized buffers, the wildcard tag, no daemon, bad options.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

bool IsDestinationError(StatusCode code) {
  return code == StatusCode::kNotFound || code == StatusCode::kFailedPrecondition ||
         code == StatusCode::kUnavailable;
}

// Sends to `to` until a send is refused (-> that status) or a buffer sent
// by lvalue ends kFailed (-> FailedPrecondition "buffer failed"), for up to
// `timeout`. Ok when every send went through.
Status SendUntilRefused(Runtime& runtime, Gid from, Gid to, milliseconds timeout) {
  Status outcome = Status::Ok();
  WaitUntil(
      [&] {
        auto buffer = runtime.GetBuffer(4);
        if (!buffer.ok()) {
          outcome = buffer.status();
          return true;
        }
        REQUIRE(buffer->resize(4));
        Status sent = runtime.Send(from, to, 1, *buffer);
        if (!sent.ok()) {
          outcome = sent;
          return true;
        }
        // The buffer settles within the connect timeout at most.
        if (!WaitUntil(
                [&] {
                  return buffer->state() == BufferState::kSent ||
                         buffer->state() == BufferState::kFailed;
                },
                seconds(15))) {
          outcome = Internal(fmt::format("a buffer sent to {} is still {} after 15 s",
                                         to.ToString(), BufferStateName(buffer->state())));
          return true;
        }
        if (buffer->state() == BufferState::kFailed) {
          outcome = FailedPrecondition("buffer failed");
          return true;
        }
        return false;
      },
      timeout, milliseconds(50));
  return outcome;
}

TEST_CASE("Send to a thread of a process that does not exist is NotFound", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "lonely");
  options.connect_timeout = milliseconds(2000);
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  const Gid nobody = Gid::Thread(Gid::Process(me.host_index(), me.process_index() + 1000), 1);
  auto start = steady_clock::now();
  Status sent = runtime->Send(me, nobody, 1, Bytes("anyone?"));
  INFO("Send -> " << sent.ToString() << " after "
                  << std::chrono::duration_cast<milliseconds>(steady_clock::now() - start).count()
                  << " ms");
  CHECK(sent.code() == StatusCode::kNotFound);
  CHECK(steady_clock::now() - start < options.connect_timeout + seconds(5));
  // The runtime is fine afterwards: a message to itself arrives.
  REQUIRE_OK(runtime->Send(me, me, 2, Bytes("still here")));
  CHECK(Text(REQUIRE_VALUE(runtime->RecvFor(me, seconds(10)))) == "still here");
}

TEST_CASE(
    "Send to a host that is not in the cluster is NotFound at once, not after connect_timeout",
    "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "far-reaching");
  options.connect_timeout = seconds(30);
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));

  const Gid nowhere = Gid::Thread(Gid::Process(9, 1), 1);  // h9.p1.t1: only h1 exists
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto start = steady_clock::now();
    Status sent = runtime->Send(me, nowhere, 1, Bytes("hello?"));
    const auto elapsed = steady_clock::now() - start;
    INFO("Send -> " << sent.ToString() << " after "
                    << std::chrono::duration_cast<milliseconds>(elapsed).count() << " ms");
    CHECK(sent.code() == StatusCode::kNotFound);
    CHECK_THAT(sent.message(), Catch::Contains("no host h9 in the cluster"));
    // A correctness bound, far below the 30 s the send could wait for.
    CHECK(elapsed < seconds(1));
  }
  // A process of this host that does not exist is still NotFound at once too.
  CHECK(runtime->Send(me, Gid::Thread(Gid::Process(1, 999), 1), 1, Bytes("x")).code() ==
        StatusCode::kNotFound);
  // The runtime is fine afterwards.
  REQUIRE_OK(runtime->Send(me, me, 2, Bytes("still here")));
  CHECK(Text(REQUIRE_VALUE(runtime->RecvFor(me, seconds(10)))) == "still here");
}

TEST_CASE("Send to a thread that never enrolled in a live process fails", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto a = REQUIRE_VALUE(StartRuntime(daemon, "a"));
  auto b = REQUIRE_VALUE(StartRuntime(daemon, "b"));
  const Gid a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
  const Gid b1 = REQUIRE_VALUE(b->EnrollThread("b1"));
  REQUIRE_OK(a->Send(a1, b1, 1, Bytes("warm up")));
  REQUIRE_OK(b->RecvFor(b1, seconds(10)));

  const Gid ghost = Gid::Thread(b->gid(), 4000);
  Status refused = SendUntilRefused(*a, a1, ghost, seconds(20));
  INFO("sending to " << ghost.ToString() << " -> " << refused.ToString());
  CHECK(IsDestinationError(refused.code()));
}

TEST_CASE("Send to a thread that left fails", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto a = REQUIRE_VALUE(StartRuntime(daemon, "a"));
  auto b = REQUIRE_VALUE(StartRuntime(daemon, "b"));
  const Gid a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
  const Gid b1 = REQUIRE_VALUE(b->EnrollThread("b1"));
  const Gid b2 = REQUIRE_VALUE(b->EnrollThread("b2"));
  // A connection exists and both threads are known before one leaves.
  REQUIRE_OK(a->Send(a1, b1, 1, Bytes("one")));
  REQUIRE_OK(a->Send(a1, b2, 1, Bytes("two")));
  REQUIRE_OK(b->RecvFor(b1, seconds(10)));
  REQUIRE_OK(b->RecvFor(b2, seconds(10)));

  REQUIRE_OK(b->LeaveThread(b2));
  Status refused = SendUntilRefused(*a, a1, b2, seconds(20));
  INFO("sending to " << b2.ToString() << " after it left -> " << refused.ToString());
  CHECK(IsDestinationError(refused.code()));
  // Within its own process too.
  Status local = SendUntilRefused(*b, b1, b2, seconds(20));
  INFO("from " << b1.ToString() << " -> " << local.ToString());
  CHECK(IsDestinationError(local.code()));
  // The thread that stayed still gets messages.
  REQUIRE_OK(a->Send(a1, b1, 1, Bytes("three")));
  CHECK(Text(REQUIRE_VALUE(b->RecvFor(b1, seconds(10)))) == "three");
  // The directory knows it left.
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil(
      [&] {
        auto entity = client->Lookup(b2);
        return !entity.ok() || entity->state == EntityState::kExited;
      },
      seconds(10)));
}

TEST_CASE("Send to a process that exited fails", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto a = REQUIRE_VALUE(StartRuntime(daemon, "a"));
  auto b = REQUIRE_VALUE(StartRuntime(daemon, "b"));
  const Gid a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
  const Gid b1 = REQUIRE_VALUE(b->EnrollThread("b1"));
  REQUIRE_OK(a->Send(a1, b1, 1, Bytes("hello")));
  REQUIRE_OK(b->RecvFor(b1, seconds(10)));

  REQUIRE_OK(b->Shutdown());
  CHECK_OK(b->Shutdown());  // idempotent
  b.reset();
  Status refused = SendUntilRefused(*a, a1, b1, seconds(30));
  INFO("sending to " << b1.ToString() << " of an exited process -> " << refused.ToString());
  CHECK(IsDestinationError(refused.code()));
}

TEST_CASE("a buffer over the short maximum is InvalidArgument, and a span is a long message",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  RuntimeOptions options = RuntimeOptionsFor(daemon, "small");
  options.short_max = 4096;
  auto runtime = REQUIRE_VALUE(StartRuntime(options));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  const size_t max = runtime->short_max_payload();
  REQUIRE(max < 4096);
  REQUIRE(max > 2048);

  CHECK(runtime->GetBuffer(max + 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(runtime->GetBuffer(size_t{1} << 40).status().code() == StatusCode::kInvalidArgument);
  // Send from user memory takes any size: over the maximum it is a long
  // message (fragments), received whole.
  std::vector<std::byte> long_message(max + 1, std::byte{0x33});
  REQUIRE_OK(runtime->Send(me, me, 2, std::span<const std::byte>(long_message)));
  Buffer whole = REQUIRE_VALUE(runtime->RecvFor(me, seconds(10), me, 2));
  CHECK(whole.size() == max + 1);
  CHECK(std::to_integer<int>(whole.data()[max]) == 0x33);
  // The largest one is fine.
  Buffer largest = REQUIRE_VALUE(runtime->GetBuffer(max));
  REQUIRE(largest.resize(max));
  std::memset(largest.data(), 0x5a, max);
  REQUIRE_OK(runtime->Send(me, me, 1, std::move(largest)));
  Buffer got = REQUIRE_VALUE(runtime->RecvFor(me, seconds(10)));
  CHECK(got.size() == max);
  CHECK(std::to_integer<int>(got.data()[max - 1]) == 0x5a);
  CHECK(runtime->TryRecv(me).status().code() == StatusCode::kTryAgain);
}

TEST_CASE("bad sends are InvalidArgument: the wildcard tag, foreign or non-thread ids, no buffer",
          "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto a = REQUIRE_VALUE(StartRuntime(daemon, "a"));
  auto b = REQUIRE_VALUE(StartRuntime(daemon, "b"));
  const Gid a1 = REQUIRE_VALUE(a->EnrollThread("a1"));
  const Gid b1 = REQUIRE_VALUE(b->EnrollThread("b1"));

  CHECK(a->Send(a1, b1, kAnyTag, Bytes("x")).code() == StatusCode::kInvalidArgument);
  Buffer buffer = REQUIRE_VALUE(a->GetBuffer(1));
  REQUIRE(buffer.resize(1));
  CHECK(a->Send(a1, b1, kAnyTag, buffer).code() == StatusCode::kInvalidArgument);
  CHECK(buffer.valid());
  CHECK(buffer.state() == BufferState::kIdle);
  // Not sent, and the message is not there either.
  CHECK(b->RecvFor(b1, milliseconds(200)).status().code() == StatusCode::kDeadlineExceeded);

  // `from` must be a thread of this runtime.
  CHECK(a->Send(b1, a1, 1, Bytes("x")).code() == StatusCode::kInvalidArgument);
  CHECK(a->Send(a->gid(), b1, 1, Bytes("x")).code() == StatusCode::kInvalidArgument);
  CHECK(a->Send(Gid(), b1, 1, Bytes("x")).code() == StatusCode::kInvalidArgument);
  // `to` must be a thread.
  for (Gid to : {Gid(), b->gid(), b1.host()}) {
    INFO("to " << to.ToString());
    CHECK(a->Send(a1, to, 1, Bytes("x")).code() == StatusCode::kInvalidArgument);
  }
  // An empty handle is no buffer.
  Buffer empty;
  CHECK(a->Send(a1, b1, 1, empty).code() == StatusCode::kInvalidArgument);
  CHECK(a->Send(a1, b1, 1, Buffer()).code() == StatusCode::kInvalidArgument);
  // Tag kAnyTag - 1 is an ordinary tag.
  REQUIRE_OK(a->Send(a1, b1, kAnyTag - 1, Bytes("largest tag")));
  Buffer got = REQUIRE_VALUE(b->RecvFor(b1, seconds(10), a1, kAnyTag - 1));
  CHECK(Text(got) == "largest tag");
}

TEST_CASE("Runtime::Start without a daemon is Unavailable and names the address",
          "[integration][msg]") {
  TempDir dir("tocl-no-daemon-");
  RuntimeOptions options;
  options.daemon_address = "unix:" + dir.path() + "/nobody.sock";
  options.name = "hopeful";
  auto start = steady_clock::now();
  auto runtime = Runtime::Start(options);
  auto elapsed = steady_clock::now() - start;
  REQUIRE_FALSE(runtime.ok());
  INFO(runtime.status().ToString());
  CHECK(runtime.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(runtime.status().message(), Catch::Contains("nobody.sock"));
  CHECK(elapsed < seconds(30));
  // No shm segment is left behind by the attempt.
  CHECK(ShmSegmentsOf(::getpid()).empty());
}

TEST_CASE(
    "Runtime::Start against a TCP port where nothing listens fails at once, without TLS advice",
    "[integration][msg]") {
  // A bound socket that does not listen keeps the port ours: a connection
  // to it is refused.
  const int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(holder >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const std::string target = fmt::format("127.0.0.1:{}", ntohs(address.sin_port));

  RuntimeOptions options;
  options.daemon_address = target;
  options.name = "hopeful";
  const auto start = steady_clock::now();
  auto runtime = Runtime::Start(options);
  const auto elapsed = steady_clock::now() - start;
  ::close(holder);
  REQUIRE_FALSE(runtime.ok());
  INFO(runtime.status().ToString()
       << " after " << std::chrono::duration_cast<milliseconds>(elapsed).count() << " ms");
  CHECK(runtime.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(runtime.status().message(), Catch::Contains(target));
  CHECK_THAT(runtime.status().message(), Catch::Contains("connection refused"));
  CHECK_THAT(runtime.status().message(),
             !Catch::Contains("TLS") && !Catch::Contains("credentials"));
  // The connect timeout is 5 s; a refusal is known after one round trip.
  CHECK(elapsed < milliseconds(2500));
}

TEST_CASE("Runtime::Start with a malformed daemon address is InvalidArgument saying what is wrong",
          "[integration][msg]") {
  struct Bad {
    std::string address;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {"tcp:", "the port '' is not a number"},
      {"host:notaport", "the port 'notaport' is not a number"},
      {"127.0.0.1:70000", "the port '70000' is not a number from 1 to 65535"},
      {"127.0.0.1:0", "the port '0'"},
      {"localhost", "no port"},
      {":7390", "no host"},
      {"unix:", "has no path"},
      {"unix://", "has no path"},
      {"no such place:7390", "'no such place' is not a host name"},
      {"::1:7390", "[::1]:7390"},
      {"[not-v6]:7390", "[not-v6] is not an IPv6 address"},
  };
  for (const Bad& bad : cases) {
    RuntimeOptions options;
    options.daemon_address = bad.address;
    options.name = "typo";
    const auto start = steady_clock::now();
    auto runtime = Runtime::Start(options);
    INFO(bad.address << " -> " << runtime.status().ToString());
    CHECK(runtime.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(runtime.status().message(), Catch::Contains(bad.says));
    CHECK_THAT(runtime.status().message(), Catch::Contains("'" + bad.address + "'"));
    CHECK(steady_clock::now() - start < seconds(1));
  }
  // Well-formed ones get as far as connecting (nothing answers there).
  for (std::string good : {"unix:/nonexistent/toclsd.sock", "/nonexistent/toclsd.sock"}) {
    RuntimeOptions options;
    options.daemon_address = good;
    auto runtime = Runtime::Start(options);
    INFO(good << " -> " << runtime.status().ToString());
    CHECK(runtime.status().code() == StatusCode::kUnavailable);
  }
}

TEST_CASE("Runtime::Start rejects bad options with InvalidArgument", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  struct Bad {
    std::string what;
    std::function<void(RuntimeOptions&)> change;
  };
  const std::vector<Bad> cases = {
      {"short_max not a power of two", [](RuntimeOptions& o) { o.short_max = 5000; }},
      {"short_max below 256 B", [](RuntimeOptions& o) { o.short_max = 128; }},
      {"short_max above 1 MiB", [](RuntimeOptions& o) { o.short_max = size_t{2} << 20; }},
      {"an unknown subsystem", [](RuntimeOptions& o) { o.subsystems = "carrier-pigeon"; }},
      {"a subsystem list with nothing in it", [](RuntimeOptions& o) { o.subsystems = ","; }},
  };
  for (const Bad& bad : cases) {
    INFO(bad.what);
    RuntimeOptions options = RuntimeOptionsFor(daemon, "bad");
    bad.change(options);
    auto runtime = Runtime::Start(options);
    INFO(runtime.status().ToString());
    CHECK(runtime.status().code() == StatusCode::kInvalidArgument);
  }
  // Nothing was left enrolled by the refused starts.
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil(
      [&] {
        auto running = client->QueryAll("kind=process and state=running");
        return running.ok() && running->empty();
      },
      seconds(10)));
}

TEST_CASE("after Shutdown, sends and receives fail instead of hanging", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "closing"));
  const Gid me = REQUIRE_VALUE(runtime->EnrollThread("me"));
  REQUIRE_OK(runtime->Shutdown());
  CHECK_FALSE(runtime->Send(me, me, 1, Bytes("x")).ok());
  CHECK_FALSE(runtime->RecvFor(me, seconds(1)).ok());
  CHECK_FALSE(runtime->EnrollThread("late").ok());
  CHECK_OK(runtime->Shutdown());
  auto client = REQUIRE_VALUE(daemon.Connect());
  CHECK(WaitUntil(
      [&] {
        auto entity = client->Lookup(runtime->gid());
        return entity.ok() && entity->state == EntityState::kExited;
      },
      seconds(10)));
}

TEST_CASE("Shutdown and LeaveThread wake receivers that wait", "[integration][msg]") {
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "waking"));
  const Gid leaving = REQUIRE_VALUE(runtime->EnrollThread("leaving"));
  const Gid staying = REQUIRE_VALUE(runtime->EnrollThread("staying"));

  struct Waiter {
    std::atomic<bool> started{false};
    Status outcome = Internal("not returned");
    steady_clock::duration waited{};
  };
  auto wait_in = [&](Waiter& waiter, Gid self, bool probe) {
    return std::jthread([&waiter, &runtime, self, probe] {
      waiter.started = true;
      const auto start = steady_clock::now();
      waiter.outcome = probe ? runtime->Probe(self, seconds(60)).status()
                             : runtime->RecvFor(self, seconds(60)).status();
      waiter.waited = steady_clock::now() - start;
    });
  };
  Waiter left_recv, left_probe, shut_recv;
  {
    std::jthread a = wait_in(left_recv, leaving, false);
    std::jthread b = wait_in(left_probe, leaving, true);
    REQUIRE(WaitUntil([&] { return left_recv.started && left_probe.started; }, seconds(5)));
    REQUIRE_OK(runtime->LeaveThread(leaving));
  }
  for (Waiter* waiter : {&left_recv, &left_probe}) {
    INFO("waiting on a thread that left -> " << waiter->outcome.ToString());
    CHECK_FALSE(waiter->outcome.ok());
    CHECK(waiter->waited < seconds(30));
  }
  {
    std::jthread c = wait_in(shut_recv, staying, false);
    REQUIRE(WaitUntil([&] { return shut_recv.started.load(); }, seconds(5)));
    REQUIRE_OK(runtime->Shutdown());
  }
  INFO("waiting through Shutdown -> " << shut_recv.outcome.ToString());
  CHECK_FALSE(shut_recv.outcome.ok());
  CHECK(shut_recv.waited < seconds(30));
}

}  // namespace
}  // namespace tocl::testing
