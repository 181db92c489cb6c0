// Exit notifications (Runtime::Notify): watches on threads, processes and
// hosts, fired once each from the directory's change stream, delivered as a
// message or a callback by one notification thread.
//
// A watch is registered first and its target looked up second, so an exit
// is seen either by the lookup or by the stream, whichever comes first;
// firing removes the watch, so the other finds nothing and nothing fires
// twice. Fired notices wait in a queue for the notification thread (started
// on the first watch): a slow callback holds up later notices, never the
// watcher stream or messaging.
//
// Exit ordering: before a notice that something exited is delivered, the
// runtime hands its receivers what the process that exited (or whose
// thread left) sent and has reached us (NotifierHooks::deliver_arrived),
// so no message of it is received after the notice.
//
// Threading: every method is safe from any thread. OnChange comes from the
// watcher thread; hooks are called without the lock held.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "tocl/entity.h"
#include "tocl/exit_notice.h"
#include "tocl/runtime.h"

namespace tocl::runtime {

struct NotifierHooks {
  // The directory's entry for a gid (HostDaemons::Lookup).
  std::function<Result<Entity>(Gid gid)> lookup;
  // Puts a message from `source` with `tag` in local thread `self`'s mailbox.
  std::function<Status(Gid self, Gid source, Tag tag, std::span<const std::byte> payload)> deliver;
  // Delivers what the process of `gone` (a process that exited, or a thread
  // that left) sent and has reached this process; `reason` is its exit's.
  // Called (on the notification thread) before each notice of an exit.
  std::function<void(Gid gone, const std::string& reason)> deliver_arrived;
};

class Notifier {
 public:
  using Callback = std::function<void(const ExitNotice&)>;

  explicit Notifier(NotifierHooks hooks) : hooks_(std::move(hooks)) {}
  ~Notifier() { Stop(); }
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // A message to `self` with `tag` (callback empty), or a call of `callback`.
  Result<uint64_t> Watch(Gid target, Gid self, Tag tag, Callback callback);
  Status Cancel(uint64_t id);
  // Thread `self` left: its message watches go.
  void CancelFor(Gid self);

  // A change from the directory's stream (the watcher thread).
  void OnChange(const ChangeEvent& event);

  // Joins the notification thread; what was not delivered yet is dropped.
  // Watches still armed stay silent. Idempotent.
  void Stop();

 private:
  struct Armed {
    Gid target;
    Gid self;  // message watches
    Tag tag = 0;
    Callback callback;  // callback watches
  };
  struct Fired {
    uint64_t id;
    Armed watch;
    ExitNotice notice;
    Gid gone;  // what exited (the target, its process or its host); null: unreachable
  };

  // Moves watch `id` (if still armed) to the queue with `notice` (its gid
  // set to the watch's target), fired by the exit of `gone` (null: the
  // target is unreachable). Under mu_.
  void FireLocked(uint64_t id, ExitNotice notice, Gid gone);
  // Fires every armed watch whose target lies inside `scope` (a thread: it
  // alone; a process: it and its threads; a host: everything on it), with
  // the notice `make(target)` returns. Under mu_.
  void FireScopeLocked(Gid scope, Gid gone, const std::function<ExitNotice(Gid target)>& make);
  // For a target found exited or unreachable when the watch was made.
  void FireFromLookup(uint64_t id, const Entity& entity, Gid target);
  void Dispatch();
  void Deliver(const Fired& fired);

  bool Stopped();

  const NotifierHooks hooks_;
  std::mutex mu_;
  std::condition_variable wake_;
  uint64_t next_id_ = 1;                         // guarded by mu_
  std::map<uint64_t, Armed> armed_;              // guarded by mu_, by id
  std::multimap<uint64_t, uint64_t> by_target_;  // guarded by mu_: target raw -> id
  std::deque<Fired> queue_;                      // guarded by mu_
  bool stopped_ = false;                         // guarded by mu_
  std::thread dispatcher_;                       // started under mu_ on the first watch
};

// The reason "host h3 is down (no heartbeat)" used for sends and notices.
std::string HostDownReason(Gid host);

}  // namespace tocl::runtime
