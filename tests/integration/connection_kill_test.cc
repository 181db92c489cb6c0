// Connections destroyed under a live stream (issue #18, "Prove it"). Two
// tocl-stream-ledger processes stream numbered, checksummed messages over
// tcp (one network, or two: 127.0.0.1 and 127.0.0.2), over via (its
// sockets provider: one tcp connection per VI) or over via and tcp, four thread pairs,
// short messages only or 1 in 10 long (256 KiB), at full speed or paced,
// while the test destroys the tcp connections between the two processes
// with `ss -K`, ten times, alternately on the sender's side and on the
// receiver's (with two networks: one network's connections two kills in
// three, both networks' the third). Both processes live throughout, so
// runtime.h's promise must hold message by message against what the sender
// was told (its ledger): every message whose Send returned ok (and whose
// buffer reached kSent) was received exactly once, in order per thread
// pair, checksum intact; every other was reported failed; and since a
// broken connection is not a dead peer, none fails and the stream resumes
// after each kill: every receiving thread gets a message sent after it.
// The time to resume (until the last pair has one) is printed, p50 and
// max, with each run's totals, as a warning: `ctest -L kill -V`.
//
// Only the connections of the two processes are touched: ss selects them by
// the addresses their listeners publish in the directory (the sender's
// connection to the receiver's listener and the receiver's to the
// sender's), so the daemon's and other tests' sockets are never touched.
// Needs root (ss -K: CAP_NET_ADMIN) and a kernel with
// CONFIG_INET_DIAG_DESTROY; without root the test says so and passes.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_harness.h"
#include "messaging_support.h"
#include "seq_ranges.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr uint32_t kPairs = 4;
constexpr int kKills = 10;
constexpr uint64_t kWarmUp = 1000;  // messages received before the first kill
// How long the stream may take to resume after a kill before the test
// calls it stopped (generous: two cores, shared with other tests).
constexpr milliseconds kResumeDeadline(3000);

const char* StreamLedgerPath() {
  return TOCL_STREAM_LEDGER_PATH;
}

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady_clock::now().time_since_epoch())
          .count());
}

struct Traffic {
  const char* name;
  uint64_t rate;        // messages/s of the sender; 0: full speed
  uint32_t long_every;  // 0: short messages only
};
constexpr Traffic kTraffic[] = {
    {"short messages at full speed", 0, 0},
    {"1 in 10 long at full speed", 0, 10},
    {"short messages paced at 2000/s", 2000, 0},
    {"1 in 10 long paced at 2000/s", 2000, 10},
};

// --- the helpers' output -----------------------------------------------------------

using Fields = std::map<std::string, std::string>;

// The key=value fields of every line of `output` that starts with `prefix`
// and a space.
std::vector<Fields> Records(const std::string& output, const std::string& prefix) {
  std::vector<Fields> records;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(prefix + " ", 0) != 0) continue;
    Fields fields;
    std::istringstream words(line.substr(prefix.size() + 1));
    std::string word;
    while (words >> word) {
      const size_t equals = word.find('=');
      if (equals != std::string::npos) fields[word.substr(0, equals)] = word.substr(equals + 1);
    }
    records.push_back(std::move(fields));
  }
  return records;
}

// The helpers' last lines (their ledgers, and the errors their runtimes
// logged last), without the progress lines.
std::string Tail(const std::string& output) {
  std::string kept;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("progress ", 0) != 0) kept += line + "\n";
  }
  constexpr size_t kMax = 6000;
  return kept.size() > kMax ? "..." + kept.substr(kept.size() - kMax) : kept;
}

uint64_t Number(const Fields& fields, const std::string& key) {
  auto found = fields.find(key);
  return found == fields.end() ? 0 : std::strtoull(found->second.c_str(), nullptr, 10);
}

