#include "soak_ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "seq_ranges.h"

namespace tocl::testing {
namespace {

// What the sender's records say of a message.
enum class Outcome : uint8_t { kNotSent, kPending, kOk, kFailed, kUnresolved };

// One stream, as its sender recorded it (by seq).
struct StreamBook {
  std::string label;  // the sending worker
  bool sender_killed = false;
  std::string receiver;
  std::vector<Outcome> outcome;
  std::vector<uint32_t> bytes;
};

// (sent, arrived) of a message at a receiving thread, steady clock ns.
using Arrival = std::pair<uint64_t, uint64_t>;

// Problems of one kind past this many are counted, not listed.
constexpr size_t kExamples = 5;

std::string Describe(const WorkerEvent& event) {
  std::string text = event.name;
  for (const auto& [key, value] : event.fields) {
    if (key != "status") text += fmt::format(" {} {}", key, value);
  }
  if (event.fields.count("status") > 0) text += " status " + event.Field("status");
  return text;
}

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> words;
  while (!line.empty()) {
    const size_t space = line.find(' ');
    if (space != 0) words.push_back(line.substr(0, space));
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return words;
}

bool Number(std::string_view text, uint64_t& value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

// Adds problems of one kind: the first few in full, then a count.
class ProblemList {
 public:
  ProblemList(std::vector<std::string>& problems, std::string kind)
      : problems_(problems), kind_(std::move(kind)) {}
  ~ProblemList() {
    if (count_ > kExamples) {
      problems_.push_back(fmt::format("... {} more {}", count_ - kExamples, kind_));
    }
  }
  void Add(const std::string& problem) {
    if (count_++ < kExamples) problems_.push_back(problem);
  }

 private:
  std::vector<std::string>& problems_;
  const std::string kind_;
  size_t count_ = 0;
};

// The resume time of every thread pair a fault touched (SoakLedger's
// definition), by fault kind.
std::map<std::string, SoakResume> ResumeTimes(
    std::map<std::pair<int, int>, std::vector<Arrival>>& arrivals,
    const std::vector<BegunFault>& faults, int hosts, int threads) {
  // Sorted by send time, with the earliest arrival of any message sent at or
  // after each one's send time.
  std::map<std::pair<int, int>, std::vector<uint64_t>> earliest_from;
  for (auto& [pair, list] : arrivals) {
    std::sort(list.begin(), list.end());
    std::vector<uint64_t>& earliest = earliest_from[pair];
    earliest.resize(list.size());
    uint64_t best = UINT64_MAX;
    for (size_t i = list.size(); i-- > 0;) earliest[i] = best = std::min(best, list[i].second);
  }
  std::map<std::string, std::vector<double>> samples;
  std::map<std::string, uint64_t> none;
  for (const BegunFault& begun : faults) {
    const uint64_t start = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(begun.start.time_since_epoch())
            .count());
    const std::string kind = FaultKindName(begun.fault.kind);
    // The pairs into the host and out of it: by their receiving host.
    const int into = begun.fault.host;
    const int out_of = begun.fault.host % hosts + 1;
    for (int receiving_host : {into, out_of}) {
      for (int thread = 0; thread < threads; ++thread) {
        const std::vector<Arrival>& list = arrivals[{receiving_host, thread}];
        const std::vector<uint64_t>& earliest = earliest_from[{receiving_host, thread}];
        auto first = std::lower_bound(list.begin(), list.end(), Arrival{start, 0});
        for (const std::string& key : {kind, std::string("all")}) {
          if (first == list.end()) {
            ++none[key];
          } else {
            const uint64_t arrived = earliest[static_cast<size_t>(first - list.begin())];
            samples[key].push_back(static_cast<double>(arrived - start) / 1e6);
          }
        }
      }
    }
  }
  std::map<std::string, SoakResume> resume;
  for (auto& [key, values] : samples) {
    std::sort(values.begin(), values.end());
    SoakResume& r = resume[key];
    r.count = values.size();
    auto at = [&](double fraction) {
      const size_t index = static_cast<size_t>(fraction * static_cast<double>(values.size() - 1));
      return values[index];
    };
    r.p50_ms = at(0.5);
    r.p99_ms = at(0.99);
    r.max_ms = values.back();
  }
  for (const auto& [key, count] : none) resume[key].none = count;
  return resume;
}

}  // namespace

SoakLedger ReadSoakLedger(const std::vector<std::unique_ptr<SoakIncarnation>>& incarnations,
                          int threads, const std::vector<BegunFault>& faults, int hosts) {
  SoakLedger ledger;
  SoakFigures& figures = ledger.figures;
  std::vector<std::string>& problems = ledger.problems;
  std::unordered_map<std::string, StreamBook> streams;  // by sender Gid
  // Received intact, by sender Gid then seq: how many times.
  std::unordered_map<std::string, std::vector<uint8_t>> received;
  std::map<std::pair<int, int>, std::vector<Arrival>> arrivals;  // by (host, receiving thread)
  std::map<std::string, bool> receiver_killed;                   // by receiving thread Gid
  std::vector<std::pair<std::string, WorkerEvent>> unclean;      // last streams not ended "stop"
  ProblemList error_lines(problems, "error lines");
  ProblemList bad_records(problems, "unreadable record lines");

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
        error_lines.Add(label + ": " + Describe(event));
      } else if (name == "stream-end") {
        ++figures.stream_ends[event.Field("reason")];
        last_end[event.Number("thread")] = event;
      } else if (name == "recv-done") {
        recv_done_ends[event.Number("thread")] = event.Number("ends");
      } else if (name == "gid") {
        receiver_killed[event.Field("gid")] = incarnation->killed;
      } else if (name == "done") {
        done = true;
      }
    }
    for (const auto& [thread, stat] : last_stats) {
      figures.streams += stat.Number("streams");
      figures.stalls += stat.Number("stalls");
      figures.bad += stat.Number("bad");
      figures.errors += stat.Number("errors");
    }

    if (!incarnation->records.empty()) {
      std::ifstream sent(incarnation->records + ".send");
      for (std::string line; std::getline(sent, line);) {
        const std::vector<std::string_view> w = Words(line);
        uint64_t seq = 0;
        if (w.size() == 4 && w[0] == "stream") {
          StreamBook& book = streams[std::string(w[2])];
          book.label = label;
          book.sender_killed = incarnation->killed;
          book.receiver = std::string(w[3]);
          continue;
        }
        if (w.size() < 3 || !Number(w[2], seq) || seq > (1u << 30)) {
          bad_records.Add(fmt::format("{}.send: '{}'", label, line));
          continue;
        }
        StreamBook& book = streams[std::string(w[1])];
        if (book.outcome.size() <= seq) {
          book.outcome.resize(seq + 1, Outcome::kNotSent);
          book.bytes.resize(seq + 1, 0);
        }
        uint64_t bytes = 0;
        if (w[0] == "sent" && w.size() == 4 && Number(w[3], bytes)) {
          ++figures.sent;
          book.outcome[seq] = Outcome::kPending;
          book.bytes[seq] = static_cast<uint32_t>(bytes);
        } else if (w[0] == "ok" && w.size() == 3) {
          book.outcome[seq] = Outcome::kOk;
        } else if (w[0] == "failed" && w.size() == 5) {
          book.outcome[seq] = Outcome::kFailed;
          ++figures.failed_by_reason[fmt::format("{} {}", w[3], w[4])];
        } else if (w[0] == "unresolved" && w.size() == 3) {
          book.outcome[seq] = Outcome::kUnresolved;
        } else {
          bad_records.Add(fmt::format("{}.send: '{}'", label, line));
        }
      }
      std::ifstream got(incarnation->records + ".recv");
      for (std::string line; std::getline(got, line);) {
        // got I S Q BYTES SENT ARRIVED
        const std::vector<std::string_view> w = Words(line);
        uint64_t thread = 0, seq = 0, bytes = 0, sent_ns = 0, arrived_ns = 0;
        if (w.size() != 7 || w[0] != "got" || !Number(w[1], thread) || !Number(w[3], seq) ||
            !Number(w[4], bytes) || !Number(w[5], sent_ns) || !Number(w[6], arrived_ns) ||
            seq > (1u << 30)) {
          bad_records.Add(fmt::format("{}.recv: '{}'", label, line));
          continue;
        }
        std::vector<uint8_t>& counts = received[std::string(w[2])];
        if (counts.size() <= seq) counts.resize(seq + 1, 0);
        if (counts[seq]++ == 0) {
          ++figures.received;
          figures.bytes_received += bytes;
          arrivals[{incarnation->host, static_cast<int>(thread)}].push_back({sent_ns, arrived_ns});
        }
      }
    }

    if (incarnation->killed) continue;
    // A worker that lived to the end stopped cleanly.
    if (!done) problems.push_back(label + " did not print 'done'");
    for (uint64_t thread = 0; thread < static_cast<uint64_t>(threads); ++thread) {
      auto last = last_end.find(thread);
      if (last == last_end.end() || last->second.Field("reason") != "stop") {
        unclean.emplace_back(label, last == last_end.end() ? WorkerEvent{} : last->second);
      }
      auto receiver = recv_done_ends.find(thread);
      if (receiver == recv_done_ends.end() || receiver->second == 0) {
        problems.push_back(
            fmt::format("{} thread {}: its receiving thread got no end message from its sender",
                        label, thread));
      }
    }
  }
  for (const auto& [label, end] : unclean) {
    problems.push_back(
        fmt::format("{}: a last stream did not end cleanly (all settled, end answered): {}", label,
                    end.name.empty() ? "none" : Describe(end)));
  }

  // Message by message.
  {
    ProblemList lost(problems, "streams with silent losses");
    ProblemList unresolved(problems, "streams with unresolved messages");
    ProblemList phantom(problems, "streams with messages never sent");
    ProblemList dups(problems, "streams with duplicates");
    for (auto& [sender, book] : streams) {
      static const std::vector<uint8_t> kNone;
      auto found = received.find(sender);
      const std::vector<uint8_t>& counts = found == received.end() ? kNone : found->second;
      auto killed = receiver_killed.find(book.receiver);
      const bool receiver_gone = killed != receiver_killed.end() && killed->second;
      SeqRanges lost_seqs, unresolved_seqs, phantom_seqs, dup_seqs;
      const size_t last = std::max(book.outcome.size(), counts.size());
      for (size_t seq = 0; seq < last; ++seq) {
        const Outcome outcome = seq < book.outcome.size() ? book.outcome[seq] : Outcome::kNotSent;
        const uint8_t times = seq < counts.size() ? counts[seq] : 0;
        if (times > 1) {
          figures.dups += times - 1;
          dup_seqs.Add(seq);
        }
        switch (outcome) {
          case Outcome::kOk:
            ++figures.said_sent;
            figures.bytes_said_sent += book.bytes[seq];
            if (receiver_gone) {
              ++(times > 0 ? figures.to_killed_receiver_received : figures.to_killed_receiver);
            } else if (times == 0) {
              ++figures.lost;
              lost_seqs.Add(seq);
            }
            break;
          case Outcome::kFailed:
            ++figures.failed;
            if (times > 0) ++figures.failed_but_received;
            break;
          case Outcome::kPending:
          case Outcome::kNotSent:
            if (outcome == Outcome::kNotSent && times == 0) break;  // past the stream's end
            if (book.sender_killed) {
              // No word from the library: its sender was killed first (one
              // with no "sent" line was in its Send then).
              ++figures.outcome_unknown;
              if (times > 0) ++figures.outcome_unknown_received;
            } else if (outcome == Outcome::kNotSent) {
              ++figures.phantom;
              phantom_seqs.Add(seq);
            } else {
              ++figures.unresolved;
              unresolved_seqs.Add(seq);
            }
            break;
          case Outcome::kUnresolved:
            ++figures.unresolved;
            unresolved_seqs.Add(seq);
            break;
        }
      }
      const std::string stream =
          fmt::format("{} -> {} (sent by {}{})", sender, book.receiver,
                      book.label.empty() ? "?" : book.label, book.sender_killed ? ", killed" : "");
      if (!lost_seqs.empty()) {
        lost.Add(fmt::format("{}: said sent, never received: {}", stream, lost_seqs.ToString()));
      }
      if (!unresolved_seqs.empty()) {
        unresolved.Add(fmt::format("{}: neither sent nor failed when its sender stopped: {}",
                                   stream, unresolved_seqs.ToString()));
      }
      if (!phantom_seqs.empty()) {
        phantom.Add(fmt::format("{}: received, never sent: {}", stream, phantom_seqs.ToString()));
      }
      if (!dup_seqs.empty()) {
        dups.Add(fmt::format("{}: received twice or more: {}", stream, dup_seqs.ToString()));
      }
    }
    // Messages of streams no sender recorded.
    for (const auto& [sender, counts] : received) {
      if (streams.count(sender) > 0) continue;
      const uint64_t count = static_cast<uint64_t>(
          std::count_if(counts.begin(), counts.end(), [](uint8_t times) { return times > 0; }));
      figures.phantom += count;
      phantom.Add(
          fmt::format("{} messages received from {}, which no sender recorded", count, sender));
    }
  }
  figures.resume = ResumeTimes(arrivals, faults, hosts, threads);
  return ledger;
}

