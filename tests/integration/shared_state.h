// State shared between handler calls (or other threads) and a test, with
// waits on it that end at a deadline: no sleeping as synchronisation.
//
//   Shared shared;
//   shared.With([&] { seen.push_back(x); });                 // from a handler
//   REQUIRE(shared.WaitFor([&] { return seen.size() == 3; }, seconds(10)));
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <type_traits>

namespace tocl::testing {

class Shared {
 public:
  template <typename F>
  auto With(F&& f) {
    std::lock_guard lock(mu_);
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      cv_.notify_all();
    } else {
      auto result = f();
      cv_.notify_all();
      return result;
    }
  }
  // Whether `done()` (called under the lock) held before `timeout`.
  bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, done);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace tocl::testing
