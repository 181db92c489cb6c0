// tocl-stream-ledger: a stream of numbered messages between two processes
// that records, message by message, what the library promised about it, so
// that a test can hold the library to runtime.h's promise: a message is
// received exactly once, or its sender was told it failed.
//
//   tocl-stream-ledger --daemon unix:/tmp/x/toclsd.sock --role receive --name r --threads 4
//   tocl-stream-ledger --daemon ... --role send --name s --threads 4
//                      --to h1.p4.t1 --to h1.p4.t2 ... [--rate 2000] [--long-every 10]
//
// The networks come from $TOCL_NETWORKS. Both roles print
//   process h1.p5 / thread h1.p5.t1 (one per thread) / ready
// on stdout, then:
//
// send: sending thread i streams to --to thread i (one thread pair each):
// message seq 0, 1, 2 ... with a checksummed payload (messaging_payload.h)
// stamped with the steady clock's time at its Send. Even seqs go in a
// Buffer sent by lvalue (a ring of 32 per thread) whose state() is watched
// until it is final; odd seqs are copied from the thread's memory (Send of
// a span: ok is the promise); with --long-every K every K-th message is a
// long one (--long-size bytes, a span). Full speed, or --rate messages/s for
// the whole process. Prints "streaming" once every thread has sent, then
// "progress sent= ok= failed=" lines, until SIGUSR1: then it waits (up to
// --settle-ms) for every watched buffer to reach kSent or kFailed and prints
//   done sent=N ok=N failed=N send_errors=N state_failed=N unresolved=N ms=N
//   ledger from=G to=G ok=RANGES failed=RANGES unresolved=RANGES   (per pair)
//   failure from=G to=G seq=N how=...                              (the first few)
// where ok means Send returned ok and, for a buffer, its state became
// kSent; failed means Send returned an error or the state became kFailed;
// unresolved means a buffer still queued or in flight at the deadline. It
// keeps its runtime (and so the stream's tail) alive until stdin closes.
//
// receive: every thread receives until stdin closes and checks each
// message: tag, checksum, sender, exactly once and in order per thread pair
// (gaps are allowed: the sender may have been told those failed). Prints
// "progress received=N caught_up_ns=T" (T: every receiving thread has a
// message stamped at or after T), and when stdin closes
//   received from=G to=G seqs=RANGES duplicates=N reordered=N     (per pair)
//   resume kill_ns=K us=N|none                                     (per --kills line)
//   done received=N duplicates=N reordered=N corrupt=N errors=N
// The resume time after a kill at K (the steady clock, ns, one per line of
// the --kills file, read when stdin closes) is when every pair had received
// a message sent after K, minus K.
//
// Exit codes: 0 (the ledger says what happened), 1 an unexpected error,
// 2 usage, 4 the runtime did not start. The roles are in
// stream_ledger_send.cc and stream_ledger_receive.cc; this file is the
// process (the runtime, the threads, the stop signal).
#include "stream_ledger.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "messaging_payload.h"
#include "stdin_watch.h"
#include "tocl/runtime.h"

namespace tocl::testing {

void Say(const std::string& line) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

}  // namespace tocl::testing

namespace {

using tocl::Gid;
using tocl::testing::kStampedPayloadBytes;
using tocl::testing::LedgerOptions;
using tocl::testing::Say;
using tocl::testing::StdinWatch;

// SIGUSR1 (blocked in every thread, taken by sigtimedwait here) sets `stop`.
void WatchStopSignal(std::stop_token token, std::atomic<bool>& stop) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  const timespec tick{0, 50'000'000};
  while (!token.stop_requested()) {
    if (sigtimedwait(&set, nullptr, &tick) == SIGUSR1) stop = true;
  }
}

int Run(const LedgerOptions& options) {
  // Before any thread starts, so that every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  StdinWatch stdin_watch;
  stdin_watch.Start();
  tocl::RuntimeOptions runtime_options;
  runtime_options.daemon_address = options.daemon;
  runtime_options.name = options.name;
  auto started = tocl::Runtime::Start(runtime_options);
  if (!started.ok()) {
    Say("start-failed " + started.status().ToString());
    return 4;
  }
  std::unique_ptr<tocl::Runtime> runtime = std::move(*started);
  Say("process " + runtime->gid().ToString());
  std::vector<Gid> threads;
  for (uint32_t i = 0; i < options.threads; ++i) {
    auto thread = runtime->EnrollThread(fmt::format("{}-{}", options.name, i));
    if (!thread.ok()) {
      Say("error enroll: " + thread.status().ToString());
      return 1;
    }
    threads.push_back(*thread);
    Say("thread " + thread->ToString());
  }
  Say("ready");

  bool ok = true;
  if (options.role == "send") {
    std::vector<Gid> peers;
    for (const std::string& text : options.to) {
      auto peer = Gid::Parse(text);
      if (!peer.ok()) {
        Say("error --to " + peer.status().ToString());
        return 2;
      }
      peers.push_back(*peer);
    }
    if (peers.size() != threads.size()) {
      Say(fmt::format("error {} --to threads for {} sending threads", peers.size(),
                      threads.size()));
      return 2;
    }
    std::atomic<bool> stop{false};
    {
      std::jthread signals([&stop](std::stop_token token) { WatchStopSignal(token, stop); });
      tocl::testing::StreamWithLedger(options, *runtime, threads, std::move(peers), stop);
    }
    stdin_watch.Wait();
  } else {
    ok = tocl::testing::ReceiveWithRecord(*runtime, threads, stdin_watch, options.kills);
  }

  if (tocl::Status shutdown = runtime->Shutdown(); !shutdown.ok()) {
    fmt::print(stderr, "tocl-stream-ledger: shutdown: {}\n", shutdown.ToString());
  }
  runtime.reset();
  Say("exiting");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  LedgerOptions options;
  CLI::App app{
      "A numbered stream between two tocl processes, with the ledger of what was "
      "promised about each message."};
  app.add_option("--daemon", options.daemon, "daemon address (unix:/path or host:port)")
      ->required();
  app.add_option("--role", options.role, "send or receive")
      ->required()
      ->check(CLI::IsMember({"send", "receive"}));
  app.add_option("--name", options.name, "process name");
  app.add_option("--threads", options.threads, "threads to enroll")->check(CLI::Range(1u, 256u));
  app.add_option("--to", options.to, "send: the receiving thread of each sending thread");
  app.add_option("--rate", options.rate, "send: messages/s of the process (0: full speed)");
  app.add_option("--long-every", options.long_every,
                 "send: every K-th message is long (0: short only)");
  app.add_option("--long-size", options.long_size, "send: bytes of a long message")
      ->check(CLI::Range(kStampedPayloadBytes, size_t{64} << 20));
  app.add_option("--short-size", options.short_size, "send: the largest short message")
      ->check(CLI::Range(kStampedPayloadBytes, size_t{60000}));
  app.add_option("--settle-ms", options.settle_ms,
                 "send: how long to wait for buffers to reach kSent or kFailed");
  app.add_option("--kills", options.kills,
                 "receive: a file of kill times (steady ns), read when stdin closes");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? 0 : 2;
  }
  return Run(options);
}
