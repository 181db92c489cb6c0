// One membership watch (Runtime::WatchMembers): its thread, which follows
// the daemon's change stream and reads the watched set again after each
// change, and its callback. The contract is tocl/membership.h's.
//
// How there is no gap and no duplicate: a read is a Ping (the daemon's
// newest change number, `seen`) followed by the query, so the set read
// includes every change up to `seen`. The stream is opened from `seen`;
// each change after it makes a new read, and changes with a number up to
// the last read's `seen` are skipped (a burst costs one read). What the
// callbacks are told is exactly the MemberSet, so each new read reports
// only its difference. A stream that breaks is opened again after a read
// (when the daemon answers): the difference then covers whatever happened
// while it was down, and the numbering of a daemon that came back with
// another database does not matter (only the last Ping's is used).
//
// The first read is made by Start, on the caller's thread, so a bad query
// or an unreachable daemon is the caller's error; its members are the
// thread's first callbacks.
//
// Threading: Start, Cancel and the destructor from any thread but the
// watch's own, except Cancel, which the watch's callback may call (it then
// only asks the thread to stop). The destructor cancels and joins.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/directory_queries.h"
#include "runtime/membership/member_set.h"
#include "tocl/directory_client.h"
#include "tocl/membership.h"

namespace tocl::runtime {

class MembershipWatch {
 public:
  // Reads the set once, then starts the thread that delivers it and what
  // follows. `client` must outlive the watch. InvalidArgument for a query
  // the daemon refuses (its message, with the position in `expression`);
  // the daemon's errors (Unavailable) otherwise.
  static Result<std::unique_ptr<MembershipWatch>> Start(DirectoryClient& client,
                                                        std::string_view expression,
                                                        MembershipCallback callback);
  ~MembershipWatch();
  MembershipWatch(const MembershipWatch&) = delete;
  MembershipWatch& operator=(const MembershipWatch&) = delete;

  // Asks the thread to stop: no callback starts once this returns. The
  // callback running now (on another thread) may still be running: joining
  // is the destructor's.
  void RequestStop();
  // True on the watch's own thread (from its callback).
  bool OnOwnThread() const;
  // The thread has returned: joining it does not wait.
  bool Finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  MembershipWatch(DirectoryClient& client, std::string query, MembershipCallback callback);
  // The members now (ReadMatches of query_).
  Result<DirectoryRead> ReadSet();
  void Run(std::stop_token stop, DirectoryRead first);
  // Follows the change stream from `seen` until it breaks or the watch
  // stops; `seen` is the last read's. `streamed` is set once the stream
  // delivers a change.
  Status Follow(std::stop_token stop, uint64_t& seen, bool& streamed);
  // Reports the difference `read` makes, leaves with what the directory
  // says of them now: the entity of `cause` (the change that made the
  // read, if any) when it is that member's exit, else a lookup.
  void Apply(std::stop_token stop, std::vector<Entity> read, const ChangeEvent* cause = nullptr);
  void Deliver(std::stop_token stop, const MembershipEvent& event);

  DirectoryClient& client_;
  const std::string query_;  // the caller's, restricted to running members
  const MembershipCallback callback_;
  MemberSet members_;                  // the watch thread's
  std::atomic<bool> finished_{false};  // release: set as Run returns
  std::jthread thread_;                // last: started once everything above is set
};

}  // namespace tocl::runtime
