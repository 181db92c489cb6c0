#include "runtime/membership/membership_watches.h"

#include <fmt/format.h>

#include <utility>

namespace tocl::runtime {

Result<uint64_t> MembershipWatches::Start(std::string_view expression,
                                          MembershipCallback callback) {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return Unavailable("the runtime is shutting down");
  }
  TOCL_ASSIGN_OR_RETURN(std::unique_ptr<MembershipWatch> watch,
                        MembershipWatch::Start(client_, expression, std::move(callback)));
  std::vector<std::unique_ptr<MembershipWatch>> finished;
  std::unique_lock lock(mu_);
  if (stopped_) {
    lock.unlock();
    watch.reset();  // joins: no callback runs after the runtime stopped it
    return Unavailable("the runtime is shutting down");
  }
  const uint64_t id = next_id_++;
  watches_.emplace(id, std::move(watch));
  finished = TakeFinishedLocked();
  return id;
}

Status MembershipWatches::Cancel(uint64_t id) {
  std::unique_ptr<MembershipWatch> watch;
  std::vector<std::unique_ptr<MembershipWatch>> finished;
  {
    std::lock_guard lock(mu_);
    auto found = watches_.find(id);
    if (found == watches_.end()) {
      return NotFound(fmt::format("no membership watch {} (cancelled already?)", id));
    }
    watch = std::move(found->second);
    watches_.erase(found);
    finished = TakeFinishedLocked();
    if (watch->OnOwnThread()) {
      // From its own callback: it cannot join itself. Nothing starts after
      // this; the thread returns once the callback does.
      watch->RequestStop();
      retired_.push_back(std::move(watch));
    }
  }
  watch.reset();  // another thread's: stops and joins (outside mu_: its callback may call us)
  return Status::Ok();
}

void MembershipWatches::StopAll() {
  std::vector<std::unique_ptr<MembershipWatch>> all;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (auto& [id, watch] : watches_) all.push_back(std::move(watch));
    watches_.clear();
    for (auto& watch : retired_) all.push_back(std::move(watch));
    retired_.clear();
  }
  // Ask them all first, so that they stop together, then join each.
  for (auto& watch : all) watch->RequestStop();
  all.clear();
}

std::vector<std::unique_ptr<MembershipWatch>> MembershipWatches::TakeFinishedLocked() {
  std::vector<std::unique_ptr<MembershipWatch>> finished;
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->Finished()) {
      finished.push_back(std::move(*it));
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
  return finished;
}

}  // namespace tocl::runtime
