// The threads and processes the directory said exited, as this process
// learnt of them (Runtime::Impl::OnExited): what a packed reader
// (packed_reader.cc) asks while it waits for the rest of a message, to end
// that wait with an error instead of waiting for ever. A lookup costs a
// lock and a hash probe, no daemon round trip.
//
// Bounded: the last kRemembered exits are kept (a reader asks about a
// sender it heard from moments ago). A reader that finds nothing here for a
// while asks the directory (packed_reader.cc), so an exit forgotten here
// ends its wait too, a few seconds later. PeerRoutes keeps exits as well,
// but per destination this process sends to; a packed reader's source
// need not be one.
//
// Threading: every method from any thread; `mu_` guards the table.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "tocl/gid.h"

namespace tocl::runtime {

class ExitedSenders {
 public:
  static constexpr size_t kRemembered = 4096;

  // Thread or process `gid` exited.
  void Note(Gid gid, const std::string& reason) {
    std::lock_guard lock(mu_);
    if (!reasons_.emplace(gid.raw(), reason).second) return;
    order_.push_back(gid.raw());
    if (order_.size() > kRemembered) {
      reasons_.erase(order_.front());
      order_.pop_front();
    }
  }
  // Why thread `thread` (or its process) is gone, if it is.
  std::optional<std::string> Gone(Gid thread) const {
    std::lock_guard lock(mu_);
    for (uint64_t raw : {thread.raw(), thread.process().raw()}) {
      auto it = reasons_.find(raw);
      if (it != reasons_.end()) return it->second;
    }
    return std::nullopt;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::string> reasons_;  // guarded by mu_
  std::deque<uint64_t> order_;                         // guarded by mu_: oldest first
};

}  // namespace tocl::runtime
