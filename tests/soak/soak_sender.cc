// The sending threads of tocl-soak-worker (soak_worker.cc says what they
// print and record).
//
// A stream is one sending thread Gid talking to one receiving thread: seqs
// from 0, at most `window` short messages queued or in flight. Nothing is
// answered: the sender records what the library said of each message (its
// Send's result, and the final state of a short one's buffer, kept by the
// sender and watched until it is kSent or kFailed), and the driver holds
// those records against the receivers' (soak_ledger.h). Any trouble (a
// failed send, a buffer that ends kFailed, an exit notice for the receiver,
// a buffer queued or in flight for the stall time) ends the stream, and the
// next one starts from a newly enrolled Gid; the buffers the old stream
// left queued or in flight are watched on until they end.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>
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
// How often a buffer's state is looked at while one is queued or in flight:
// when its kSent is seen is the sender's only clock of delivery.
constexpr milliseconds kWatchPoll{5};
// The pause between a stream that ended in trouble and the next.
constexpr milliseconds kFirstBackoff{100};
constexpr milliseconds kLastBackoff{2000};
// How long a stream that ended in trouble gives its buffers to end before
// its thread leaves (they are watched on after).
constexpr milliseconds kSettle{3000};
// How long a buffer that ended kFailed waits for the exit notice that says
// why (it comes with the same news from the directory).
constexpr milliseconds kNoticeWait{1000};

// A short message sent by lvalue, watched until its buffer is final.
struct Watched {
  Gid sender;
  Gid receiver;
  uint64_t seq = 0;
  uint64_t size = 0;
  Buffer buffer;
  Clock::time_point sent_at;
};

bool Final(BufferState state) {
  return state == BufferState::kSent || state == BufferState::kFailed;
}

