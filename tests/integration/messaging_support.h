// What the messaging integration tests share: tocl-msg-worker processes
// (helpers/msg_worker.cc), runtimes in the test process, message counts
// scaled to the build, and the shm segments a process leaves in /dev/shm.
//
//   Daemon daemon;
//   REQUIRE_OK(daemon.Start());
//   MsgWorker echo = REQUIRE_VALUE(MsgWorker::Start(daemon, MsgWorkerArgs("echo", "e")));
//   auto runtime = REQUIRE_VALUE(StartRuntime(daemon, "tester"));
//   ... send to echo.threads()[0] ...
//   CHECK(echo.Finish(seconds(10)).value_or(-1) == 0);  // closes stdin, waits
//
// Threading: like ChildProcess, a MsgWorker belongs to the test's main
// thread; its const accessors may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon_harness.h"
#include "tocl/runtime.h"

namespace tocl::testing {

const char* MsgWorkerPath();

// True in the asan and tsan builds (and when TOCL_TEST_SANITIZED is set in
// the environment): they run several times slower, so the big message
// counts are scaled down there.
bool SanitizedBuild();
// `normal` in plain builds, `sanitized` under sanitizers; the environment
// variable TOCL_TEST_MESSAGES overrides both.
uint64_t MessageCount(uint64_t normal, uint64_t sanitized);

// Options of one tocl-msg-worker (see helpers/msg_worker.cc for the roles):
//   MsgWorkerArgs("stream", "a").Subsystems("shm").Threads(64).Peer("b", 64).Count(1000)
struct MsgWorkerArgs {
  MsgWorkerArgs(std::string role_, std::string name_)
      : role(std::move(role_)), name(std::move(name_)) {}

  MsgWorkerArgs& Subsystems(std::string value) { return Set(subsystems, std::move(value)); }
  MsgWorkerArgs& Threads(uint32_t value) { return Set(threads, value); }
  // The peer process (by name) and how many threads it will have.
  MsgWorkerArgs& Peer(std::string peer, uint32_t threads_of_peer) {
    peer_name = std::move(peer);
    return Set(peer_threads, threads_of_peer);
  }
  MsgWorkerArgs& To(std::vector<Gid> value) { return Set(to, std::move(value)); }
  MsgWorkerArgs& Count(uint64_t value) { return Set(count, value); }
  MsgWorkerArgs& Size(size_t value) { return Set(size, value); }
  MsgWorkerArgs& RandomSize() { return Set(random_size, true); }
  MsgWorkerArgs& WithTag(uint32_t value) { return Set(tag, value); }
  MsgWorkerArgs& UnexpectedCap(size_t value) { return Set(unexpected_cap, value); }
  MsgWorkerArgs& SendQueueDepth(size_t value) { return Set(send_queue_depth, value); }
  MsgWorkerArgs& DurationMs(uint32_t value) { return Set(duration_ms, value); }
  MsgWorkerArgs& Track() { return Set(track, true); }
  MsgWorkerArgs& Copy() { return Set(copy, true); }
  MsgWorkerArgs& Pairwise() { return Set(pairwise, true); }
  MsgWorkerArgs& Linger() { return Set(linger, true); }
  // source, stamp: message `index` (0: the first) waits for stdin to close.
  MsgWorkerArgs& PauseBefore(uint64_t index) {
    return Set(pause_before, std::optional<uint64_t>(index));
  }
  MsgWorkerArgs& KillSelf() { return Set(kill_self, true); }

  std::string role;
  std::string name;
  std::string subsystems;  // empty: the runtime's default
  uint32_t threads = 1;
  std::string peer_name;
  uint32_t peer_threads = 1;
  std::vector<Gid> to;
  uint64_t count = 0;
  size_t size = 64;
  bool random_size = false;
  uint32_t tag = 1;
  size_t unexpected_cap = 0;
  size_t send_queue_depth = 0;
  uint32_t duration_ms = 0;
  bool track = false;
  bool copy = false;
  bool pairwise = false;
  bool linger = false;
  std::optional<uint64_t> pause_before;
  bool kill_self = false;
  std::vector<std::string> extra;

