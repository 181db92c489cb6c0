#include "soak_ledger.h"

#include <fmt/format.h>

#include <set>

namespace tocl::testing {
namespace {

// What a receiver said about one stream (by its sender Gid).
struct ReceiverRecord {
  std::string label;  // the receiving worker
  uint64_t received = 0;
  uint64_t next = 0;
};

struct StreamEnd {
  std::string label;  // the sending worker
  WorkerEvent event;
};

constexpr uint64_t kLargestGapChecked = 1'000'000;

std::string Describe(const WorkerEvent& event) {
  std::string text = event.name;
  for (const auto& [key, value] : event.fields) {
    if (key != "status") text += fmt::format(" {} {}", key, value);
  }
  if (event.fields.count("status") > 0) text += " status " + event.Field("status");
  return text;
}

}  // namespace

SoakLedger ReadSoakLedger(const std::vector<std::unique_ptr<SoakIncarnation>>& incarnations,
                          int threads) {
  SoakLedger ledger;
  SoakFigures& figures = ledger.figures;
  std::map<std::string, std::set<uint64_t>> failed;  // by sender Gid
  std::map<std::string, ReceiverRecord> receivers;   // by sender Gid
  std::set<std::string> killed_receivers;            // receiving thread Gids of killed workers
  std::vector<std::pair<std::string, WorkerEvent>> gaps;
  std::vector<StreamEnd> ends;
  std::vector<std::pair<std::string, WorkerEvent>> unclean;  // last streams not ended by "stop"

  for (const auto& incarnation : incarnations) {
    const std::string label = incarnation->Label();
    ++figures.workers;
    std::map<uint64_t, WorkerEvent> last_stats;
    std::map<uint64_t, WorkerEvent> last_end;     // by thread
    std::map<uint64_t, uint64_t> recv_done_ends;  // by thread
    bool done = false;
    for (WorkerEvent& event : incarnation->worker->Events("")) {
      const std::string& name = event.name;
      if (name == "stat") {
        last_stats[event.Number("thread")] = event;
      } else if (name == "error") {
        ledger.problems.push_back(label + ": " + Describe(event));
      } else if (name == "failed") {
        failed[event.Field("sender")].insert(event.Number("seq"));
      } else if (name == "gap") {
        gaps.emplace_back(label, event);
      } else if (name == "stream-end") {
        ++figures.stream_ends[event.Field("reason")];
        last_end[event.Number("thread")] = event;
        ends.push_back({label, event});
      } else if (name == "recv-stream") {
        receivers[event.Field("sender")] = {label, event.Number("received"), event.Number("next")};
      } else if (name == "recv-end") {
        // The final recv-stream line (printed later) says the same or more.
        receivers.emplace(event.Field("sender"),
                          ReceiverRecord{label, event.Number("received"), event.Number("next")});
      } else if (name == "recv-done") {
        recv_done_ends[event.Number("thread")] = event.Number("ends");
      } else if (name == "gid" && incarnation->killed) {
        killed_receivers.insert(event.Field("gid"));
      } else if (name == "done") {
        done = true;
      }
    }
    for (const auto& [thread, stat] : last_stats) {
      figures.streams += stat.Number("streams");
      figures.sent += stat.Number("sent");
      figures.acked += stat.Number("acked");
      figures.bytes_acked += stat.Number("bytes_acked");
      figures.received += stat.Number("received");
      figures.bytes_received += stat.Number("bytes_received");
      figures.failed += stat.Number("failed");
      figures.skipped += stat.Number("skipped");
      figures.stalls += stat.Number("stalls");
      figures.ack_failed += stat.Number("ack_failed");
      figures.gaps += stat.Number("gaps");
      figures.dups += stat.Number("dups");
      figures.bad += stat.Number("bad");
      figures.errors += stat.Number("errors");
    }
    if (incarnation->killed) continue;
    // A worker that lived to the end stopped cleanly.
    if (!done) ledger.problems.push_back(label + " did not print 'done'");
    for (uint64_t thread = 0; thread < static_cast<uint64_t>(threads); ++thread) {
      auto last = last_end.find(thread);
      if (last == last_end.end() || last->second.Field("reason") != "stop") {
        unclean.emplace_back(label, last == last_end.end() ? WorkerEvent{} : last->second);
      }
      auto receiver = recv_done_ends.find(thread);
      if (receiver == recv_done_ends.end() || receiver->second == 0) {
        ledger.problems.push_back(
            fmt::format("{} thread {}: its receiving thread got no end message from its sender",
                        label, thread));
      }
    }
  }

  for (const auto& [label, end] : unclean) {
    // What its receiver got says whether data or acks were stuck.
    auto record = receivers.find(end.Field("sender"));
    ledger.problems.push_back(fmt::format(
        "{}: a last stream did not end cleanly (all acknowledged, end answered): {}; its "
        "receiver {}",
        label, end.name.empty() ? "none" : Describe(end),
        record == receivers.end() ? "has no record of it"
                                  : fmt::format("({}) received {}, next {}", record->second.label,
                                                record->second.received, record->second.next)));
  }

  for (const auto& [label, gap] : gaps) {
    const std::string sender = gap.Field("sender");
    const uint64_t first = gap.Number("first");
    const uint64_t last = gap.Number("last");
    if (last < first || last - first >= kLargestGapChecked) {
      ledger.problems.push_back(label + ": an absurd gap: " + Describe(gap));
      continue;
    }
    const std::set<uint64_t>& told = failed[sender];
    uint64_t unexplained = 0;
    for (uint64_t seq = first; seq <= last; ++seq) unexplained += told.count(seq) == 0 ? 1 : 0;
    if (unexplained > 0) {
      figures.unexplained_gaps += unexplained;
      ledger.problems.push_back(fmt::format(
          "{}: {} messages of {} (seqs {}..{}) never came while later ones did, and {} of them "
          "were not reported failed to their sender",
          label, last - first + 1, sender, first, last, unexplained));
    }
  }

  for (const StreamEnd& end : ends) {
    const WorkerEvent& event = end.event;
    const std::string sender = event.Field("sender");
    const uint64_t acked = event.Number("acked");
    const uint64_t acked_next = event.Number("acked_next");
    auto record = receivers.find(sender);
    if (record == receivers.end()) {
      if (acked > 0 && killed_receivers.count(event.Field("receiver")) == 0) {
        ledger.problems.push_back(fmt::format(
            "{}: stream {} -> {} had {} messages acknowledged, and its receiver, still running, "
            "has no record of it",
            end.label, sender, event.Field("receiver"), acked));
        figures.lost += acked;
      }
      continue;
    }
    if (acked > record->second.received || acked_next > record->second.next) {
      const uint64_t lost = acked > record->second.received ? acked - record->second.received : 1;
      figures.lost += lost;
      ledger.problems.push_back(fmt::format(
          "{}: stream {} -> {}: {} acknowledged up to seq {}, but {} received only {} (next {})",
          end.label, sender, event.Field("receiver"), acked, acked_next, record->second.label,
          record->second.received, record->second.next));
    }
  }
  return ledger;
}

std::string FormatFigures(const SoakFigures& f) {
  std::string reasons;
  for (const auto& [reason, count] : f.stream_ends) {
    reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", reason, count);
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "  worker processes: {}; streams: {} (ended: {})\n"
      "  messages: sent {}, acknowledged {} ({:.1f} MiB), received {} ({:.1f} MiB)\n"
      "  sends failed {}, sent but never acknowledged (ack lost) {}, stalls {}, acks that failed "
      "{}\n"
      "  LOST acknowledged messages: {}; duplicates: {}; bad checksums: {}; gaps: {} "
      "(unexplained: {}); error lines: {}\n",
      f.workers, f.streams, reasons.empty() ? "none" : reasons, f.sent, f.acked,
      f.bytes_acked / kMiB, f.received, f.bytes_received / kMiB, f.failed, f.skipped, f.stalls,
      f.ack_failed, f.lost, f.dups, f.bad, f.gaps, f.unexplained_gaps, f.errors);
}

}  // namespace tocl::testing
