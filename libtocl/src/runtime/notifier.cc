#include "runtime/notifier.h"

#include <fmt/format.h>

#include "core/gid_scope.h"
#include "core/logger.h"

namespace tocl::runtime {
namespace {

// How many times a notice is offered to a full pool (each waits up to a
// second for a buffer) before it is given up with a warning.
constexpr int kDeliverAttempts = 30;

std::string_view LevelName(Gid gid) {
  return gid.is_thread() ? "thread" : gid.is_process() ? "process" : "host";
}

// Why `target` is gone when `exited` (itself, or the process or host it is
// part of) exited as `entity` says.
ExitNotice ExitedNotice(Gid target, const Entity& exited) {
  ExitNotice notice;
  notice.gid = target;
  notice.what = ExitWhat::kExited;
  const std::string reason = exited.exit_reason.empty() ? "no reason given" : exited.exit_reason;
  notice.reason = exited.gid == target ? reason
                                       : fmt::format("its {} {} exited ({})", LevelName(exited.gid),
                                                     exited.gid.ToString(), reason);
  if (exited.gid.is_process()) {
    notice.exit_status = exited.exit_status;
    notice.exit_signal = exited.exit_signal;
  }
  return notice;
}

ExitNotice UnreachableNotice(Gid target) {
  return ExitNotice{.gid = target,
                    .what = ExitWhat::kUnreachable,
                    .reason = HostDownReason(target.host()),
                    .exit_status = std::nullopt,
                    .exit_signal = std::nullopt};
}

}  // namespace

std::string HostDownReason(Gid host) {
  return fmt::format("host {} is down (no heartbeat)", host.ToString());
}

Result<uint64_t> Notifier::Watch(Gid target, Gid self, Tag tag, Callback callback) {
  if (!target.valid()) {
    return InvalidArgument(
        fmt::format("cannot watch {}: not a thread, process or host id", target.ToString()));
  }
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return Unavailable("the runtime is shutting down");
    id = next_id_++;
    armed_.emplace(id, Armed{target, self, tag, std::move(callback)});
    by_target_.emplace(target.raw(), id);
    if (!dispatcher_.joinable()) dispatcher_ = std::thread([this] { Dispatch(); });
  }
  // Registered first, looked up second: see the header.
  auto refuse = [&](Status why) {
    (void)Cancel(id);
    return why;
  };
  auto entity = hooks_.lookup(target);
  if (entity.ok()) {
    FireFromLookup(id, *entity, target);
    return id;
  }
  if (entity.status().code() != StatusCode::kNotFound) {
    return refuse(entity.status().WithContext(fmt::format("look up {}", target.ToString())));
  }
  if (!target.is_thread()) {
    return refuse(NotFound(fmt::format("no {} {}", LevelName(target), target.ToString())));
  }
  // Threads are registered in the background: one the directory does not
  // know yet is fine while its process runs.
  auto owner = hooks_.lookup(target.process());
  if (owner.ok()) {
    FireFromLookup(id, *owner, target);
    return id;
  }
  if (owner.status().code() == StatusCode::kNotFound) {
    return refuse(NotFound(fmt::format("no process {} (of thread {})", target.process().ToString(),
                                       target.ToString())));
  }
  return refuse(owner.status().WithContext(fmt::format("look up {}", target.process().ToString())));
}

void Notifier::FireFromLookup(uint64_t id, const Entity& entity, Gid target) {
  std::lock_guard lock(mu_);
  if (entity.state == EntityState::kExited) {
    FireLocked(id, ExitedNotice(target, entity), entity.gid);
  } else if (entity.state == EntityState::kUnreachable) {
    FireLocked(id, UnreachableNotice(target), Gid());
  }
}

Status Notifier::Cancel(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = armed_.find(id);
  if (it != armed_.end()) {
    auto [first, last] = by_target_.equal_range(it->second.target.raw());
    for (auto entry = first; entry != last; ++entry) {
      if (entry->second == id) {
        by_target_.erase(entry);
        break;
      }
    }
    armed_.erase(it);
    return Status::Ok();
  }
  // Fired but not delivered yet: it still can be stopped.
  for (auto queued = queue_.begin(); queued != queue_.end(); ++queued) {
    if (queued->id == id) {
      queue_.erase(queued);
      return Status::Ok();
    }
  }
  return NotFound(fmt::format("no notification {} to cancel (it was delivered or never made)", id));
}

void Notifier::CancelFor(Gid self) {
  std::lock_guard lock(mu_);
  for (auto it = armed_.begin(); it != armed_.end();) {
    if (it->second.self != self || it->second.callback) {
      ++it;
      continue;
    }
    auto [first, last] = by_target_.equal_range(it->second.target.raw());
    for (auto entry = first; entry != last; ++entry) {
      if (entry->second == it->first) {
        by_target_.erase(entry);
        break;
      }
    }
    it = armed_.erase(it);
  }
}

