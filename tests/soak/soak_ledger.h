// The soak's bookkeeping: reads what every worker process printed (killed
// ones too: soak_worker.cc says what the lines mean), checks the promise
// under test and adds up the figures. No Catch2 here.
//
//   SoakLedger ledger = ReadSoakLedger(workers.All(), threads);
//   for (const std::string& problem : ledger.problems) ...   // empty: all held
//
// What is checked:
// - no worker printed an error line (a duplicate, a bad checksum or size, a
//   message from the wrong sender, an ack out of order, ...);
// - every stream's acknowledged messages are among what its receiver got:
//   acked <= received and acked_next <= next (the receiver takes messages in
//   seq order, so its "next" says every seq below it came or was a gap);
//   a receiver that no longer exists to say (killed) is fine, one that
//   should but has no record of an acknowledged stream is not;
// - every gap (seqs a receiver never got while later ones came) is made of
//   messages whose sender was told they failed;
// - every worker alive at the end ended each thread's last stream cleanly
//   (all acknowledged, the end answered) and its receivers got their end.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "soak_workers.h"

namespace tocl::testing {

struct SoakFigures {
  uint64_t workers = 0;  // processes started
  uint64_t streams = 0;
  uint64_t sent = 0;
  uint64_t acked = 0;
  uint64_t bytes_acked = 0;
  uint64_t received = 0;
  uint64_t bytes_received = 0;
  uint64_t failed = 0;
  uint64_t skipped = 0;
  uint64_t stalls = 0;
  uint64_t ack_failed = 0;
  uint64_t gaps = 0;
  uint64_t dups = 0;
  uint64_t bad = 0;
  uint64_t errors = 0;
  // Acknowledged messages their receiver does not have.
  uint64_t lost = 0;
  // Gap messages whose sender was not told they failed.
  uint64_t unexplained_gaps = 0;
  std::map<std::string, uint64_t> stream_ends;  // by reason
};

struct SoakLedger {
  SoakFigures figures;
  std::vector<std::string> problems;
};

SoakLedger ReadSoakLedger(const std::vector<std::unique_ptr<SoakIncarnation>>& incarnations,
                          int threads);

// Multi-line text of the figures, for the log.
std::string FormatFigures(const SoakFigures& figures);

}  // namespace tocl::testing
