// The sending threads of tocl-soak-worker (soak_worker.cc says what they
// print).
//
// A stream is one sending thread Gid talking to one receiving thread: seqs
// from 0, at most `window` unacknowledged. Any trouble (a failed send, a
// buffer that ends kFailed, an exit notice for the receiver, a stall) ends
// the stream, and the next one starts from a newly enrolled Gid: a new
// thread pair, so that nothing the old pair left held up (tocl/README's
// known limits) stands in its way.
#include <algorithm>
#include <deque>
#include <set>
#include <thread>

#include "soak_message.h"
#include "soak_worker.h"
#include "tocl/exit_notice.h"

namespace tocl::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kPoll{200};
// The pause between a stream that ended in trouble and the next.
constexpr milliseconds kFirstBackoff{100};
constexpr milliseconds kLastBackoff{2000};
// How long a stream's last messages get to settle (sent or failed) after it
// ended, so that every failure is printed before the Gid leaves.
constexpr milliseconds kSettle{3000};

struct Outstanding {
  uint64_t seq = 0;
  uint64_t size = 0;
  Buffer buffer;  // a short message, kept to watch its state; empty for a long one
  bool failure_printed = false;
};

class SendingThread {
 public:
  SendingThread(SoakContext& context, int index, SoakCounters& counters)
      : context_(context),
        index_(index),
        counters_(counters),
        sizes_(context.options.seed * 1000003 + context.runtime.gid().raw() + index,
               context.runtime.short_max_payload(), context.options.long_every) {}

  void Run() {
    milliseconds backoff = kFirstBackoff;
    while (!context_.stopping.load()) {
      std::optional<Gid> receiver = FindReceiver();
      if (!receiver) break;
      const uint64_t acked_before = counters_.acked.load();
      const std::string reason = RunStream(*receiver);
      if (reason == "exited") dead_.insert(*receiver);
      if (reason == "stop" || reason == "drain-timeout") break;
      // Give whatever went wrong a moment before the next stream, longer
      // each time a stream got nothing through.
      backoff = counters_.acked.load() > acked_before ? kFirstBackoff
                                                      : std::min(2 * backoff, kLastBackoff);
      std::this_thread::sleep_for(backoff);
    }
    context_.out.Print("send-done thread {}", index_);
  }

 private:
  // The newest running receiving thread `index_` of the target host (the
  // highest Gid: process ids only grow), asking the local daemon until there
  // is one, on a host that is up, or the stop signal comes.
  std::optional<Gid> FindReceiver() {
    const Gid host = Gid::Host(static_cast<uint32_t>(context_.options.target_host));
    const std::string query =
        fmt::format("kind=thread and name=soak-recv-{} and host=h{} and state=running", index_,
                    context_.options.target_host);
    while (!context_.stopping.load()) {
      // The query's "running" includes the threads of a host that is down.
      auto target = context_.directory.Lookup(host);
      auto found = context_.directory.QueryAll(query);
      if (target.ok() && target->state == EntityState::kRunning && found.ok()) {
        std::optional<Gid> newest;
        for (const Entity& entity : *found) {
          if (dead_.count(entity.gid) == 0 && (!newest || entity.gid > *newest)) {
            newest = entity.gid;
          }
        }
        if (newest) return newest;
      }
      std::this_thread::sleep_for(milliseconds(250));
    }
    return std::nullopt;
  }

  // Runs one stream to its end; the reason it ended.
  std::string RunStream(Gid receiver) {
    auto self = context_.runtime.EnrollThread(fmt::format("soak-send-{}", index_));
    if (!self.ok()) {
      Error("enroll", 0, self.status().ToString());
      std::this_thread::sleep_for(milliseconds(500));
      return "enroll";
    }
    self_ = *self;
    seq_ = 0;
    acked_ = 0;
    acked_next_ = 0;
    skipped_ = 0;
    window_.clear();
    ++counters_.streams;
    context_.out.Print("stream thread {} sender {} receiver {} at {}", index_, self_.ToString(),
                       receiver.ToString(), TimeOfDay());
    auto watch = context_.runtime.Notify(self_, receiver, kSoakNoticeTag);
    std::string reason = Stream(receiver);
    if (reason.empty()) reason = Drain(receiver);
    Settle();
    context_.out.Print(
        "stream-end thread {} sender {} receiver {} sent {} acked {} acked_next {} skipped {} "
        "reason {} at {} unacked {}",
        index_, self_.ToString(), receiver.ToString(), seq_, acked_, acked_next_, skipped_, reason,
        TimeOfDay(), Unacked());
    if (watch.ok()) (void)context_.runtime.CancelNotify(*watch);
    (void)context_.runtime.LeaveThread(self_);
    window_.clear();
    return reason;
  }