std::string FormatFigures(const SoakFigures& f) {
  std::string reasons;
  for (const auto& [reason, count] : f.stream_ends) {
    reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", reason, count);
  }
  std::string failures;
  for (const auto& [reason, count] : f.failed_by_reason) {
    failures += fmt::format("{}{} {}", failures.empty() ? "" : ", ", reason, count);
  }
  std::string resume;
  for (const auto& [kind, r] : f.resume) {
    resume += fmt::format("    {}: {} pairs, p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms{}\n", kind,
                          r.count, r.p50_ms, r.p99_ms, r.max_ms,
                          r.none > 0 ? fmt::format(", {} without", r.none) : "");
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "  worker processes: {}; streams: {} (ended: {})\n"
      "  messages: Send returned {}; said sent {} ({:.1f} MiB); received {} ({:.1f} MiB)\n"
      "  said failed {} ({}); of them received anyway {}\n"
      "  to a killed receiver: {} said sent and in its records, {} said sent and not "
      "(unverifiable)\n"
      "  sender killed before the library's word: {} (received {})\n"
      "  SILENT LOSSES {}; DUPLICATES {}; unresolved {}; never sent {}; bad (checksum, size, "
      "header, order) {}; error lines {}; stalls {}\n"
      "  resume times (fault start to the first arrival of a message sent after it, per thread "
      "pair touched):\n{}",
      f.workers, f.streams, reasons.empty() ? "none" : reasons, f.sent, f.said_sent,
      f.bytes_said_sent / kMiB, f.received, f.bytes_received / kMiB, f.failed,
      failures.empty() ? "none" : failures, f.failed_but_received, f.to_killed_receiver_received,
      f.to_killed_receiver, f.outcome_unknown, f.outcome_unknown_received, f.lost, f.dups,
      f.unresolved, f.phantom, f.bad, f.errors, f.stalls, resume.empty() ? "    none\n" : resume);
}

