// tocl-long-worker: the two ends of the netns long-message tests, through
// the public API only (tocl/runtime.h). See long_worker.cc for the command
// line and the lines it prints.
#pragma once

#include <fmt/core.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tocl/gid.h"
#include "tocl/runtime.h"

namespace tocl::testing {

inline constexpr Tag kDataTag = 1;
inline constexpr Tag kEndTag = 2;

struct WorkerOptions {
  RuntimeOptions runtime;
  int threads = 1;
  bool pause_before_exit = false;  // print "paused" after the network lines, wait for the go signal
  // recv
  int senders = 1;                     // end markers each receiving thread waits for
  uint64_t into_bytes = 0;             // > 0: RecvInto a buffer of this size, else Recv
  std::chrono::milliseconds slow{0};   // pause after each message received
  std::chrono::seconds patience{120};  // longest wait for any one message
  // send
  std::vector<Gid> to;                    // thread i sends to to[i % to.size()]
  std::string plan;                       // test_message.h: ParsePlan
  std::chrono::milliseconds progress{0};  // > 0: print fragment counts this often
  bool wait_after_failure = false;        // after a failed Send, wait for the go signal, go on
  bool pause_before_end = false;          // wait for the go signal before the end markers
};

// Whole lines on stdout, flushed, from any thread: "EVENT key value ...".
class LinePrinter {
 public:
  template <typename... Args>
  void Print(fmt::format_string<Args...> format, Args&&... args) {
    std::string line = fmt::format(format, std::forward<Args>(args)...);
    std::lock_guard lock(mu_);
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

// The go signal: end of file on stdin (the test closes the pipe). Returns at
// once when it came before.
void WaitForGo();

// The "network", "peer" and "vi" lines (long_worker.cc) of the runtime's
// networks now.
void PrintNetworks(const Runtime& runtime, LinePrinter& out);

int RunReceiver(Runtime& runtime, const WorkerOptions& options, LinePrinter& out);
int RunSender(Runtime& runtime, const WorkerOptions& options, LinePrinter& out);

}  // namespace tocl::testing
