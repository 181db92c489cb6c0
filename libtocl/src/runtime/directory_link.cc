#include "runtime/directory_link.h"

#include <fmt/format.h>

#include "core/logger.h"

namespace tocl::runtime {

Result<std::unique_ptr<DirectoryLink>> DirectoryLink::Start(
    const std::string& address, const EnrollOptions& enroll,
    std::chrono::milliseconds stats_interval, DirectoryEvents events) {
  std::unique_ptr<DirectoryLink> link(new DirectoryLink());
  TOCL_ASSIGN_OR_RETURN(link->client_, DirectoryClient::Connect(address));
  TOCL_ASSIGN_OR_RETURN(uint64_t since_seq, link->client_->Ping());
  TOCL_ASSIGN_OR_RETURN(link->session_, link->client_->Enroll(enroll));
  link->process_ = link->session_->gid();
  link->events_ = std::move(events);
  link->stats_interval_ = stats_interval;
  link->registrar_ = std::thread([l = link.get()] { l->RegistrarLoop(); });
  link->watcher_ = std::thread([l = link.get(), since_seq] { l->WatchLoop(since_seq); });
  return link;
}

DirectoryLink::~DirectoryLink() {
  (void)Close();
}

void DirectoryLink::QueueRegister(ThreadInfo thread) {
  std::lock_guard lock(mu_);
  to_register_.push_back(std::move(thread));
  ++queued_;
  work_.notify_one();
}

void DirectoryLink::QueueUnregister(Gid thread) {
  std::lock_guard lock(mu_);
  to_unregister_.push_back(thread);
  ++queued_;
  work_.notify_one();
}

Status DirectoryLink::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  const uint64_t target = queued_;
  const bool done = cv_.wait_for(lock, timeout, [&] { return done_ >= target || stop_; });
  if (!done) return DeadlineExceeded("thread registrations did not reach the daemon in time");
  return Status::Ok();
}

Status DirectoryLink::PublishEndpoint(std::string_view subsystem, std::string_view address) {
  return session_->PublishEndpoint(subsystem, address);
}

void DirectoryLink::RegistrarLoop() {
  auto next_stats = std::chrono::steady_clock::now() + stats_interval_;
  auto retry_delay = std::chrono::milliseconds(50);
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (to_register_.empty() && to_unregister_.empty()) {
      if (stats_interval_.count() > 0) {
        work_.wait_until(lock, next_stats);
      } else {
        work_.wait(lock);
      }
    }
    if (stop_) break;
    // No linger: a thread that enrolls alone is sent at once, so that
    // queries see it one call after EnrollThread (tocl-bench visibility).
    // Threads that enroll in a burst (SpawnThread calls, a pool starting)
    // still share calls: those queued while a call is in flight go together
    // in the next one (one commit on the daemon, one replication batch to
    // the other hosts), so batches grow with the load by themselves.
    // (Before: a 2 ms linger ahead of each call, which every lone thread
    // waited out before the daemon heard of it.)
    std::vector<ThreadInfo> batch;
    batch.swap(to_register_);
    std::vector<Gid> leaving;
    leaving.swap(to_unregister_);
    const uint64_t covers = queued_;
    lock.unlock();
    Status registered;
    if (!batch.empty()) registered = Register(batch);
    Status unregistered;
    if (registered.ok() && !leaving.empty()) unregistered = Unregister(leaving);
    if (stats_interval_.count() > 0 && std::chrono::steady_clock::now() >= next_stats) {
      next_stats = std::chrono::steady_clock::now() + stats_interval_;
      ReportStats();
    }
    lock.lock();
    const Status& status = registered.ok() ? unregistered : registered;
    if (!status.ok()) {
      // The daemon is away (restarting): keep what it did not take and try
      // again. A batch it registered is not sent again (it would be refused
      // as already there, and every later thread with it, for good).
      if (status.code() != StatusCode::kUnavailable) {
        Log().warn("tocl: registering threads: {}", status.ToString());
      }
      if (!registered.ok()) to_register_.insert(to_register_.begin(), batch.begin(), batch.end());
      to_unregister_.insert(to_unregister_.begin(), leaving.begin(), leaving.end());
      work_.wait_for(lock, retry_delay, [&] { return stop_; });
      retry_delay = std::min(retry_delay * 2, std::chrono::milliseconds(1000));
      continue;
    }
    retry_delay = std::chrono::milliseconds(50);
    done_ = covers;
    cv_.notify_all();
  }
}

