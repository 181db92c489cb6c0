// The test's "stop" signal to a helper process: its stdin closing (the test
// spawns it with a stdin pipe and closes it). Shared by tocl-msg-worker and
// tocl-stream-ledger.
//
//   StdinWatch stdin_watch;
//   stdin_watch.Start();
//   while (!stdin_watch.closed()) { ... }   // or stdin_watch.Wait();
//
// Threading: any thread may call closed() and Wait().
#pragma once

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace tocl::testing {

class StdinWatch {
 public:
  void Start() {
    // The thread may block in read() until the process exits, so it is
    // detached, and the state it signals is shared: it outlives the watch
    // when stdin closes while the worker is being destroyed.
    std::thread([state = state_] {
      char buffer[256];
      for (;;) {
        ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
        if (n == 0 || (n < 0 && errno != EINTR)) break;
      }
      std::lock_guard lock(state->mutex);
      state->closed = true;
      state->closed_cv.notify_all();
    }).detach();
  }
  bool closed() const {
    std::lock_guard lock(state_->mutex);
    return state_->closed;
  }
  void Wait() {
    std::unique_lock lock(state_->mutex);
    state_->closed_cv.wait(lock, [&] { return state_->closed; });
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable closed_cv;
    bool closed = false;  // guarded by mutex
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace tocl::testing
