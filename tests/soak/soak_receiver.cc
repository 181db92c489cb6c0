// The receiving threads of tocl-soak-worker (soak_worker.cc says what they
// print).
#include <map>

#include "soak_message.h"
#include "soak_worker.h"

namespace tocl::testing {
namespace {

using Clock = std::chrono::steady_clock;

// What came from one stream (one sending thread Gid).
struct FromStream {
  uint64_t next = 0;  // the seq expected next
  uint64_t received = 0;
  uint64_t gaps = 0;
  uint64_t dups = 0;
  uint64_t bad = 0;
  uint64_t ack_failed = 0;
};

class ReceivingThread {
 public:
  ReceivingThread(SoakContext& context, int index, Gid self, SoakCounters& counters)
      : context_(context), index_(index), self_(self), counters_(counters) {}

  void Run() {
    std::optional<Clock::time_point> stop_at;
    int ends = 0;
    for (;;) {
      if (context_.stopping.load()) {
        if (!stop_at) stop_at = Clock::now();
        // The drain: our sender's stream ends with an end message once all
        // of it is acknowledged; twice its drain time covers the sender's
        // wait for acks and then for the end's answer.
        if (ends > 0 || Clock::now() - *stop_at > 2 * context_.options.drain_timeout) break;
      }
      auto got = context_.runtime.RecvFor(self_, std::chrono::milliseconds(200));
      if (!got.ok()) {
        if (got.status().code() == StatusCode::kDeadlineExceeded) continue;
        Error("receive", Gid(), 0, got.status().ToString());
        if (got.status().code() == StatusCode::kCancelled) break;
        continue;
      }
      const Buffer message = std::move(got).value();
      if (message.tag() == kSoakDataTag) {
        OnData(message);
      } else if (message.tag() == kSoakEndTag) {
        OnEnd(message);
        ++ends;
      } else {
        Error("tag", message.source(), 0, "unexpected tag " + std::to_string(message.tag()));
      }
    }
    for (const auto& [sender, stream] : streams_) {
      context_.out.Print(
          "recv-stream thread {} sender {} received {} next {} gaps {} dups {} bad {}", index_,
          sender.ToString(), stream.received, stream.next, stream.gaps, stream.dups, stream.bad);
    }
    context_.out.Print("recv-done thread {} ends {}", index_, ends);
  }

 private:
  void OnData(const Buffer& message) {
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
    if (header->seq < stream.next) {
      // The sender never sends a seq twice: this is a duplicate delivery.
      ++stream.dups;
      ++counters_.dups;
      Error("dup", source, header->seq, "next was " + std::to_string(stream.next));
      return;
    }
    if (header->seq > stream.next) {
      // Later messages overtook these: allowed by tocl only for messages
      // whose sending failed (the test checks the sender said so).
      const uint64_t missing = header->seq - stream.next;
      stream.gaps += missing;
      counters_.gaps += missing;
      context_.out.Print("gap thread {} sender {} first {} last {} at {}", index_,
                         source.ToString(), stream.next, header->seq - 1, TimeOfDay());
    }
    stream.next = header->seq + 1;
    ++stream.received;
    ++counters_.received;
    counters_.bytes_received += header->size;
    const auto ack = EncodeSoakControl({source, header->seq});
    if (Status sent =
            context_.runtime.Send(self_, source, kSoakAckTag, std::span<const std::byte>(ack));
        !sent.ok()) {
      // The sender never learns of this one: it is not counted as delivered.
      ++counters_.ack_failed;
      if (stream.ack_failed++ == 0) {
        context_.out.Print("ack-failed thread {} sender {} seq {} at {} status {}", index_,
                           source.ToString(), header->seq, TimeOfDay(), sent.ToString());
      }
    }
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
                       source.ToString(), stream.received, stream.next, end->number);
    const auto answer = EncodeSoakControl({source, stream.next});
    if (!context_.runtime.Send(self_, source, kSoakEndAckTag, std::span<const std::byte>(answer))
             .ok()) {
      ++counters_.ack_failed;
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