 private:
  template <typename T>
  MsgWorkerArgs& Set(T& field, T value) {
    field = std::move(value);
    return *this;
  }
};

std::vector<std::string> MsgWorkerCommand(const std::string& daemon_address,
                                          const MsgWorkerArgs& args);

// A running tocl-msg-worker with a stdin pipe (closing it is the "stop" or
// "exit now" signal).
class MsgWorker {
 public:
  // Spawns the worker and waits until it has printed "ready" (its process
  // and thread gids are then known). On failure, the message has the
  // worker's output.
  static Result<MsgWorker> Start(
      const Daemon& daemon, const MsgWorkerArgs& args,
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(30));
  // The same for any helper that prints the worker's "process", "thread"
  // and "ready" lines (tocl-stream-ledger): `argv` in full, `env` on top of
  // ours ("NAME=value"), `threads` the thread lines expected.
  static Result<MsgWorker> Launch(
      const std::vector<std::string>& argv, uint32_t threads, std::vector<std::string> env = {},
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(30));

  Gid process() const { return process_; }
  const std::vector<Gid>& threads() const { return threads_; }
  pid_t pid() const { return child_.pid(); }
  ChildProcess& child() { return child_; }
  std::string Output() const { return child_.Output(); }

  // The number after "key=" on the last line starting with `prefix`
  // ("progress", "done"); nullopt before there is one.
  std::optional<uint64_t> LastValue(std::string_view prefix, std::string_view key) const;
  // The rest of the first line starting with `prefix` and a space.
  std::optional<std::string> Line(std::string_view prefix) const;
  // Waits until a line starting with `prefix` appears, or the worker exits.
  bool WaitForLine(std::string_view prefix, std::chrono::milliseconds timeout) const;
  // Waits until LastValue(prefix, key) >= value.
  bool WaitForValue(std::string_view prefix, std::string_view key, uint64_t value,
                    std::chrono::milliseconds timeout) const;

  // Closes stdin and waits for the worker to exit: its exit code.
  Result<int> Finish(std::chrono::milliseconds timeout);

 private:
  explicit MsgWorker(ChildProcess child) : child_(std::move(child)) {}

  ChildProcess child_;
  Gid process_;
  std::vector<Gid> threads_;
};

// RuntimeOptions for a runtime in the test process enrolled with `daemon`.
RuntimeOptions RuntimeOptionsFor(const Daemon& daemon, std::string name,
                                 std::string subsystems = {});
Result<std::unique_ptr<Runtime>> StartRuntime(const Daemon& daemon, std::string name,
                                              std::string subsystems = {});
Result<std::unique_ptr<Runtime>> StartRuntime(RuntimeOptions options);

// Two runtimes in the test process over `subsystems` (empty: the
// default), each with one enrolled thread: "<name>-receiver" with thread r
// and "<name>-sender" with thread s.
struct RuntimePair {
  std::unique_ptr<Runtime> receiver, sender;
  Gid r, s;
};
Result<RuntimePair> StartRuntimePair(const Daemon& daemon, const std::string& name,
                                     std::string subsystems = {});

// Frames received by `runtime`'s networks so far (a test waits for a frame
// it sent by hand to be there).
uint64_t FramesReceived(const Runtime& runtime);

// `size` bytes that differ at every offset (a misplaced fragment shows),
// different for each seed.
std::vector<std::byte> PatternBytes(size_t size, uint32_t seed);

// The payload bytes of a string, for Send.
inline std::span<const std::byte> Bytes(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}
// The payload of a buffer as a string.
std::string Text(const Buffer& buffer);

// The shm segments in /dev/shm made by tocl (names starting "tocl." or
// "tocl-") whose name carries `pid` as one of its numbers.
std::vector<std::string> ShmSegmentsOf(pid_t pid);
// Every tocl segment in /dev/shm.
std::vector<std::string> ShmSegments();

// The "tcp" endpoint a process published (Lookup(process).endpoints).
Result<std::string> TcpEndpointOf(DirectoryClient& client, Gid process);

}  // namespace tocl::testing