SeqRanges Ranges(const Fields& fields, const std::string& key) {
  auto found = fields.find(key);
  std::optional<SeqRanges> ranges =
      found == fields.end() ? std::nullopt : SeqRanges::Parse(found->second);
  INFO(key << "=" << (found == fields.end() ? "(missing)" : found->second));
  REQUIRE(ranges.has_value());
  return *ranges;
}

// --- the killer ----------------------------------------------------------------------

enum class Side { kSender, kReceiver };
constexpr int kAllNetworks = -1;

// One tcp or via network of the two processes: the listener ("IP:PORT")
// each published on it in the directory (via's sockets provider listens on
// tcp too: each VI is a tcp connection).
struct NetworkListeners {
  std::string name;  // "tcp", "tcp-1", "via", ...
  std::string sender, receiver;
};

std::vector<NetworkListeners> ListenersOf(DirectoryClient& client, Gid sender, Gid receiver) {
  const Entity sending = REQUIRE_VALUE(client.Lookup(sender));
  const Entity receiving = REQUIRE_VALUE(client.Lookup(receiver));
  auto listener = [](const Endpoint& endpoint) {
    // "IP:PORT/PREFIX", or via's "sockets:IP:PORT/PREFIX".
    std::string address = endpoint.address.substr(0, endpoint.address.find('/'));
    if (endpoint.subsystem.rfind("via", 0) == 0) {
      REQUIRE(address.rfind("sockets:", 0) == 0);
      address = address.substr(std::string_view("sockets:").size());
    }
    return address;
  };
  std::vector<NetworkListeners> networks;
  for (const Endpoint& ours : sending.endpoints) {
    if (ours.subsystem.rfind("tcp", 0) != 0 && ours.subsystem.rfind("via", 0) != 0) continue;
    for (const Endpoint& theirs : receiving.endpoints) {
      if (theirs.subsystem == ours.subsystem) {
        networks.push_back({ours.subsystem, listener(ours), listener(theirs)});
      }
    }
  }
  REQUIRE_FALSE(networks.empty());
  return networks;
}

size_t Lines(const std::string& text) {
  size_t lines = 0;
  std::istringstream input(text);
  for (std::string line; std::getline(input, line);) lines += !line.empty();
  return lines;
}

// Destroys the tcp connections between two processes (tcp's, and via's
// VIs over its sockets provider) with `ss -K`. A socket of a connection to
// a process's listener has that listener's address as its destination on
// the connecting side and as its source on the accepting side: that is how
// ss selects them, and nothing else.
class ConnectionKiller {
 public:
  ConnectionKiller(std::string ss, std::vector<NetworkListeners> networks)
      : ss_(std::move(ss)), networks_(std::move(networks)) {}

  int networks() const { return static_cast<int>(networks_.size()); }

  // The sockets of `side`'s process on `network` (an index, or all): its
  // connections to the other's listener and those its own listener accepted.
  std::string Filter(Side side, int network = kAllNetworks) const {
    std::string filter;
    auto add = [&](const char* direction, const std::string& address) {
      filter += (filter.empty() ? "( " : " or ") + std::string(direction) + " " + address;
    };
    for (int n = 0; n < networks(); ++n) {
      if (network != kAllNetworks && n != network) continue;
      const NetworkListeners& listeners = networks_[n];
      add("dst", side == Side::kSender ? listeners.receiver : listeners.sender);
      add("src", side == Side::kSender ? listeners.sender : listeners.receiver);
    }
    return filter + " )";
  }

  // The established connections between the two processes, one line each
  // (the sender's sockets).
  std::string Established() const {
    return Run({"-tnH", "state", "established", Filter(Side::kSender)});
  }
  // The networks that have a connection in `established` (a listing).
  std::vector<int> Connected(const std::string& established) const {
    std::vector<int> connected;
    for (int n = 0; n < networks(); ++n) {
      std::istringstream words(established);
      for (std::string word; words >> word;) {
        if (word == networks_[n].sender || word == networks_[n].receiver) {
          connected.push_back(n);
          break;
        }
      }
    }
    return connected;
  }
  // Destroys `side`'s sockets on `network`; how many.
  size_t Kill(Side side, int network) const {
    return Lines(Run({"-KtnH", "state", "established", Filter(side, network)}));
  }

