// The runtime's membership watches (Runtime::WatchMembers and
// CancelWatchMembers) by id: starting them, cancelling them synchronously
// (also from their own callback, which must not join its own thread), and
// stopping them all at Shutdown.
//
// A watch cancelled from its own callback is only asked to stop; it is
// kept, retired, until its thread has returned, and joined by the next
// call that finds it finished, or by StopAll.
//
// Threading: every method from any thread; StopAll not from a watch's
// callback (Runtime::Shutdown is not allowed there).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "runtime/membership/membership_watch.h"
#include "tocl/directory_client.h"
#include "tocl/membership.h"

namespace tocl::runtime {

class MembershipWatches {
 public:
  // `client` must outlive this.
  explicit MembershipWatches(DirectoryClient& client) : client_(client) {}
  ~MembershipWatches() { StopAll(); }
  MembershipWatches(const MembershipWatches&) = delete;
  MembershipWatches& operator=(const MembershipWatches&) = delete;

  // MembershipWatch::Start's errors; Unavailable after StopAll.
  Result<uint64_t> Start(std::string_view expression, MembershipCallback callback);
  // NotFound for an id that is not a running watch.
  Status Cancel(uint64_t id);
  // Cancels every watch and joins their threads. Idempotent.
  void StopAll();

 private:
  // Takes the retired watches whose threads have returned (to be destroyed
  // outside mu_).
  std::vector<std::unique_ptr<MembershipWatch>> TakeFinishedLocked();

  DirectoryClient& client_;
  std::mutex mu_;
  uint64_t next_id_ = 1;                                          // guarded by mu_
  std::map<uint64_t, std::unique_ptr<MembershipWatch>> watches_;  // guarded by mu_
  std::vector<std::unique_ptr<MembershipWatch>> retired_;         // guarded by mu_
  bool stopped_ = false;                                          // guarded by mu_
};

}  // namespace tocl::runtime
