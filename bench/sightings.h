// When each gid was first seen by one observer (a Watch stream, a callback,
// a receiving thread), for a benchmark thread to wait on with a deadline.
//
//   Sightings added;
//   // observer thread: added.Seen(event.gid, Clock::now());
//   auto at = added.WaitFor(gid, Clock::now() + std::chrono::seconds(10));
//   if (!at) ... not seen in time
//
// Threading: every method is safe from any thread. The first sighting of a
// gid counts; later ones are ignored.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include "tocl/gid.h"

namespace tocl::bench {

class Sightings {
 public:
  using Clock = std::chrono::steady_clock;

  void Seen(Gid gid, Clock::time_point at) {
    std::lock_guard lock(mu_);
    seen_.emplace(gid, at);
    cv_.notify_all();
  }
  std::optional<Clock::time_point> WaitFor(Gid gid, Clock::time_point deadline) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return seen_.contains(gid); })) return std::nullopt;
    return seen_.at(gid);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Gid, Clock::time_point> seen_;  // guarded by mu_
};

}  // namespace tocl::bench