 private:
  std::string Run(std::vector<std::string> args) const {
    args.insert(args.begin(), ss_);
    const ProgramResult result = REQUIRE_VALUE(RunProgram(args, seconds(10)));
    INFO(args[1] << " " << args.back() << ": " << result.output);
    REQUIRE(result.exit_code == 0);
    return result.output;
  }

  std::string ss_;
  std::vector<NetworkListeners> networks_;
};

// --- one run -----------------------------------------------------------------------------

struct Kill {
  Side side;
  int network = kAllNetworks;
  size_t sockets = 0;  // destroyed
  uint64_t at_ns = 0;  // when ss returned
  bool resumed = false;
};

struct Outcome {
  uint64_t ok = 0, failed = 0, send_errors = 0, state_failed = 0, unresolved = 0;
  uint64_t received = 0, silent = 0, phantom = 0, failed_but_arrived = 0;
  uint64_t duplicates = 0, reordered = 0, corrupt = 0;
  std::string silent_example;  // the first pair with a silent loss
  std::vector<uint64_t> resume_us;
  bool resumed_after_last = false;
};

std::vector<std::string> LedgerCommand(const Daemon& daemon, const std::string& role,
                                       const std::string& name) {
  return {StreamLedgerPath(),
          "--daemon",
          daemon.address(),
          "--role",
          role,
          "--name",
          name,
          "--threads",
          std::to_string(kPairs)};
}

// Compares the sender's ledger with what the receiver got.
Outcome Compare(const std::string& sender_output, const std::string& receiver_output) {
  Outcome outcome;
  const std::vector<Fields> done = Records(sender_output, "done");
  REQUIRE(done.size() == 1);
  outcome.send_errors = Number(done[0], "send_errors");
  outcome.state_failed = Number(done[0], "state_failed");
  const std::vector<Fields> received_done = Records(receiver_output, "done");
  REQUIRE(received_done.size() == 1);
  outcome.corrupt = Number(received_done[0], "corrupt");
  CHECK(Number(received_done[0], "errors") == 0);

  std::map<std::pair<std::string, std::string>, Fields> received;
  for (Fields& pair : Records(receiver_output, "received")) {
    received[{pair["from"], pair["to"]}] = pair;
    outcome.duplicates += Number(pair, "duplicates");
    outcome.reordered += Number(pair, "reordered");
  }
  const std::vector<Fields> ledgers = Records(sender_output, "ledger");
  REQUIRE(ledgers.size() == kPairs);
  for (const Fields& ledger : ledgers) {
    const SeqRanges ok = Ranges(ledger, "ok"), failed = Ranges(ledger, "failed");
    auto found = received.find({ledger.at("from"), ledger.at("to")});
    const SeqRanges got = found == received.end() ? SeqRanges() : Ranges(found->second, "seqs");
    if (found != received.end()) received.erase(found);
    const SeqRanges silent = ok.Minus(got);
    if (!silent.empty() && outcome.silent_example.empty()) {
      outcome.silent_example = ledger.at("from") + " -> " + ledger.at("to") + ": sent ok " +
                               ok.ToString() + ", received " + got.ToString();
    }
    outcome.ok += ok.Count();
    outcome.failed += failed.Count();
    outcome.unresolved += Ranges(ledger, "unresolved").Count();
    outcome.received += got.Count();
    outcome.silent += silent.Count();
    outcome.phantom += got.Minus(ok).Minus(failed).Count();
    outcome.failed_but_arrived += failed.Intersect(got).Count();
  }
  // Messages from a pair the sender never had.
  for (const auto& [pair, fields] : received) outcome.phantom += Ranges(fields, "seqs").Count();

  for (const Fields& resume : Records(receiver_output, "resume")) {
    const bool resumed = resume.at("us") != "none";
    if (resumed) outcome.resume_us.push_back(Number(resume, "us"));
    outcome.resumed_after_last = resumed;
  }
  return outcome;
}