void Notifier::FireLocked(uint64_t id, ExitNotice notice, Gid gone) {
  auto it = armed_.find(id);
  if (it == armed_.end()) return;  // fired (or cancelled) already
  notice.gid = it->second.target;
  auto [first, last] = by_target_.equal_range(it->second.target.raw());
  for (auto entry = first; entry != last; ++entry) {
    if (entry->second == id) {
      by_target_.erase(entry);
      break;
    }
  }
  queue_.push_back(Fired{id, std::move(it->second), std::move(notice), gone});
  armed_.erase(it);
  wake_.notify_one();
}

void Notifier::FireScopeLocked(Gid scope, Gid gone,
                               const std::function<ExitNotice(Gid target)>& make) {
  std::vector<std::pair<uint64_t, Gid>> hits;
  const auto end = by_target_.upper_bound(ScopeEnd(scope));
  for (auto it = by_target_.lower_bound(scope.raw()); it != end; ++it) {
    hits.emplace_back(it->second, Gid::FromRaw(it->first));
  }
  for (const auto& [id, target] : hits) FireLocked(id, make(target), gone);
}

void Notifier::OnChange(const ChangeEvent& event) {
  if (!event.gid.valid()) return;
  if (event.op != ChangeOp::kExited && event.op != ChangeOp::kUnreachable) return;
  std::lock_guard lock(mu_);
  if (by_target_.empty()) return;
  if (event.op == ChangeOp::kExited) {
    Entity exited = event.entity;
    exited.gid = event.gid;
    FireScopeLocked(event.gid, event.gid, [&](Gid target) { return ExitedNotice(target, exited); });
  } else {
    FireScopeLocked(event.gid.host(), Gid(), [](Gid target) { return UnreachableNotice(target); });
  }
}

void Notifier::Dispatch() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopped_ || !queue_.empty(); });
    if (stopped_) return;
    {
      Fired fired = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      Deliver(fired);
    }  // the callback's captures go outside the lock too
    lock.lock();
  }
}

void Notifier::Deliver(const Fired& fired) {
  // A host that exited has no process of its own to drain (its processes
  // are reported one by one).
  if (hooks_.deliver_arrived && (fired.gone.is_thread() || fired.gone.is_process())) {
    hooks_.deliver_arrived(fired.gone, fired.notice.reason);
  }
  if (fired.watch.callback) {
    try {
      fired.watch.callback(fired.notice);
    } catch (const std::exception& error) {
      Log().error("tocl: the notification callback for {} threw: {}", fired.notice.gid.ToString(),
                  error.what());
    } catch (...) {
      Log().error("tocl: the notification callback for {} threw", fired.notice.gid.ToString());
    }
    return;
  }
  const std::vector<std::byte> payload = EncodeExitNotice(fired.notice);
  Status status = hooks_.deliver(fired.watch.self, fired.notice.gid, fired.watch.tag, payload);
  // At the pool cap (each try waits up to a second for a buffer) the notice
  // is tried again: it is the one event its watcher will ever get.
  for (int attempt = 1; attempt < kDeliverAttempts && !Stopped() &&
                        (status.code() == StatusCode::kResourceExhausted ||
                         status.code() == StatusCode::kDeadlineExceeded);
       ++attempt) {
    status = hooks_.deliver(fired.watch.self, fired.notice.gid, fired.watch.tag, payload);
  }
  if (status.ok()) return;
  // A watcher that left is the expected way to miss a notice; anything else
  // is worth a warning.
  const bool watcher_gone =
      status.code() == StatusCode::kFailedPrecondition || status.code() == StatusCode::kNotFound;
  if (watcher_gone) {
    Log().debug("tocl: exit notice for {} to {} dropped: {}", fired.notice.gid.ToString(),
                fired.watch.self.ToString(), status.ToString());
  } else {
    Log().warn("tocl: exit notice for {} to {} could not be delivered: {}",
               fired.notice.gid.ToString(), fired.watch.self.ToString(), status.ToString());
  }
}

bool Notifier::Stopped() {
  std::lock_guard lock(mu_);
  return stopped_;
}

void Notifier::Stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    queue_.clear();
    wake_.notify_all();
  }
  if (!dispatcher_.joinable()) return;
  if (dispatcher_.get_id() == std::this_thread::get_id()) {
    dispatcher_.detach();  // a callback shut the runtime down (documented as not allowed)
  } else {
    dispatcher_.join();
  }
}

}  // namespace tocl::runtime
