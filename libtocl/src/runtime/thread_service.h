// SpawnThread, both ends: the spawn service every runtime runs (a thread
// serving the internal mailbox at kServiceThread: it enrolls a thread,
// starts the registered entry on it and replies) and the caller's side (a
// request from a private reply mailbox, the reply awaited there).
//
// Latency: the request and reply are ordinary messages over the data plane
// (shm on one host, tcp between hosts); the caller polls the networks itself
// while it waits for the reply, and the service replies before anything else
// (the entry thread is already running then).
//
// It sees the runtime through the receive side (its mailboxes) and its
// hooks.
//
// Threading: SpawnThread from any thread; Start and Stop
// from Runtime::Start and Runtime::Impl::Shutdown.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/mailbox.h"
#include "runtime/receive_side.h"
#include "runtime/reply_mailboxes.h"
#include "tocl/buffer.h"
#include "tocl/entry.h"
#include "tocl/runtime.h"

namespace tocl::runtime {

struct ThreadServiceHooks {
  // Numbers and enrolls a thread of this process (Runtime::EnrollThread
  // without the public checks).
  std::function<Result<Gid>(std::string name, Attributes attributes)> enroll;
  // The thread leaves (idempotent).
  std::function<void(Gid thread)> leave;
  // Sends a copy of `payload` (Runtime::Send).
  std::function<Status(Gid from, Gid to, Tag tag, std::span<const std::byte> payload)> send;
};

class ThreadService {
 public:
  // `receive` and `replies` must outlive this.
  ThreadService(ReceiveSide& receive, ReplyMailboxes& replies, ThreadServiceHooks hooks)
      : receive_(receive), replies_(replies), hooks_(std::move(hooks)) {}
  ~ThreadService();
  ThreadService(const ThreadService&) = delete;
  ThreadService& operator=(const ThreadService&) = delete;

  // Creates the service mailbox of `process`: requests that arrive before
  // Start wait in it. Before the endpoints are published. `max_message`:
  // the largest payload one message carries (Runtime::short_max_payload).
  void Open(Gid process, size_t max_message);
  // Starts serving; entries get `runtime` in their ThreadContext.
  void Start(Runtime& runtime);
  // The service thread ends (the runtime is shutting down and has woken the
  // mailboxes); waits for every entry thread to return and joins it.
  void Stop();

  Result<Gid> SpawnThread(Gid from, Gid process, std::string_view entry,
                          std::span<const std::byte> payload, std::chrono::milliseconds timeout);

 private:
  // An enrolled thread whose entry is to start.
  struct Launch {
    Gid self;
    Gid spawner;
    std::vector<std::byte> payload;
    Entry fn;
  };

  void Serve();
  void Handle(Buffer request);
  // Sends a reply to `to`, again for a while when `to` is another host's
  // process this one cannot reach yet (see thread_service.cc).
  Status SendReply(Gid to, std::span<const std::byte> bytes);
  bool Stopping();
  // Starts the thread (after the reply left: thread creation is off the
  // spawner's path). One that cannot start leaves at once, as if its entry
  // had returned: its watchers hear of it.
  void StartEntry(Launch launch);
  void RunEntry(uint64_t key, Launch launch);
  void JoinFinished();

  ReceiveSide& receive_;
  ReplyMailboxes& replies_;  // where a caller waits (a process that exits fails it)
  const ThreadServiceHooks hooks_;
  Gid process_;                 // set by Open
  size_t max_message_ = 0;      // set by Open
  Runtime* runtime_ = nullptr;  // set by Start
  Mailbox* service_ = nullptr;  // owned by the thread table
  std::thread server_;
  std::atomic<uint64_t> next_request_{1};

  std::mutex entries_mu_;
  std::condition_variable entry_done_;
  bool stopping_ = false;                    // guarded by entries_mu_
  uint64_t next_entry_ = 1;                  // guarded by entries_mu_
  std::map<uint64_t, std::thread> running_;  // guarded by entries_mu_
  std::vector<std::thread> finished_;        // guarded by entries_mu_: to join
};

}  // namespace tocl::runtime