// Only this process's session may register or unregister its threads, so a
// thread the daemon already has (or already has as exited) is one an earlier
// attempt of ours got through, its answer lost with the daemon that died. The
// daemon refuses a whole batch for one such thread, and for one thread it
// finds invalid (EnrollThread checks what it can; the daemon has the last
// word): the batch then goes one thread at a time. Those already there count
// as done; an invalid one is left out with an error, so that it does not
// hold back every thread queued behind it.
Status DirectoryLink::Register(const std::vector<ThreadInfo>& batch) {
  Status status = session_->RegisterThreads(batch);
  if (status.code() != StatusCode::kAlreadyExists &&
      status.code() != StatusCode::kInvalidArgument) {
    return status;
  }
  for (const ThreadInfo& thread : batch) {
    Status one = session_->RegisterThreads(std::span(&thread, 1));
    if (one.ok() || one.code() == StatusCode::kAlreadyExists) continue;
    if (one.code() == StatusCode::kInvalidArgument) {
      Log().error("tocl: thread {} ('{}') is not in the directory: the daemon refused it: {}",
                  thread.gid.ToString(), thread.name, one.ToString());
      continue;
    }
    return one;
  }
  return Status::Ok();
}

Status DirectoryLink::Unregister(const std::vector<Gid>& leaving) {
  Status status = session_->UnregisterThreads(leaving, "left");
  if (status.code() != StatusCode::kNotFound) return status;
  for (const Gid& thread : leaving) {
    Status one = session_->UnregisterThreads(std::span(&thread, 1), "left");
    if (!one.ok() && one.code() != StatusCode::kNotFound) return one;
  }
  return Status::Ok();
}

void DirectoryLink::ReportStats() {
  // Unavailable (re-enrolling) and FailedPrecondition (closing) pass: the
  // next interval reports again. Anything else is a report over the limits,
  // which would be refused every time: said once.
  auto refused = [&](const Status& status, const char* what) {
    if (status.ok() || status.code() == StatusCode::kUnavailable ||
        status.code() == StatusCode::kFailedPrecondition || stats_refused_) {
      return;
    }
    stats_refused_ = true;
    Log().warn("tocl: {} statistics not reported: {}", what, status.ToString());
  };
  if (events_.pool_stats) refused(session_->ReportPoolStats(events_.pool_stats()), "pool");
  if (events_.network_stats) {
    refused(session_->ReportNetworkStats(events_.network_stats()), "network");
  }
}

void DirectoryLink::WatchLoop(uint64_t since_seq) {
  auto delay = std::chrono::milliseconds(50);
  while (!stopping_.load()) {
    // Cancelled the moment Close asks (Watch's stop would be polled, every
    // 50 ms: the process's goodbye, and so its exit notices, waited for it).
    Status status = client_->WatchUntil(
        since_seq, std::chrono::system_clock::time_point::max(),
        [&](const ChangeEvent& event) {
          since_seq = event.seq;
          if (event.op == ChangeOp::kExited && events_.on_exited) {
            events_.on_exited(event.gid, event.entity.exit_reason);
          }
          if (events_.on_change) events_.on_change(event);
          return !stopping_.load();
        },
        // Exits and hosts going down or coming back are all the runtime acts
        // on; the cluster's registrations are not worth its CPU.
        {ChangeOp::kExited, ChangeOp::kUnreachable, ChangeOp::kReachable}, watch_stop_.get_token());
    if (stopping_.load()) break;
    if (!status.ok()) {
      Log().debug("tocl: change stream: {} (retrying)", status.ToString());
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, delay, [&] { return stop_; });
    delay = std::min(delay * 2, std::chrono::milliseconds(1000));
  }
}

Status DirectoryLink::Close() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return Status::Ok();
    stop_ = true;
    work_.notify_all();
    cv_.notify_all();
  }
  stopping_.store(true);
  watch_stop_.request_stop();
  if (registrar_.joinable()) registrar_.join();
  if (watcher_.joinable()) watcher_.join();
  return session_ ? session_->Close() : Status::Ok();
}

}  // namespace tocl::runtime