std::string Describe(const Outcome& outcome, const std::vector<Kill>& kills) {
  std::vector<uint64_t> resume = outcome.resume_us;
  std::sort(resume.begin(), resume.end());
  std::ostringstream text;
  // "s0:1": on the sender's side, network 0, 1 socket destroyed.
  text << kills.size() << " kills (";
  for (const Kill& kill : kills) {
    text << (&kill == &kills.front() ? "" : " ") << (kill.side == Side::kSender ? 's' : 'r')
         << (kill.network == kAllNetworks ? std::string("*") : std::to_string(kill.network)) << ":"
         << kill.sockets;
  }
  text << "), messages ok " << outcome.ok << " (received " << outcome.received << "), failed "
       << outcome.failed << " (Send error " << outcome.send_errors << ", kFailed "
       << outcome.state_failed << ", of them arrived " << outcome.failed_but_arrived
       << "), unresolved " << outcome.unresolved << "; silent losses " << outcome.silent
       << ", duplicates " << outcome.duplicates << ", reordered " << outcome.reordered
       << ", corrupt " << outcome.corrupt << ", never sent " << outcome.phantom << "; resume after "
       << resume.size() << " of " << kills.size() << " kills";
  if (!resume.empty()) {
    text << ": p50 " << resume[resume.size() / 2] / 1000.0 << " ms, max " << resume.back() / 1000.0
         << " ms";
  }
  return text.str();
}

// Kills the connections kKills times, each time once there is one (the
// first, or the one the stream reconnected), alternating sides (the first
// on `first_side`: 0 the sender's, 1 the receiver's), and waits after each
// until every receiving thread has a message sent after it; stops at the
// first kill the stream does not resume from. `first_connections`: the
// connections the first kill found.
std::vector<Kill> KillRepeatedly(const ConnectionKiller& killer, const MsgWorker& receiver,
                                 int first_side, uint32_t seed, std::string& first_connections) {
  std::vector<Kill> kills;
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> pause_ms(0, 100);
  for (int i = 0; i < kKills; ++i) {
    std::string established;
    if (!WaitUntil([&] { return Lines(established = killer.Established()) > 0; },
                   kResumeDeadline)) {
      break;
    }
    if (i == 0) first_connections = established;
    Kill& kill = kills.emplace_back();
    kill.side = (i + first_side) % 2 == 0 ? Side::kSender : Side::kReceiver;
    // With several networks: one network that has a connection (the others
    // stay up) two kills in three, all of them the third.
    const std::vector<int> connected = killer.Connected(established);
    if (killer.networks() > 1 && (i / 2) % 3 != 2 && !connected.empty()) {
      kill.network = connected[static_cast<size_t>(i / 2) % connected.size()];
    }
    kill.sockets = killer.Kill(kill.side, kill.network);
    kill.at_ns = NowNs();
    kill.resumed =
        receiver.WaitForValue("progress", "caught_up_ns", kill.at_ns + 1, kResumeDeadline);
    if (!kill.resumed) break;
    // Kills land at varied points of the stream (pacing, not synchronisation).
    std::this_thread::sleep_for(milliseconds(pause_ms(random)));
  }
  return kills;
}

// Stops the sender (SIGUSR1), waits for its ledger, then for the stream's
// tail: until everything the sender was told of arrived, or the receiver
// has had nothing for a second.
void StopAndDrain(MsgWorker& sender, const MsgWorker& receiver) {
  REQUIRE_OK(sender.child().Signal(SIGUSR1));
  if (!sender.WaitForLine("done", milliseconds(60000))) {
    FAIL("the sender did not finish:\n" << sender.Output());
  }
  const std::vector<Fields> done = Records(sender.Output(), "done");
  REQUIRE(done.size() == 1);
  const uint64_t told = Number(done[0], "ok") + Number(done[0], "failed");
  uint64_t last_count = 0;
  auto last_change = steady_clock::now();
  WaitUntil(
      [&] {
        const uint64_t count = receiver.LastValue("progress", "received").value_or(0);
        if (count != last_count) last_change = steady_clock::now();
        last_count = count;
        return count >= told || steady_clock::now() - last_change > seconds(1);
      },
      milliseconds(60000));
}

