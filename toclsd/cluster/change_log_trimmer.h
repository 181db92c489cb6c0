// Keeps the change log at about `keep` rows: once a second, a writer
// operation deletes the oldest changes beyond that (in slices, so the writer
// is never held long). Replicas whose progress is older get a snapshot.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "store/store.h"

namespace tocl::daemon::cluster {

class ChangeLogTrimmer {
 public:
  ChangeLogTrimmer(directory::Store& store, uint64_t keep);
  ~ChangeLogTrimmer();  // Stop()
  ChangeLogTrimmer(const ChangeLogTrimmer&) = delete;
  ChangeLogTrimmer& operator=(const ChangeLogTrimmer&) = delete;

  void Stop();

 private:
  void Loop();

  directory::Store& store_;
  const uint64_t keep_;
  std::mutex mu_;
  std::condition_variable wake_;  // signalled by Stop
  bool stopping_ = false;         // guarded by mu_
  std::thread thread_;            // last
};

}  // namespace tocl::daemon::cluster