  // Sends and takes acks until the stop signal ("" then) or trouble (why).
  std::string Stream(Gid receiver) {
    auto progress = Clock::now();
    while (!context_.stopping.load()) {
      while (window_.size() < context_.options.window && !context_.stopping.load() &&
             Clock::now() >= next_send_) {
        if (window_.empty()) progress = Clock::now();
        if (!SendNext(receiver)) return "failed";
        Pace();
      }
      // Wait for a reply no longer than until the next send is due.
      auto wait = kPoll;
      if (window_.size() < context_.options.window) {
        wait = std::clamp(std::chrono::duration_cast<milliseconds>(next_send_ - Clock::now()),
                          milliseconds(1), kPoll);
      }
      std::string trouble = TakeReply(receiver, progress, wait);
      if (!trouble.empty()) return trouble;
      if (CheckFailures()) return "failed";
      if (!window_.empty() && Clock::now() - progress > context_.options.stall_timeout) {
        ++counters_.stalls;
        return "stall";
      }
    }
    return "";
  }

  // After the stop signal: everything acknowledged, then the end message
  // and its answer.
  std::string Drain(Gid receiver) {
    const auto deadline = Clock::now() + context_.options.drain_timeout;
    auto progress = Clock::now();
    while (!window_.empty()) {
      if (Clock::now() > deadline) return "drain-timeout";
      std::string trouble = TakeReply(receiver, progress, kPoll);
      if (!trouble.empty()) return trouble;
      if (CheckFailures()) return "failed";
    }
    const auto end = EncodeSoakControl({self_, seq_});
    if (Status sent =
            context_.runtime.Send(self_, receiver, kSoakEndTag, std::span<const std::byte>(end));
        !sent.ok()) {
      Error("end", seq_, sent.ToString());
      return "failed";
    }
    while (Clock::now() < deadline) {
      auto got = context_.runtime.RecvFor(self_, kPoll, receiver, kSoakEndAckTag);
      if (got.ok()) {
        auto answer = ParseSoakControl(got->span());
        if (!answer.ok() || answer->sender != self_ || answer->number != seq_) {
          Error("end-ack", seq_,
                answer.ok() ? fmt::format("the receiver expects seq {} next, we sent {}",
                                          answer->number, seq_)
                            : answer.status().ToString());
        }
        return "stop";
      }
      if (got.status().code() != StatusCode::kDeadlineExceeded) return "failed";
    }
    return "drain-timeout";
  }

  bool SendNext(Gid receiver) {
    const uint64_t size = sizes_.Next();
    const uint64_t seq = seq_;
    Status sent;
    Buffer buffer;
    if (size <= context_.runtime.short_max_payload()) {
      auto got = context_.runtime.GetBuffer(size, Network::kFastest, AtCap::kWait,
                                            context_.options.stall_timeout);
      if (!got.ok()) {
        sent = got.status();
      } else {
        buffer = std::move(got).value();
        buffer.resize(size);
        FillSoakMessage(buffer.span(), self_, seq);
        // By lvalue: the handle stays ours, so its state tells whether it failed.
        sent = context_.runtime.Send(self_, receiver, kSoakDataTag, buffer);
      }
    } else {
      long_message_.resize(size);
      FillSoakMessage(long_message_, self_, seq);
      sent = context_.runtime.Send(self_, receiver, kSoakDataTag,
                                   std::span<const std::byte>(long_message_));
    }
    ++seq_;
    ++counters_.sent;
    if (!sent.ok()) {
      PrintFailed(seq, sent.ToString());
      return false;
    }
    window_.push_back({seq, size, std::move(buffer)});
    return true;
  }

