// tocl-soak-worker: one process of the fault-injection soak
// (tests/soak/soak_test.cc), using only the public API.
//
//   tocl-soak-worker --target-host H [--threads N] [--window W] [--seed S]
//                    [--long-every K] [--rate R] [--stats-ms MS]
//                    [--stall-ms MS] [--drain-ms MS] [--records PREFIX]
//
// Daemon and networks come from $TOCL_DAEMON and $TOCL_NETWORKS. It runs N
// receiving threads, enrolled as "soak-recv-I", and N sending threads; the
// sending thread I streams to the newest running "soak-recv-I" of host H,
// found in the directory (so a receiver that was killed and started again
// is found again), at most R messages a second (--rate; 0, the default: as
// fast as the window of W short messages queued or in flight allows). Data
// messages (soak_message.h) are not answered: what the library says of
// each (Send's result; the final state, kSent or kFailed, of a short one's
// buffer, kept by the sender and watched to the end) is recorded, and the
// driver holds it against what the receivers recorded. SIGUSR1 is the stop
// signal: senders send nothing new, wait until every buffer is kSent or
// kFailed, end their stream with an end message and its answer; receivers
// stop once the end came and nothing more arrives.
//
// Records (--records PREFIX; every line one write(2), so that a worker
// killed by SIGKILL leaves all it finished; soak_ledger.h reads them):
//   PREFIX.send
//     stream I S R          sending thread I starts stream S (a new thread Gid) to receiver R
//     sent S Q BYTES        Send of seq Q returned (its outcome follows, on this or a later line)
//     ok S Q                the library said it was sent: the buffer of a short one became
//                           kSent, a long one's Send returned ok
//     failed S Q HOW WHY    the library said it failed: HOW send-error (Send returned an
//                           error) or kfailed (the buffer ended kFailed); WHY (soak_sender.cc):
//                           receiver-exited, host-down, daemon-away, unavailable, ...
//     unresolved S Q        still queued or in flight when the drain time was up
//   PREFIX.recv
//     got I S Q BYTES SENT ARRIVED   receiving thread I got seq Q of stream S, intact, sent
//                                    and received at these steady-clock times (ns)
//
// Lines on stdout, flushed, "EVENT key value ..." ("at": the time of day, to
// line them up with logs):
//
//   started pid P / gid thread I gid G (receivers) / ready
//   stream thread I sender G receiver R at T      a sending thread's new stream
//   failed thread I sender G seq Q how H why W at T status S
//                                                 the library said a message failed
//   no-buffer thread I sender G seq Q at T status S
//                                                 no pool buffer within --stall-ms: the
//                                                 stream ends before seq Q
//   stream-end thread I sender G receiver R sent N ok K failed F pending P reason WHY at T
//       WHY: stop (all settled, end answered), failed, exited, unreachable (an exit
//       notice), stall (a buffer queued or in flight for --stall-ms), drain-timeout, ...
//       P: buffers still queued or in flight; watched on, their outcomes recorded later
//   error thread I side send|recv what W sender G seq Q at T status S
//                                                 duplicates, bad checksums, messages out
//                                                 of order, ...: never expected
//   stat thread I streams .. sent .. ok .. bytes_ok .. failed .. pending .. stalls ..
//        received .. bytes_received .. dups .. bad .. errors ..
//                                                 every --stats-ms and once at the end
//   recv-end thread I sender G received R next N count C    an end message came
//   recv-stream thread I sender G received R next N dups .. bad ..
//                                                 at the end, one per stream it saw
//   send-done thread I unresolved U / recv-done thread I ends E / done
//
// Exit codes: 0 no error line, 1 error lines (or no runtime), 2 usage.
#include "soak_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tocl::testing {

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tocl-soak-worker: %s\n"
               "usage: tocl-soak-worker --target-host H [--threads N] [--window W] [--seed S] "
               "[--long-every K] [--rate R] [--stats-ms MS] [--stall-ms MS] [--drain-ms MS] "
               "[--records PREFIX]\n",
               why.c_str());
  return 2;
}

Status ParseOptions(int argc, char** argv, SoakWorkerOptions& options) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return InvalidArgument(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--records") {
      options.records = value;
      continue;
    }
    uint64_t number = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || end != value.data() + value.size()) {
      return InvalidArgument(fmt::format("{} takes a number, not '{}'", flag, value));
    }
    if (flag == "--target-host") {
      options.target_host = static_cast<int>(number);
    } else if (flag == "--threads") {
      options.threads = static_cast<int>(number);
    } else if (flag == "--window") {
      options.window = number;
    } else if (flag == "--seed") {
      options.seed = number;
    } else if (flag == "--rate") {
      options.rate = static_cast<uint32_t>(number);
    } else if (flag == "--long-every") {
      options.long_every = static_cast<uint32_t>(number);
    } else if (flag == "--stats-ms") {
      options.stats_interval = std::chrono::milliseconds(number);
    } else if (flag == "--stall-ms") {
      options.stall_timeout = std::chrono::milliseconds(number);
    } else if (flag == "--drain-ms") {
      options.drain_timeout = std::chrono::milliseconds(number);
    } else {
      return InvalidArgument("unknown flag " + flag);
    }
  }
  if (options.target_host < 1 || options.target_host > 65535) {
    return InvalidArgument("--target-host is a host number, 1..65535");
  }
  if (options.threads < 1 || options.threads > 32) return InvalidArgument("--threads is 1..32");
  if (options.window < 1 || options.window > 1024) return InvalidArgument("--window is 1..1024");
  if (options.stats_interval.count() < 10) return InvalidArgument("--stats-ms is at least 10");
  return Status();
}

