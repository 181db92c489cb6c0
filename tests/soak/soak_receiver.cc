// The receiving threads of tocl-soak-worker (soak_worker.cc says what they
// print and record).
#include <map>

#include "seq_ranges.h"
#include "soak_message.h"
#include "soak_worker.h"

namespace tocl::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After the stop signal and the end message: how long nothing more must
// arrive before the thread stops. The end comes after everything the
// library said was sent, and from older streams of the same sender only
// what it still had out when the end left: that too is in this process by
// then, or never comes.
constexpr milliseconds kQuiet{1000};

// What came from one stream (one sending thread Gid).
struct FromStream {
  SeqRanges got;      // seqs received intact
  uint64_t next = 0;  // one past the highest seq received
  uint64_t dups = 0;
  uint64_t bad = 0;
};

class ReceivingThread {
 public:
  ReceivingThread(SoakContext& context, int index, Gid self, SoakCounters& counters)
      : context_(context), index_(index), self_(self), counters_(counters) {}

  void Run() {
    std::optional<Clock::time_point> stop_at;
    auto last_arrival = Clock::now();
    int ends = 0;
    for (;;) {
      if (context_.stopping.load()) {
        if (!stop_at) stop_at = Clock::now();
        // Our sender ends its stream with an end message once every buffer
        // it had out is final; twice its drain time covers that and the end.
        if ((ends > 0 && Clock::now() - last_arrival > kQuiet) ||
            Clock::now() - *stop_at > 2 * context_.options.drain_timeout) {
          break;
        }
      }
      auto got = context_.runtime.RecvFor(self_, milliseconds(200));
      if (!got.ok()) {
        if (got.status().code() == StatusCode::kDeadlineExceeded) continue;
        Error("receive", Gid(), 0, got.status().ToString());
        if (got.status().code() == StatusCode::kCancelled) break;
        continue;
      }
      const uint64_t arrived_ns = SteadyNowNs();
      last_arrival = Clock::now();
      const Buffer message = std::move(got).value();
      if (message.tag() == kSoakDataTag) {
        OnData(message, arrived_ns);
      } else if (message.tag() == kSoakEndTag) {
        OnEnd(message);
        ++ends;
      } else {
        Error("tag", message.source(), 0, "unexpected tag " + std::to_string(message.tag()));
      }
    }
    for (const auto& [sender, stream] : streams_) {
      context_.out.Print("recv-stream thread {} sender {} received {} next {} dups {} bad {}",
                         index_, sender.ToString(), stream.got.Count(), stream.next, stream.dups,
                         stream.bad);
    }
    context_.out.Print("recv-done thread {} ends {}", index_, ends);
  }

 private:
  void OnData(const Buffer& message, uint64_t arrived_ns) {
    const Gid source = message.source();
    FromStream& stream = streams_[source];
    auto header = CheckSoakMessage(message.span());
    if (!header.ok()) {
      ++stream.bad;
      ++counters_.bad;
      Error("bad", source, stream.next, header.status().ToString());
      return;
    }
    if (header->sender != source) {
      ++stream.bad;
      ++counters_.bad;
      Error("misrouted", source, header->seq, "it says it is from " + header->sender.ToString());
      return;
    }
    // Recorded before it is judged: the driver counts duplicates from the
    // records too.
    context_.received_records.Write(fmt::format("got {} {} {} {} {} {}", index_, source.ToString(),
                                                header->seq, header->size, header->sent_ns,
                                                arrived_ns));
    if (header->seq < stream.next) {
      // The sender never sends a seq twice: either a second delivery, or one
      // that overtook an earlier message of the same thread pair.
      const bool dup = stream.got.Contains(header->seq);
      ++(dup ? stream.dups : stream.bad);
      ++(dup ? counters_.dups : counters_.bad);
      Error(dup ? "dup" : "order", source, header->seq, "next was " + std::to_string(stream.next));
      return;
    }
    // A gap (seqs that never came while later ones did) is allowed for
    // messages the sender was told failed: the driver checks that.
    stream.got.Add(header->seq);
    stream.next = header->seq + 1;
    ++counters_.received;
    counters_.bytes_received += header->size;
  }

  void OnEnd(const Buffer& message) {
    const Gid source = message.source();
    auto end = ParseSoakControl(message.span());
    if (!end.ok() || end->sender != source) {
      Error("end", source, 0, end.ok() ? "for another stream" : end.status().ToString());
      return;
    }
    const FromStream& stream = streams_[source];
    context_.out.Print("recv-end thread {} sender {} received {} next {} count {}", index_,
                       source.ToString(), stream.got.Count(), stream.next, end->number);
    const auto answer = EncodeSoakControl({source, stream.next});
    if (Status sent = context_.runtime.Send(self_, source, kSoakEndAckTag,
                                            std::span<const std::byte>(answer));
        !sent.ok()) {
      Error("end-ack", source, end->number, sent.ToString());
    }
  }

  void Error(const char* what, Gid sender, uint64_t seq, const std::string& status) {
    ++counters_.errors;
    context_.out.Print("error thread {} side recv what {} sender {} seq {} at {} status {}", index_,
                       what, sender.ToString(), seq, TimeOfDay(), status);
  }

  SoakContext& context_;
  const int index_;
  const Gid self_;
  SoakCounters& counters_;
  std::map<Gid, FromStream> streams_;
};

}  // namespace

void RunReceivingThread(SoakContext& context, int index, Gid self, SoakCounters& counters) {
  ReceivingThread(context, index, self, counters).Run();
}

}  // namespace tocl::testing