// `first_side`: 0 when the first kill is on the sender's side, 1 on the
// receiver's.
void RunStreamUnderKills(const std::string& networks, const Traffic& traffic, int first_side) {
  if (::geteuid() != 0) {
    WARN("ss -K needs root (CAP_NET_ADMIN): not run");
    return;
  }
  const std::string ss = REQUIRE_VALUE(FindProgram("ss"));  // iproute2
  Daemon daemon;
  REQUIRE_OK(daemon.Start());
  TempDir dir("tocl-kill-");
  const std::vector<std::string> env = {"TOCL_NETWORKS=" + networks};

  std::vector<std::string> receive = LedgerCommand(daemon, "receive", "kill-receiver");
  receive.insert(receive.end(), {"--kills", dir.File("kills")});
  MsgWorker receiver = REQUIRE_VALUE(MsgWorker::Launch(receive, kPairs, env));
  std::vector<std::string> send = LedgerCommand(daemon, "send", "kill-sender");
  send.insert(send.end(), {"--rate", std::to_string(traffic.rate), "--long-every",
                           std::to_string(traffic.long_every)});
  for (Gid to : receiver.threads()) send.insert(send.end(), {"--to", to.ToString()});
  MsgWorker sender = REQUIRE_VALUE(MsgWorker::Launch(send, kPairs, env));
  if (!sender.WaitForLine("streaming", milliseconds(30000))) {
    FAIL("the sender did not start streaming:\n" << sender.Output());
  }

  auto client = REQUIRE_VALUE(daemon.Connect());
  const ConnectionKiller killer(ss, ListenersOf(*client, sender.process(), receiver.process()));

  // The first kill finds the stream in its stride.
  if (!receiver.WaitForValue("progress", "received", kWarmUp, milliseconds(30000))) {
    FAIL("the receiver did not get " << kWarmUp << " messages:\n" << receiver.Output());
  }
  std::string first_connections;
  const std::vector<Kill> kills =
      KillRepeatedly(killer, receiver, first_side,
                     static_cast<uint32_t>(networks.size() + traffic.rate + traffic.long_every),
                     first_connections);
  StopAndDrain(sender, receiver);
  {
    std::ofstream file(dir.File("kills"));
    for (const Kill& kill : kills) file << kill.at_ns << "\n";
  }
  const int receiver_exit = receiver.Finish(milliseconds(30000)).value_or(-1);
  const int sender_exit = sender.Finish(milliseconds(30000)).value_or(-1);

  const Outcome outcome = Compare(sender.Output(), receiver.Output());
  const bool resumed =
      std::all_of(kills.begin(), kills.end(), [](const Kill& kill) { return kill.resumed; });
  const bool hit =
      std::all_of(kills.begin(), kills.end(), [](const Kill& kill) { return kill.sockets > 0; });
  const std::string summary = networks + ", " + traffic.name + ": " + Describe(outcome, kills);
  WARN(summary);
  if (receiver_exit != 0 || sender_exit != 0 || outcome.silent != 0 || outcome.failed != 0 ||
      !resumed || kills.size() != size_t{kKills}) {
    // Once here rather than under every failed check.
    WARN("sender's sockets " << killer.Filter(Side::kSender) << ", receiver's "
                             << killer.Filter(Side::kReceiver) << "\nbefore the first kill:\n"
                             << first_connections << "sender output (tail):\n"
                             << Tail(sender.Output()) << "receiver output (tail):\n"
                             << Tail(receiver.Output())
                             << "a silent loss: " << outcome.silent_example);
  }
  CHECK(receiver_exit == 0);
  CHECK(sender_exit == 0);
  CHECK(outcome.ok > 0);
  CHECK(kills.size() == size_t{kKills});
  CHECK(hit);
  // The promise.
  CHECK(outcome.silent == 0);
  CHECK(outcome.duplicates == 0);
  CHECK(outcome.reordered == 0);
  CHECK(outcome.corrupt == 0);
  CHECK(outcome.phantom == 0);
  CHECK(outcome.unresolved == 0);
  // Both processes live: a broken connection is not a dead peer.
  CHECK(outcome.failed == 0);
  CHECK(resumed);
  CHECK(outcome.resumed_after_last);
}