  // --rate: the next send is due one period after this one (never more than
  // a period behind now: a stream that waited does not burst after).
  void Pace() {
    if (context_.options.rate == 0) return;
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / static_cast<double>(context_.options.rate)));
    next_send_ = std::max(next_send_ + period, Clock::now() - period);
  }

  // Takes one ack or notice (waiting up to `wait`): "" or the reason the
  // stream ends.
  std::string TakeReply(Gid receiver, Clock::time_point& progress, milliseconds wait) {
    auto got = context_.runtime.RecvFor(self_, wait, receiver, kAnyTag);
    if (!got.ok()) {
      if (got.status().code() == StatusCode::kDeadlineExceeded) return "";
      Error("receive", seq_, got.status().ToString());
      return "cancelled";
    }
    if (got->tag() == kSoakNoticeTag) {
      auto notice = ParseExitNotice(*got);
      if (!notice.ok()) {
        Error("notice", seq_, notice.status().ToString());
        return "notice";
      }
      return std::string(ExitWhatName(notice->what));
    }
    if (got->tag() != kSoakAckTag) {
      Error("tag", seq_, fmt::format("unexpected tag {}", got->tag()));
      return "ack-error";
    }
    auto ack = ParseSoakControl(got->span());
    if (!ack.ok() || ack->sender != self_) {
      Error("ack", seq_, ack.ok() ? "an ack for another stream" : ack.status().ToString());
      return "ack-error";
    }
    const uint64_t seq = ack->number;
    // Acks come in order: one for a seq not waiting, or twice, is a fault.
    if (window_.empty() || seq < window_.front().seq || seq > window_.back().seq) {
      Error("ack", seq,
            fmt::format("an ack for seq {}, waiting for {}..{}", seq,
                        window_.empty() ? seq_ : window_.front().seq, seq_));
      return "ack-error";
    }
    while (window_.front().seq < seq) {
      // Its ack failed on the way back (the receiver counted it): not "told delivered".
      ++skipped_;
      ++counters_.skipped;
      window_.pop_front();
    }
    ++acked_;
    ++counters_.acked;
    counters_.bytes_acked += window_.front().size;
    acked_next_ = seq + 1;
    window_.pop_front();
    progress = Clock::now();
    return "";
  }

  // Prints every short message of the window whose buffer ended kFailed;
  // true when there was one.
  bool CheckFailures() {
    bool any = false;
    for (Outstanding& message : window_) {
      if (!message.buffer.valid() || message.buffer.state() != BufferState::kFailed) continue;
      any = true;
      if (!message.failure_printed) PrintFailed(message.seq, "its buffer ended kFailed");
      message.failure_printed = true;
    }
    return any;
  }

  // The stream is over: its short messages still on their way get a moment
  // to be sent or fail, so that the test hears of every failure.
  void Settle() {
    const auto deadline = Clock::now() + kSettle;
    for (;;) {
      CheckFailures();
      bool moving = false;
      for (const Outstanding& message : window_) {
        const BufferState state =
            message.buffer.valid() ? message.buffer.state() : BufferState::kSent;
        moving |= state == BufferState::kQueued || state == BufferState::kInFlight;
      }
      if (!moving || Clock::now() > deadline) return;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  // What is still unacknowledged, for the stream-end line: "-", or
  // "seq:bytes:state,..." (state of a short message's buffer, "long" for a
  // long one whose Send returned).
  std::string Unacked() const {
    if (window_.empty()) return "-";
    std::string text;
    for (const Outstanding& message : window_) {
      text += fmt::format("{}{}:{}:{}", text.empty() ? "" : ",", message.seq, message.size,
                          message.buffer.valid() ? BufferStateName(message.buffer.state())
                                                 : std::string_view("long"));
    }
    return text;
  }

  void PrintFailed(uint64_t seq, const std::string& status) {
    ++counters_.failed;
    context_.out.Print("failed thread {} sender {} seq {} at {} status {}", index_,
                       self_.ToString(), seq, TimeOfDay(), status);
  }

  void Error(const char* what, uint64_t seq, const std::string& status) {
    ++counters_.errors;
    context_.out.Print("error thread {} side send what {} sender {} seq {} at {} status {}", index_,
                       what, self_.ToString(), seq, TimeOfDay(), status);
  }

  SoakContext& context_;
  const int index_;
  SoakCounters& counters_;
  SoakSizeMix sizes_;
  std::set<Gid> dead_;  // receivers an exit notice said are gone
  std::vector<std::byte> long_message_;
  // The stream being run.
  Gid self_;
  uint64_t seq_ = 0;  // the next seq to send
  uint64_t acked_ = 0;
  uint64_t acked_next_ = 0;  // one past the highest seq acknowledged
  uint64_t skipped_ = 0;
  std::deque<Outstanding> window_;
  Clock::time_point next_send_ = Clock::now();  // --rate
};

}  // namespace

void RunSendingThread(SoakContext& context, int index, SoakCounters& counters) {
  SendingThread(context, index, counters).Run();
}

}  // namespace tocl::testing
