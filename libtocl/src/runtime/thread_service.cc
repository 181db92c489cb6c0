#include "runtime/thread_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/logger.h"
#include "runtime/entry_registry.h"
#include "runtime/internal_threads.h"
#include "runtime/spawn_protocol.h"

namespace tocl::runtime {

using Clock = std::chrono::steady_clock;

namespace {

// How long Stop waits between complaints about entries that do not return.
constexpr auto kEntryWaitWarning = std::chrono::seconds(5);
// The longest list of registered names an "unknown entry" error shows.
constexpr size_t kMaxNamesInError = 1024;
// A spawner on another host can be unreachable from here for a moment: its
// process reaches this host's daemon by replication, its endpoints (each
// published after the enrollment) a little later, and its request may come
// faster ("no network of this process reaches h1.p5 (its endpoints: 0)",
// seen when a spawner started right after another process exited). Such a
// reply is sent again, backing off, for this long.
constexpr auto kReplyRetryFor = std::chrono::seconds(2);

}  // namespace

ThreadService::~ThreadService() {
  Stop();
}

void ThreadService::Open(Gid process, size_t max_message) {
  process_ = process;
  max_message_ = max_message;
  service_ = receive_.AddInternal(kServiceThread);
}

void ThreadService::Start(Runtime& runtime) {
  runtime_ = &runtime;
  server_ = std::thread([this] { Serve(); });
}

void ThreadService::Stop() {
  {
    std::lock_guard lock(entries_mu_);
    stopping_ = true;
  }
  if (server_.joinable()) server_.join();
  std::unique_lock lock(entries_mu_);
  while (!running_.empty()) {
    if (!entry_done_.wait_for(lock, kEntryWaitWarning, [&] { return running_.empty(); })) {
      Log().warn("tocl: shutting down: waiting for {} entry thread(s) to return", running_.size());
    }
  }
  std::vector<std::thread> done;
  done.swap(finished_);
  lock.unlock();
  for (std::thread& thread : done) thread.join();
}

// --- the service ----------------------------------------------------------------

void ThreadService::Serve() {
  const Selector requests{Gid(), kSpawnThreadRequestTag};
  for (;;) {
    auto request = receive_.ReceiveOn(*service_, requests, Clock::time_point::max(), {});
    if (!request.ok()) {
      // Cancelled: the runtime is shutting down.
      if (request.status().code() != StatusCode::kCancelled) {
        Log().error("tocl: the spawn service stops: {}", request.status().ToString());
      }
      return;
    }
    Handle(std::move(*request));
    JoinFinished();
  }
}

void ThreadService::Handle(Buffer message) {
  const Gid source = message.source();
  // Replies go to a reply mailbox; anything else is not a request of ours.
  if (!source.is_thread() || !IsInternalThread(source) || source.thread_index() == kServiceThread) {
    Log().debug("tocl: spawn service: ignoring a message from {}", source.ToString());
    return;
  }
  SpawnReply reply;
  std::optional<Launch> launch;
  auto request = DecodeSpawnRequest(message.span(), reply.id);
  if (!request.ok()) {
    Log().warn("tocl: spawn service: a bad request from {}: {}", source.ToString(),
               request.status().ToString());
    reply.status = request.status();
  } else if (!request->spawner.is_thread() || request->spawner.process() != source.process()) {
    reply.status =
        InvalidArgument(fmt::format("the spawner {} is not a thread of {}",
                                    request->spawner.ToString(), source.process().ToString()));
  } else if (auto fn = FindEntry(request->entry); !fn) {
    reply.status =
        NotFound(fmt::format("process {} has no entry named '{}' (registered: {})",
                             process_.ToString(), request->entry, EntryNames(kMaxNamesInError)));
  } else if (Stopping()) {
    reply.status = Unavailable(fmt::format("process {} is shutting down", process_.ToString()));
  } else {
    // Enrolled before the reply leaves: the spawner may send to it at once.
    const std::string name(request->entry);
    auto self =
        hooks_.enroll(name, Attributes{{"entry", name}, {"spawner", request->spawner.ToString()}});
    if (self.ok()) {
      reply.thread = *self;
      launch = Launch{*self, request->spawner,
                      std::vector<std::byte>(request->payload.begin(), request->payload.end()),
                      std::move(*fn)};
    } else {
      reply.status = self.status();
    }
  }
  const std::vector<std::byte> bytes = EncodeSpawnReply(reply);
  message.Release();  // before sending: the pool may be at its cap
  Status sent = SendReply(source, bytes);
  if (!sent.ok()) {
    Log().debug("tocl: spawn service: no reply to {}: {}", source.ToString(), sent.ToString());
  }
  if (launch) StartEntry(std::move(*launch));
}

Status ThreadService::SendReply(Gid to, std::span<const std::byte> bytes) {
  const auto deadline = Clock::now() + kReplyRetryFor;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    Status sent = hooks_.send(ServiceOf(process_), to, kSpawnThreadReplyTag, bytes);
    const bool not_reachable_yet =
        to.host() != process_.host() &&
        (sent.code() == StatusCode::kUnavailable || sent.code() == StatusCode::kNotFound);
    if (!not_reachable_yet || Clock::now() + pause > deadline || Stopping()) return sent;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(100));
  }
}

