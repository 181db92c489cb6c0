// tocl-stream-ledger's two roles (helpers/stream_ledger.cc says what the
// program prints and how the test drives it): the sender's ledger of what
// the library promised about each message, and the receiver's record of
// what arrived.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stdin_watch.h"
#include "tocl/runtime.h"

namespace tocl::testing {

inline constexpr Tag kLedgerTag = 1;

struct LedgerOptions {
  std::string daemon;
  std::string role;
  std::string name = "stream-ledger";
  uint32_t threads = 1;
  std::vector<std::string> to;
  uint64_t rate = 0;  // messages/s for the whole process; 0: full speed
  uint32_t long_every = 0;
  size_t long_size = 256 * 1024;
  size_t short_size = 1024;
  uint32_t settle_ms = 30000;
  std::string kills;
};

// One line on stdout, whole (lines of several threads do not mix).
void Say(const std::string& line);

inline uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// send: thread i of `threads` streams to `peers[i]` until `stop`, then
// prints the ledger.
void StreamWithLedger(const LedgerOptions& options, Runtime& runtime, std::vector<Gid> threads,
                      std::vector<Gid> peers, const std::atomic<bool>& stop);

// receive: every thread of `threads` receives and checks until stdin
// closes, then prints what arrived and the resume times after the kills
// listed in `kills_path` ("" for none). False on an unexpected error.
bool ReceiveWithRecord(Runtime& runtime, std::vector<Gid> threads, StdinWatch& stdin_watch,
                       const std::string& kills_path);

}  // namespace tocl::testing