std::string FiguresJson(const SoakFigures& f) {
  auto object = [](const std::map<std::string, uint64_t>& counts) {
    std::string text;
    for (const auto& [key, count] : counts) {
      text += fmt::format("{}\"{}\":{}", text.empty() ? "" : ",", key, count);
    }
    return "{" + text + "}";
  };
  std::string resume;
  for (const auto& [kind, r] : f.resume) {
    resume += fmt::format(
        "{}\"{}\":{{\"pairs\":{},\"without\":{},\"p50_ms\":{:.1f},\"p99_ms\":{:.1f},"
        "\"max_ms\":{:.1f}}}",
        resume.empty() ? "" : ",", kind, r.count, r.none, r.p50_ms, r.p99_ms, r.max_ms);
  }
  return fmt::format(
      "{{\"workers\":{},\"streams\":{},\"stream_ends\":{},\"send_returned\":{},\"said_sent\":{},"
      "\"bytes_said_sent\":{},\"received\":{},\"bytes_received\":{},\"failed\":{},"
      "\"failed_by_reason\":{},\"failed_but_received\":{},\"to_killed_receiver_received\":{},"
      "\"to_killed_receiver_unverifiable\":{},\"outcome_unknown_sender_killed\":{},"
      "\"outcome_unknown_received\":{},\"silent_losses\":{},\"duplicates\":{},\"unresolved\":{},"
      "\"never_sent\":{},\"bad\":{},\"error_lines\":{},\"stalls\":{},\"resume\":{{{}}}}}",
      f.workers, f.streams, object(f.stream_ends), f.sent, f.said_sent, f.bytes_said_sent,
      f.received, f.bytes_received, f.failed, object(f.failed_by_reason), f.failed_but_received,
      f.to_killed_receiver_received, f.to_killed_receiver, f.outcome_unknown,
      f.outcome_unknown_received, f.lost, f.dups, f.unresolved, f.phantom, f.bad, f.errors,
      f.stalls, resume);
}

}  // namespace tocl::testing