bool ThreadService::Stopping() {
  std::lock_guard lock(entries_mu_);
  return stopping_;
}

void ThreadService::StartEntry(Launch launch) {
  const Gid self = launch.self;
  std::lock_guard lock(entries_mu_);
  // Started even when the runtime began shutting down since the reply
  // left: the spawner was told the thread runs, so its entry runs (and
  // sees the shutdown). Stop joins this service thread before it waits
  // for the entries, so it waits for this one too.
  const uint64_t key = next_entry_++;
  try {
    // Under entries_mu_: the thread files itself as finished under it too,
    // so it is in running_ before it can look.
    running_.emplace(key, std::thread([this, key, launch = std::move(launch)]() mutable {
                       RunEntry(key, std::move(launch));
                     }));
  } catch (const std::system_error& error) {
    Log().error("tocl: cannot start thread {}: {}", self.ToString(), error.what());
    hooks_.leave(self);
  }
}

void ThreadService::RunEntry(uint64_t key, Launch launch) {
  const Gid self = launch.self;
  {
    ThreadContext context{*runtime_, self, launch.spawner, std::move(launch.payload)};
    try {
      launch.fn(context);
    } catch (const std::exception& error) {
      Log().error("tocl: the entry of thread {} threw: {}", self.ToString(), error.what());
    } catch (...) {
      Log().error("tocl: the entry of thread {} threw", self.ToString());
    }
    launch.fn = nullptr;  // its captures go while the runtime is certainly alive
  }
  hooks_.leave(self);
  std::lock_guard lock(entries_mu_);
  auto node = running_.extract(key);
  finished_.push_back(std::move(node.mapped()));
  entry_done_.notify_all();
}

void ThreadService::JoinFinished() {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(entries_mu_);
    done.swap(finished_);
  }
  for (std::thread& thread : done) thread.join();
}

// --- the caller -------------------------------------------------------------------

Result<Gid> ThreadService::SpawnThread(Gid from, Gid process, std::string_view entry,
                                       std::span<const std::byte> payload,
                                       std::chrono::milliseconds timeout) {
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("spawn thread: {} is not a process id", process.ToString()));
  }
  TOCL_RETURN_IF_ERROR(ValidateEntryName(entry));
  const size_t max_payload = max_message_ - kSpawnThreadOverhead;
  if (payload.size() > max_payload) {
    return InvalidArgument(fmt::format(
        "spawn thread: a payload of {} bytes is larger than one message allows ({} bytes)",
        payload.size(), max_payload));
  }
  const auto deadline = Clock::now() + timeout;
  TOCL_ASSIGN_OR_RETURN(Mailbox * acquired, replies_.Acquire({process}, "SpawnThread"));
  const ReplyMailboxes::Lease mailbox(replies_, acquired);
  SpawnRequest request;
  request.id = next_request_.fetch_add(1, std::memory_order_relaxed);
  request.spawner = from;
  request.entry = entry;
  request.payload = payload;
  const Gid service = ServiceOf(process);
  TOCL_RETURN_IF_ERROR(
      hooks_.send((*mailbox).gid(), service, kSpawnThreadRequestTag, EncodeSpawnRequest(request)));

  auto failure = [&] { return replies_.FirstFailure(mailbox.get()); };
  const Selector replies{service, kSpawnThreadReplyTag};
  for (;;) {
    auto message = receive_.ReceiveOn(*mailbox, replies, deadline, failure);
    if (!message.ok()) {
      if (message.status().code() == StatusCode::kDeadlineExceeded) {
        return DeadlineExceeded(fmt::format(
            "process {} did not answer the request to start '{}' within {} ms (the thread may "
            "still start)",
            process.ToString(), entry, timeout.count()));
      }
      return message.status();
    }
    auto reply = DecodeSpawnReply(message->span());
    if (!reply.ok() || reply->id != request.id) continue;  // a late reply to an earlier call
    if (!reply->status.ok()) return reply->status;
    if (reply->thread.process() != process) {
      return Internal(fmt::format("process {} answered with a thread of another process ({})",
                                  process.ToString(), reply->thread.ToString()));
    }
    return reply->thread;
  }
}

}  // namespace tocl::runtime