// Why a Send returned an error, as a word for the books.
std::string WhySendFailed(const Status& status) {
  const std::string& message = status.message();
  const auto says = [&](std::string_view text) { return message.find(text) != std::string::npos; };
  switch (status.code()) {
    case StatusCode::kFailedPrecondition:
      return says("exited") ? "receiver-exited" : "failed-precondition";
    case StatusCode::kUnavailable:
      if (says("is down")) return "host-down";
      if (says("did not answer within connect_timeout")) return "daemon-away";
      if (says("partial_timeout")) return "long-unanswered";
      return "unavailable";
    case StatusCode::kNotFound:
      return "not-found";
    default: {
      std::string name(StatusCodeName(status.code()));
      std::replace(name.begin(), name.end(), ' ', '-');
      return name;
    }
  }
}

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
      const uint64_t ok_before = counters_.ok.load();
      const std::string reason = RunStream(*receiver);
      if (reason == "exited") dead_.insert(*receiver);
      if (reason == "stop" || reason == "drain-timeout") break;
      // Give whatever went wrong a moment before the next stream, longer
      // each time a stream got nothing through.
      backoff =
          counters_.ok.load() > ok_before ? kFirstBackoff : std::min(2 * backoff, kLastBackoff);
      SleepWatching(backoff);
    }
    // Whatever is still queued or in flight gets the rest of the drain time.
    const auto deadline = Clock::now() + context_.options.drain_timeout;
    while (!settling_.empty() && Clock::now() < deadline) {
      Watch();
      std::this_thread::sleep_for(kWatchPoll);
    }
    for (const Watched& message : settling_) {
      context_.sent_records.Write(
          fmt::format("unresolved {} {}", message.sender.ToString(), message.seq));
    }
    context_.out.Print("send-done thread {} unresolved {}", index_, settling_.size());
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
      SleepWatching(milliseconds(250));
    }
    return std::nullopt;
  }

  // Runs one stream to its end; the reason it ended.
  std::string RunStream(Gid receiver) {
    auto self = context_.runtime.EnrollThread(fmt::format("soak-send-{}", index_));
    if (!self.ok()) {
      Error("enroll", 0, self.status().ToString());
      SleepWatching(milliseconds(500));
      return "enroll";
    }
    self_ = *self;
    receiver_ = receiver;
    seq_ = 0;
    ok_ = 0;
    failed_ = 0;
    awaited_notice_ = false;
    ++counters_.streams;
    context_.out.Print("stream thread {} sender {} receiver {} at {}", index_, self_.ToString(),
                       receiver.ToString(), TimeOfDay());
    context_.sent_records.Write(
        fmt::format("stream {} {} {}", index_, self_.ToString(), receiver.ToString()));
    auto watch = context_.runtime.Notify(self_, receiver, kSoakNoticeTag);
    std::string reason = Stream();
    if (reason.empty()) reason = Drain();
    if (reason != "stop") Settle();
    context_.out.Print(
        "stream-end thread {} sender {} receiver {} sent {} ok {} failed {} pending {} reason {} "
        "at {}",
        index_, self_.ToString(), receiver.ToString(), seq_, ok_, failed_, window_.size(), reason,
        TimeOfDay());
    // Watched on: their outcomes are recorded when they come.
    for (Watched& message : window_) settling_.push_back(std::move(message));
    window_.clear();
    if (watch.ok()) (void)context_.runtime.CancelNotify(*watch);
    (void)context_.runtime.LeaveThread(self_);
    return reason;
  }

  // Sends and watches until the stop signal ("" then) or trouble (why).
  std::string Stream() {
    while (!context_.stopping.load()) {
      while (window_.size() < context_.options.window && !context_.stopping.load() &&
             Clock::now() >= next_send_) {
        if (!SendNext()) return "failed";
        Pace();
      }
      // Wait for a notice no longer than until the next send is due, and
      // while buffers are out, no longer than the next look at them.
      milliseconds wait = window_.empty() && settling_.empty() ? kPoll : kWatchPoll;
      if (window_.size() < context_.options.window) {
        wait = std::clamp(std::chrono::duration_cast<milliseconds>(next_send_ - Clock::now()),
                          milliseconds(1), wait);
      }
      std::string trouble = TakeNotice(wait);
      if (!trouble.empty()) return trouble;
      if (Watch()) return "failed";
      if (!window_.empty() &&
          Clock::now() - window_.front().sent_at > context_.options.stall_timeout) {
        ++counters_.stalls;
        return "stall";
      }
    }
    return "";
  }

  // After the stop signal: every buffer final, then the end message and
  // its answer (the receiver has everything the library said was sent).
  std::string Drain() {
    const auto deadline = Clock::now() + context_.options.drain_timeout;
    while (!window_.empty() || !settling_.empty()) {
      if (Clock::now() > deadline) return "drain-timeout";
      std::string trouble = TakeNotice(kWatchPoll);
      if (!trouble.empty()) return trouble;
      if (Watch()) return "failed";
    }
    const auto end = EncodeSoakControl({self_, seq_});
    if (Status sent =
            context_.runtime.Send(self_, receiver_, kSoakEndTag, std::span<const std::byte>(end));
        !sent.ok()) {
      Error("end", seq_, sent.ToString());
      return "failed";
    }
    while (Clock::now() < deadline) {
      auto got = context_.runtime.RecvFor(self_, kPoll, receiver_, kSoakEndAckTag);
      if (got.ok()) {
        auto answer = ParseSoakControl(got->span());
        if (!answer.ok() || answer->sender != self_) {
          Error("end-ack", seq_, answer.ok() ? "for another stream" : answer.status().ToString());
        }
        return "stop";
      }
      if (got.status().code() != StatusCode::kDeadlineExceeded) return "failed";
    }
    return "drain-timeout";
  }

  // Sends the next message; false when the stream ends here.
  bool SendNext() {
    const uint64_t size = sizes_.Next();
    if (size <= context_.runtime.short_max_payload()) {
      auto got = context_.runtime.GetBuffer(size, Network::kFastest, AtCap::kWait,
                                            context_.options.stall_timeout);
      if (!got.ok()) {
        // Nothing was sent: the stream ends before this seq.
        context_.out.Print("no-buffer thread {} sender {} seq {} at {} status {}", index_,
                           self_.ToString(), seq_, TimeOfDay(), got.status().ToString());
        return false;
      }
      const uint64_t seq = seq_++;
      ++counters_.sent;
      Watched message{self_, receiver_, seq, size, std::move(got).value(), Clock::now()};
      message.buffer.resize(size);
      FillSoakMessage(message.buffer.span(), self_, seq, SteadyNowNs());
      // By lvalue: the handle stays ours, so its state tells how it ended.
      const Status sent = context_.runtime.Send(self_, receiver_, kSoakDataTag, message.buffer);
      RecordSent(seq, size);
      if (!sent.ok()) {
        Failed(self_, seq, "send-error", WhySendFailed(sent), sent.ToString());
        return false;
      }
      ++counters_.pending;
      window_.push_back(std::move(message));
      return true;
    }
    const uint64_t seq = seq_++;
    ++counters_.sent;
    long_message_.resize(size);
    FillSoakMessage(long_message_, self_, seq, SteadyNowNs());
    // A long Send returns once the receiver holds all of it: its result is final.
    const Status sent = context_.runtime.Send(self_, receiver_, kSoakDataTag,
                                              std::span<const std::byte>(long_message_));
    RecordSent(seq, size);
    if (!sent.ok()) {
      Failed(self_, seq, "send-error", WhySendFailed(sent), sent.ToString());
      return false;
    }
    Ok(self_, seq, size);
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

  // Takes the exit notice for the receiver if one comes within `wait`: ""
  // or the reason the stream ends.
  std::string TakeNotice(milliseconds wait) {
    auto got = context_.runtime.RecvFor(self_, wait, receiver_, kSoakNoticeTag);
    if (!got.ok()) {
      if (got.status().code() == StatusCode::kDeadlineExceeded) return "";
      Error("receive", seq_, got.status().ToString());
      return "cancelled";
    }
    auto notice = ParseExitNotice(*got);
    if (!notice.ok()) {
      Error("notice", seq_, notice.status().ToString());
      return "notice";
    }
    notices_[self_] = notice->what;
    return std::string(ExitWhatName(notice->what));
  }

  // Records the buffers (this stream's and older ones') that ended; true
  // when one of this stream's ended kFailed.
  bool Watch() {
    bool failed_here = false;
    auto settle = [&](std::deque<Watched>& messages, bool current) {
      for (auto it = messages.begin(); it != messages.end();) {
        const BufferState state = it->buffer.state();
        if (!Final(state)) {
          ++it;
          continue;
        }
        --counters_.pending;
        if (state == BufferState::kSent) {
          Ok(it->sender, it->seq, it->size);
        } else {
          if (current && !awaited_notice_) AwaitNotice();
          Failed(it->sender, it->seq, "kfailed", WhyBufferFailed(it->sender, it->receiver),
                 "its buffer ended kFailed");
          failed_here |= current;
        }
        it = messages.erase(it);
      }
    };
    settle(window_, true);
    settle(settling_, false);
    return failed_here;
  }

  // A stream that ended in trouble: its buffers get a moment to end before
  // its thread leaves.
  void Settle() {
    const auto deadline = Clock::now() + kSettle;
    while (!window_.empty() && Clock::now() < deadline) {
      Watch();
      std::this_thread::sleep_for(kWatchPoll);
    }
  }

  // Sleeps `pause`, looking at the buffers still out meanwhile.
  void SleepWatching(milliseconds pause) {
    const auto until = Clock::now() + pause;
    while (Clock::now() < until) {
      Watch();
      std::this_thread::sleep_for(std::min(
          settling_.empty() ? kPoll : kWatchPoll,
          std::chrono::duration_cast<milliseconds>(until - Clock::now()) + milliseconds(1)));
    }
  }

  // A buffer of this stream ended kFailed: the library fails a peer on news
  // from the directory, and the same news brings the notice that says why.
  void AwaitNotice() {
    awaited_notice_ = true;  // once a stream: more waits would only hold up its end
    if (notices_.count(self_) > 0) return;
    auto got = context_.runtime.RecvFor(self_, kNoticeWait, receiver_, kSoakNoticeTag);
    if (!got.ok()) return;
    auto notice = ParseExitNotice(*got);
    if (notice.ok()) notices_[self_] = notice->what;
  }

  // Why a buffer ended kFailed: the stream's exit notice, else what the
  // directory says of the receiver now.
  std::string WhyBufferFailed(Gid sender, Gid receiver) {
    auto notice = notices_.find(sender);
    if (notice != notices_.end()) {
      return notice->second == ExitWhat::kExited ? "receiver-exited" : "host-down";
    }
    auto host = context_.directory.Lookup(receiver.host());
    if (host.ok() && host->state != EntityState::kRunning) return "host-down";
    auto process = context_.directory.Lookup(receiver.process());
    if (process.ok()) {
      if (process->state == EntityState::kExited) return "receiver-exited";
      if (process->state == EntityState::kUnreachable) return "host-down";
      return "peer-running";
    }
    return "unknown";
  }

  void RecordSent(uint64_t seq, uint64_t size) {
    context_.sent_records.Write(fmt::format("sent {} {} {}", self_.ToString(), seq, size));
  }

  void Ok(Gid sender, uint64_t seq, uint64_t size) {
    context_.sent_records.Write(fmt::format("ok {} {}", sender.ToString(), seq));
    ++counters_.ok;
    counters_.bytes_ok += size;
    if (sender == self_) ++ok_;
  }

  void Failed(Gid sender, uint64_t seq, const char* how, const std::string& why,
              const std::string& status) {
    context_.sent_records.Write(
        fmt::format("failed {} {} {} {}", sender.ToString(), seq, how, why));
    ++counters_.failed;
    if (sender == self_) ++failed_;
    context_.out.Print("failed thread {} sender {} seq {} how {} why {} at {} status {}", index_,
                       sender.ToString(), seq, how, why, TimeOfDay(), status);
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
  std::set<Gid> dead_;               // receivers an exit notice said are gone
  std::map<Gid, ExitWhat> notices_;  // by stream: the notice it got
  std::vector<std::byte> long_message_;
  std::deque<Watched> settling_;  // older streams' buffers still queued or in flight
  // The stream being run.
  Gid self_;
  Gid receiver_;
  uint64_t seq_ = 0;  // the next seq to send
  uint64_t ok_ = 0;
  uint64_t failed_ = 0;
  bool awaited_notice_ = false;
  std::deque<Watched> window_;                  // its buffers queued or in flight, oldest first
  Clock::time_point next_send_ = Clock::now();  // --rate
};

}  // namespace

void RunSendingThread(SoakContext& context, int index, SoakCounters& counters) {
  SendingThread(context, index, counters).Run();
}

}  // namespace tocl::testing