TEST_CASE("sequence ranges print, parse, subtract and look up as the ledgers need", "[kill]") {
  SeqRanges sent;
  for (uint64_t seq : {0, 1, 2, 5, 7, 8}) sent.Add(seq);
  CHECK(sent.ToString() == "0-2,5,7-8");
  CHECK(sent.Count() == 6);
  const SeqRanges got = *SeqRanges::Parse("1-5,8,10");
  CHECK(sent.Minus(got).ToString() == "0,7");
  CHECK(got.Minus(sent).ToString() == "3-4,10");
  CHECK(sent.Intersect(got).ToString() == "1-2,5,8");
  CHECK(got.Contains(1));
  CHECK(got.Contains(4));
  CHECK(got.Contains(10));
  CHECK_FALSE(got.Contains(0));
  CHECK_FALSE(got.Contains(6));
  CHECK_FALSE(got.Contains(11));
  CHECK_FALSE(SeqRanges().Contains(0));
  CHECK(SeqRanges::Parse("-")->empty());
  CHECK_FALSE(SeqRanges::Parse("3-1").has_value());
  CHECK_FALSE(SeqRanges::Parse("1,1").has_value());
  CHECK_FALSE(SeqRanges::Parse("x").has_value());
}

TEST_CASE("a stream over one tcp network loses nothing when its connections are killed",
          "[integration][kill]") {
  const size_t variant = GENERATE(range(size_t{0}, std::size(kTraffic)));
  DYNAMIC_SECTION(kTraffic[variant].name) {
    RunStreamUnderKills("tcp", kTraffic[variant], static_cast<int>(variant % 2));
  }
}

TEST_CASE("a stream over two tcp networks loses nothing when its connections are killed",
          "[integration][kill]") {
  // The first kill on the other side than with one network.
  const size_t variant = GENERATE(range(size_t{0}, std::size(kTraffic)));
  DYNAMIC_SECTION(kTraffic[variant].name) {
    RunStreamUnderKills("tcp:127.0.0.1,tcp:127.0.0.2", kTraffic[variant],
                        static_cast<int>((variant + 1) % 2));
  }
}

TEST_CASE("a stream over one via network loses nothing when its VIs are killed",
          "[integration][kill][via]") {
  // One VI per (peer, size class): each kill breaks several.
  const size_t variant = GENERATE(range(size_t{0}, std::size(kTraffic)));
  DYNAMIC_SECTION(kTraffic[variant].name) {
    RunStreamUnderKills("via:127.0.0.1", kTraffic[variant], static_cast<int>(variant % 2));
  }
}

TEST_CASE("a stream over via and tcp loses nothing when their connections are killed",
          "[integration][kill][via]") {
  // What a down via route holds moves to tcp (and back), and the other way.
  const size_t variant = GENERATE(range(size_t{0}, std::size(kTraffic)));
  DYNAMIC_SECTION(kTraffic[variant].name) {
    RunStreamUnderKills("via:127.0.0.1,tcp:127.0.0.1", kTraffic[variant],
                        static_cast<int>((variant + 1) % 2));
  }
}

}  // namespace
}  // namespace tocl::testing