void PrintStats(LinePrinter& out, const std::vector<std::unique_ptr<SoakCounters>>& counters) {
  for (size_t i = 0; i < counters.size(); ++i) {
    const SoakCounters& c = *counters[i];
    out.Print(
        "stat thread {} streams {} sent {} ok {} bytes_ok {} failed {} pending {} stalls {} "
        "received {} bytes_received {} dups {} bad {} errors {}",
        i, c.streams.load(), c.sent.load(), c.ok.load(), c.bytes_ok.load(), c.failed.load(),
        c.pending.load(), c.stalls.load(), c.received.load(), c.bytes_received.load(),
        c.dups.load(), c.bad.load(), c.errors.load());
  }
}

// Prints the stats line every interval until Stop().
class StatsPrinter {
 public:
  StatsPrinter(LinePrinter& out, const std::vector<std::unique_ptr<SoakCounters>>& counters,
               std::chrono::milliseconds interval)
      : thread_([this, &out, &counters, interval] {
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, interval, [this] { return stopped_; })) {
            PrintStats(out, counters);
          }
        }) {}
  ~StatsPrinter() { Stop(); }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace

SoakRecordFile::SoakRecordFile(const std::string& path) : path_(path) {
  if (!path_.empty()) fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

SoakRecordFile::~SoakRecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SoakRecordFile::Write(const std::string& line) {
  if (fd_ < 0) return;
  const std::string whole = line + "\n";
  std::lock_guard lock(mu_);
  // A regular file takes a short write whole; EINTR cannot come (every
  // signal is blocked but for those that kill).
  (void)!::write(fd_, whole.data(), whole.size());
}

namespace {

int Run(const SoakWorkerOptions& options, LinePrinter& out, const sigset_t& stop_signal) {
  SoakRecordFile sent_records(options.records.empty() ? "" : options.records + ".send");
  SoakRecordFile received_records(options.records.empty() ? "" : options.records + ".recv");
  if (!sent_records.ok() || !received_records.ok()) {
    out.Print(
        "error thread 0 side worker what records sender null seq 0 status cannot open {}.*: "
        "errno {}",
        options.records, errno);
    return 1;
  }
  RuntimeOptions runtime_options;
  runtime_options.name = "soak-worker";
  auto runtime = Runtime::Start(runtime_options);
  if (!runtime.ok()) {
    out.Print("error thread 0 side worker what start sender null seq 0 status {}",
              runtime.status().ToString());
    return 1;
  }
  auto directory = DirectoryClient::Connect();
  if (!directory.ok()) {
    out.Print("error thread 0 side worker what directory sender null seq 0 status {}",
              directory.status().ToString());
    return 1;
  }
  std::vector<std::unique_ptr<SoakCounters>> counters;
  std::vector<Gid> receivers;
  for (int i = 0; i < options.threads; ++i) {
    counters.push_back(std::make_unique<SoakCounters>());
    auto gid = (*runtime)->EnrollThread(fmt::format("soak-recv-{}", i));
    if (!gid.ok()) {
      out.Print("error thread {} side worker what enroll sender null seq 0 status {}", i,
                gid.status().ToString());
      return 1;
    }
    receivers.push_back(*gid);
    out.Print("gid thread {} gid {}", i, gid->ToString());
  }

  std::atomic<bool> stopping{false};
  SoakContext context{**runtime,    **directory,      options, out,
                      sent_records, received_records, stopping};
  std::vector<std::thread> receiving;
  std::vector<std::thread> sending;
  for (int i = 0; i < options.threads; ++i) {
    receiving.emplace_back([&, i] { RunReceivingThread(context, i, receivers[i], *counters[i]); });
  }
  for (int i = 0; i < options.threads; ++i) {
    sending.emplace_back([&, i] { RunSendingThread(context, i, *counters[i]); });
  }
  out.Print("ready");
  {
    StatsPrinter stats(out, counters, options.stats_interval);
    int signal = 0;
    while (sigwait(&stop_signal, &signal) != 0) {
    }
    stopping = true;
    for (std::thread& thread : sending) thread.join();
    for (std::thread& thread : receiving) thread.join();
  }
  PrintStats(out, counters);
  uint64_t errors = 0;
  for (const auto& c : counters) errors += c->errors.load();
  if (Status down = (*runtime)->Shutdown(); !down.ok()) {
    out.Print("error thread 0 side worker what shutdown sender null seq 0 status {}",
              down.ToString());
    ++errors;
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tocl::testing

int main(int argc, char** argv) {
  using namespace tocl::testing;
  SoakWorkerOptions options;
  if (tocl::Status parsed = ParseOptions(argc, argv, options); !parsed.ok()) {
    return Usage(parsed.message());
  }
  // Blocked before any thread starts, so every thread inherits the mask and
  // only sigwait takes the stop signal.
  sigset_t stop_signal;
  sigemptyset(&stop_signal);
  sigaddset(&stop_signal, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signal, nullptr);
  LinePrinter out;
  out.Print("started pid {}", ::getpid());
  const int code = Run(options, out, stop_signal);
  out.Print("done");
  return code;
}
