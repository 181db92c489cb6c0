// The soak's bookkeeping: reads what every worker process printed and
// recorded (killed ones too: soak_worker.cc says what the lines mean),
// holds what the library said of each message against what its receiver
// got, and adds up the figures. No Catch2 here.
//
//   SoakLedger ledger = ReadSoakLedger(workers.All(), threads, faults.begun(), hosts);
//   for (const std::string& problem : ledger.problems) ...   // empty: all held
//
// The promise under test (tocl/runtime.h): a message is received exactly
// once, or its sender is told it failed. Message by message, from the
// sender's records (Send's result, the final state of a short message's
// buffer) and the receivers' (every message received intact):
// - said sent (Send ok and, for a buffer, kSent) and never received: a
//   silent LOSS, unless its receiver was killed later (a killed process
//   cannot say what it had taken off the network but not yet from its
//   mailbox, nor what it got in its last moment: "to a killed receiver",
//   counted apart; what the killed receiver did record is checked);
// - received twice: a DUPLICATE;
// - never received and not said failed (still queued or in flight when its
//   sender stopped): UNRESOLVED;
// - received but never sent by a sender that lived: PHANTOM;
// - said failed and received anyway is allowed (kFailed means "not known
//   to have arrived"): counted.
// A sender killed between a Send and the library's word on it leaves the
// outcome unknown: counted apart, not judged.
// Besides: no worker printed an error line (bad checksums, sizes, headers,
// messages out of order, duplicates seen by the receiver); every worker
// alive at the end ended each thread's last stream cleanly (everything
// settled, the end answered) and its receivers got their end.
//
// Resume time (README.md): for a fault that began at T on host h, each
// thread pair whose sending or receiving worker is on h resumes at the
// first arrival, at its receiving thread (any incarnation), of a message
// its sending thread (any incarnation) sent at or after T; the resume time
// is that arrival minus T.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "soak_faults.h"
#include "soak_workers.h"

namespace tocl::testing {

struct SoakResume {
  uint64_t count = 0;  // pairs that resumed
  uint64_t none = 0;   // pairs that delivered nothing sent after the fault began
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

struct SoakFigures {
  uint64_t workers = 0;  // processes started
  uint64_t streams = 0;
  std::map<std::string, uint64_t> stream_ends;  // by reason
  // Messages, from the records.
  uint64_t sent = 0;  // Send returned
  uint64_t said_sent = 0;
  uint64_t bytes_said_sent = 0;
  uint64_t received = 0;  // intact, counted once
  uint64_t bytes_received = 0;
  uint64_t failed = 0;
  std::map<std::string, uint64_t> failed_by_reason;  // "send-error host-down", "kfailed ..."
  uint64_t failed_but_received = 0;
  uint64_t to_killed_receiver = 0;           // said sent, not in the killed receiver's records
  uint64_t to_killed_receiver_received = 0;  // said sent, in them
  uint64_t outcome_unknown = 0;              // sent, then its sender was killed before the word
  uint64_t outcome_unknown_received = 0;     // of those (or not recorded sent at all), received
  uint64_t stalls = 0;
  // Must be 0.
  uint64_t lost = 0;
  uint64_t dups = 0;
  uint64_t unresolved = 0;
  uint64_t phantom = 0;
  uint64_t bad = 0;  // bad checksums, sizes, headers, order (workers' counts)
  uint64_t errors = 0;
  // By fault kind ("all" too).
  std::map<std::string, SoakResume> resume;
};

struct SoakLedger {
  SoakFigures figures;
  std::vector<std::string> problems;
};

// `hosts`: host h's workers stream to host h % hosts + 1.
SoakLedger ReadSoakLedger(const std::vector<std::unique_ptr<SoakIncarnation>>& incarnations,
                          int threads, const std::vector<BegunFault>& faults, int hosts);

// Multi-line text of the figures, for the log.
std::string FormatFigures(const SoakFigures& figures);
// The figures as one JSON object (no newline).
std::string FiguresJson(const SoakFigures& figures);

}  // namespace tocl::testing
