#include "msg_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "daemon_process.h"
#include "library_peer.h"
#include "load_average.h"
#include "mpi_pingpong.h"
#include "peer_pair.h"
#include "protocol.h"
#include "stats.h"
#include "tocl_peer.h"

namespace tocl::bench {
namespace {

using msg::Command;
using msg::Contender;
using msg::LibraryPeer;
using msg::Op;
using msg::PeerPair;
using msg::Reply;

using Clock = std::chrono::steady_clock;

constexpr int kMinRounds = 5;
constexpr uint32_t kIdleThreads = 63;  // plus the main thread: 64 enrolled
constexpr auto kBatch = std::chrono::microseconds(20);
// A peer that has not answered this long after its run should have ended is
// taken for hung.
constexpr auto kCallSlack = std::chrono::seconds(60);
constexpr uint32_t kLatencySizes[] = {8, 64, 4096, 65536};
constexpr uint32_t kBandwidthSizes[] = {65536, 16384};
constexpr uint32_t kLongSizes[] = {16u << 20, 1u << 20};
// The pairs of threads the `rate` and `rate64` cases stream between at once.
constexpr uint32_t kRatePairs = 8;
constexpr uint32_t kRate64Pairs = 64;
static_assert(kRate64Pairs <= msg::kMaxPairs);
// A round during which other processes used more than this many CPUs (on
// average) is marked loaded.
constexpr double kLoadedCpus = 0.05;

enum class Quantity { kLatency, kBandwidth, kRate };

// The runtime configuration of each pair of peer processes.
struct PairConfig {
  const char* name;
  const char* subsystems;
  const char* via_provider;  // RuntimeOptions::via_provider; "": the runtime's default
  int64_t spin_us;           // -1: the runtime's default
  // A runtime that does not start is reported and its entries skipped,
  // instead of ending the run.
  bool may_fail = false;
};
constexpr PairConfig kPairs[] = {
    {"shm", "shm", "", -1},
    {"tcp", "tcp", "", -1},
    {"blocking", "shm", "", 0},  // spin 0: a receiver sleeps at once
    {"blocking-tcp", "tcp", "", 0},
    {"via", "via", "sockets", -1},
    // Only with an RDMA device (RunMsgBench); never run on hardware yet.
    {"via-ibverbs", "via", "ibverbs", -1, true},
};

const PairConfig& ConfigOf(const std::string& name) {
  for (const PairConfig& config : kPairs) {
    if (name == config.name) return config;
  }
  return kPairs[0];
}

void Progress(std::string_view text) {
  fmt::print(stderr, "[msg] {}\n", text);
}

std::string SizeName(uint32_t size) {
  if (size >= (1u << 20) && size % (1u << 20) == 0) return fmt::format("{} MiB", size >> 20);
  if (size >= 1024 && size % 1024 == 0) return fmt::format("{} KiB", size / 1024);
  return fmt::format("{} B", size);
}

// One contender at one size: run once per round.
struct Entry {
  std::string label;
  std::string pair;  // the pair of peers it runs between
  Contender contender = Contender::kRawShmPingPong;
  uint32_t size = 8;
  uint32_t pairs = 1;
  uint32_t idle_threads = 0;  // started in both peers around each run
  // Another library's run (--peers) instead of one between the pair.
  std::unique_ptr<LibraryPeer> library;
  std::vector<double> values;     // one per round
  std::vector<double> per_batch;  // round trips per timed batch, per run (ping-pongs)
};

// One line of the report: an entry, and the entry it is a ratio to.
struct Row {
  size_t entry = 0;
  std::optional<size_t> reference;
  std::optional<Target> target;
  std::string case_name;
};

// Entries measured together, round after round: between one pair of peers,
// except that tocl over via runs between its own pair (a runtime has one
// set of networks) next to the raw and tocl tcp entries of the tcp pair.
struct Group {
  std::string name;
  std::string pair;  // the pair of most entries (the idle windows: the only one)
  Quantity quantity = Quantity::kLatency;
  bool idle_cpu = false;  // the idle-CPU windows instead of entries
  std::vector<Entry> entries;
  std::vector<Row> rows;
  int loaded_rounds = 0;  // rounds during which other processes used a CPU
};

class GroupBuilder {
 public:
  GroupBuilder(std::string name, std::string pair, Quantity quantity, bool tocl) : tocl_(tocl) {
    group_.name = std::move(name);
    group_.pair = std::move(pair);
    group_.quantity = quantity;
  }

  // The entry's index, or nullopt when it needs tocl and tocl is not measured.
  std::optional<size_t> Add(std::string label, Contender contender, uint32_t size,
                            uint32_t pairs = 1, uint32_t idle_threads = 0) {
    if (msg::IsTocl(contender) && !tocl_) return std::nullopt;
    Entry& entry = group_.entries.emplace_back();
    entry.label = std::move(label);
    entry.pair = group_.pair;
    entry.contender = contender;
    entry.size = size;
    entry.pairs = pairs;
    entry.idle_threads = idle_threads;
    return group_.entries.size() - 1;
  }

  // Another library's matching run, or nullopt when tocl is not measured
  // (the peers are there to be compared with it) or --peers was not given.
  std::optional<size_t> AddLibrary(std::string label, std::unique_ptr<LibraryPeer> library,
                                   uint32_t size) {
    if (!tocl_ || !library) return std::nullopt;
    auto index = Add(std::move(label), Contender::kRawShmPingPong, size);
    group_.entries[*index].library = std::move(library);
    return index;
  }

  // The same, between the peers of another pair.
  std::optional<size_t> AddOn(std::string pair, std::string label, Contender contender,
                              uint32_t size) {
    auto index = Add(std::move(label), contender, size);
    if (index) group_.entries[*index].pair = std::move(pair);
    return index;
  }

  void AddRow(std::optional<size_t> entry, std::optional<size_t> reference, std::string case_name,
              std::optional<Target> target = std::nullopt) {
    if (!entry) return;
    group_.rows.push_back({*entry, reference, target, std::move(case_name)});
  }

  Group Build() { return std::move(group_); }

 private:
  bool tocl_;
  Group group_;
};

Target RatioAtMost(double limit) {
  return {Target::Bound::kAtMost, limit, Target::Applies::kRatio};
}
Target RatioAtLeast(double limit) {
  return {Target::Bound::kAtLeast, limit, Target::Applies::kRatio};
}

bool Contains(const std::vector<std::string>& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// The one-pair entries of a rate group, for the rows that compare with them.
struct RateEntries {
  std::optional<size_t> raw_one;
  std::optional<size_t> raw_many;
  std::optional<size_t> one;
};

// How an entry and its rows name tocl over a via pair: "tocl via (sockets)".
std::string ViaLabel(const std::string& pair) {
  return fmt::format("tocl via ({})", ConfigOf(pair).via_provider);
}

// The groups to run, in order, grouped by pair (each pair's processes exit
// after its last group, so that no idle runtime is around for the next).
// `via_pairs`: the via pairs whose tocl entries join the tcp groups (empty
// unless --network via).
std::vector<Group> MakeGroups(const MsgBenchOptions& options, bool tocl,
                              const std::vector<std::string>& via_pairs) {
  auto wanted = [&](std::string_view name) { return Contains(options.cases, name); };
  const bool shm = Contains(options.networks, "shm");
  const bool tcp = Contains(options.networks, "tcp");
  const bool via = Contains(options.networks, "via");
  // tocl over via next to tocl over tcp and the raw tcp baseline, in the
  // same rounds: a row against raw tcp and one against tocl tcp.
  auto add_via = [&](GroupBuilder& g, Contender contender, uint32_t size, const std::string& prefix,
                     std::optional<size_t> raw, std::optional<size_t> tocl_tcp) {
    for (const std::string& pair : via_pairs) {
      auto ours = g.AddOn(pair, ViaLabel(pair), contender, size);
      g.AddRow(ours, raw, prefix + ViaLabel(pair));
      g.AddRow(ours, tocl_tcp, prefix + ViaLabel(pair) + " vs tocl tcp");
    }
  };
  const char* tcp_suffix = via ? "tcp, via" : "tcp";
  // --peers: UCX and Open MPI run in the same rounds as tocl's entry they
  // are compared with, right after it (so back to back, the order
  // alternating with the rounds). Rows are "<case>: tocl / <peer>".
  using msg::MpiBtl;
  using msg::MpiCase;
  using msg::UcxTest;
  using msg::UcxTransport;
  struct PeerSpec {
    std::unique_ptr<LibraryPeer> library;
    std::string name;
    std::optional<Target> target;
  };
  auto add_peers = [&](GroupBuilder& g, std::optional<size_t> ours, uint32_t size,
                       const std::string& case_name, std::vector<PeerSpec> specs) {
    if (!options.peers || !ours) return;
    for (PeerSpec& spec : specs) {
      auto theirs = g.AddLibrary(spec.name, std::move(spec.library), size);
      g.AddRow(ours, theirs, fmt::format("{}: tocl / {}", case_name, spec.name), spec.target);
    }
  };
  auto ucx = [](UcxTest test, UcxTransport transport, uint32_t size) {
    return msg::UcxPeer(test, transport, size);
  };
  auto mpi = [](MpiCase what, MpiBtl btl, uint32_t size) { return msg::MpiPeer(what, btl, size); };
  auto peer = [](std::unique_ptr<LibraryPeer> library, std::string name,
                 std::optional<Target> target = std::nullopt) {
    return PeerSpec{std::move(library), std::move(name), target};
  };
  auto peers = [](auto... specs) {
    std::vector<PeerSpec> list;
    (list.push_back(std::move(specs)), ...);
    return list;
  };
  std::vector<Group> groups;

  if (shm && wanted("latency")) {
    GroupBuilder g("latency shm", "shm", Quantity::kLatency, tocl);
    for (uint32_t size : kLatencySizes) {
      std::string prefix = fmt::format("latency {}: ", SizeName(size));
      auto raw = g.Add("raw shm ping-pong", Contender::kRawShmPingPong, size);
      auto ours = g.Add("tocl shm", Contender::kToclPingPong, size);
      g.AddRow(raw, std::nullopt, prefix + "raw shm ping-pong");
      g.AddRow(ours, raw, prefix + "tocl shm",
               size == 8 ? std::optional(RatioAtMost(2.5)) : std::nullopt);
      if (size != 8) continue;
      add_peers(g, ours, size, "shm 8 B latency",
                peers(peer(ucx(UcxTest::kTagLat, UcxTransport::kPosix, size), "UCX posix",
                           RatioAtMost(1.0)),
                      peer(mpi(MpiCase::kPingPong, MpiBtl::kVader, size), "Open MPI vader")));
    }
    groups.push_back(g.Build());
  }
  if (shm && wanted("threads") && tocl) {
    GroupBuilder g("threads", "shm", Quantity::kLatency, tocl);
    auto one = g.Add("tocl shm, 1 thread", Contender::kToclPingPong, 8);
    auto many = g.Add("tocl shm, 64 threads", Contender::kToclPingPong, 8, 1, kIdleThreads);
    g.AddRow(one, std::nullopt, "latency 8 B: tocl shm, 1 thread per process");
    g.AddRow(many, one, "latency 8 B: tocl shm, 64 threads per process", RatioAtMost(1.2));
    groups.push_back(g.Build());
  }
  if (shm && wanted("idle") && tocl) {
    Group idle;
    idle.name = "idle";
    idle.pair = "shm";
    idle.idle_cpu = true;
    groups.push_back(std::move(idle));
  }
  if (shm && wanted("bandwidth")) {
    GroupBuilder g("bandwidth shm", "shm", Quantity::kBandwidth, tocl);
    for (uint32_t size : kBandwidthSizes) {
      std::string prefix = fmt::format("bandwidth {}: ", SizeName(size));
      auto copy = g.Add("memcpy", Contender::kMemcpy, size);
      auto raw = g.Add("raw shm stream", Contender::kRawShmStream, size);
      auto ours = g.Add("tocl shm", Contender::kToclStream, size);
      g.AddRow(copy, std::nullopt, prefix + "memcpy, one process");
      g.AddRow(raw, copy, prefix + "raw shm copy stream");
      g.AddRow(ours, raw, prefix + "tocl shm",
               size == 65536 ? std::optional(RatioAtLeast(0.35)) : std::nullopt);
      if (size != 65536) continue;
      add_peers(g, ours, size, "shm 64 KiB bandwidth",
                peers(peer(mpi(MpiCase::kStream, MpiBtl::kVader, size), "Open MPI vader",
                           RatioAtLeast(1.0)),
                      peer(ucx(UcxTest::kTagBw, UcxTransport::kPosix, size), "UCX posix")));
    }
    groups.push_back(g.Build());
  }
  if (shm && wanted("long")) {
    // Long messages (fragments) over shm from user memory into user memory
    // (RecvInto): against one memcpy of the same size.
    GroupBuilder g("long shm", "shm", Quantity::kBandwidth, tocl);
    for (uint32_t size : kLongSizes) {
      std::string prefix = fmt::format("long {}: ", SizeName(size));
      auto copy = g.Add("memcpy", Contender::kMemcpy, size);
      auto ours = g.Add("tocl shm long", Contender::kToclStream, size);
      g.AddRow(copy, std::nullopt, prefix + "memcpy, one process");
      g.AddRow(ours, copy, prefix + "tocl shm long message",
               size == kLongSizes[0] ? std::optional(RatioAtLeast(0.6)) : std::nullopt);
    }
    groups.push_back(g.Build());
  }
  // 8 B streams over shm, one pair of threads and `pairs` pairs at once,
  // raw rings and tocl, each many-pair sum against its one pair.
  auto rate_group = [&](std::string name, uint32_t pairs, Target many_target) {
    GroupBuilder g(std::move(name), "shm", Quantity::kRate, tocl);
    RateEntries rate;
    rate.raw_one = g.Add("raw shm ring, 1 pair", Contender::kRawShmStream, 8, 1);
    rate.raw_many =
        g.Add(fmt::format("raw shm rings, {} pairs", pairs), Contender::kRawShmStream, 8, pairs);
    rate.one = g.Add("tocl shm, 1 pair", Contender::kToclStream, 8, 1);
    auto many = g.Add(fmt::format("tocl shm, {} pairs", pairs), Contender::kToclStream, 8, pairs);
    g.AddRow(rate.raw_one, std::nullopt, "rate 8 B: raw shm ring, 1 pair");
    g.AddRow(rate.raw_many, rate.raw_one, fmt::format("rate 8 B: raw shm rings, {} pairs", pairs));
    g.AddRow(rate.one, rate.raw_one, "rate 8 B: tocl shm, 1 pair",
             Target{Target::Bound::kAtLeast, 8});
    g.AddRow(many, rate.one, fmt::format("rate 8 B: tocl shm, {} pairs", pairs), many_target);
    return std::pair(std::move(g), rate);
  };
  if (shm && wanted("rate")) {
    auto [g, rate] = rate_group("rate", kRatePairs, RatioAtLeast(1));
    add_peers(
        g, rate.one, 8, "shm 8 B rate 1 pair",
        peers(peer(mpi(MpiCase::kStream, MpiBtl::kVader, 8), "Open MPI vader", RatioAtLeast(1.0)),
              peer(ucx(UcxTest::kTagBw, UcxTransport::kPosix, 8), "UCX posix", RatioAtLeast(1.3))));
    groups.push_back(g.Build());
  }
  if (shm && wanted("rate64") && tocl) {
    // Every one of 64 threads per process streams at once (issue #17).
    groups.push_back(rate_group("rate64", kRate64Pairs, RatioAtLeast(0.8)).first.Build());
  }
  if ((tcp || via) && wanted("latency")) {
    GroupBuilder g(fmt::format("latency {}", tcp_suffix), "tcp", Quantity::kLatency, tocl);
    for (uint32_t size : kLatencySizes) {
      std::string prefix = fmt::format("latency {}: ", SizeName(size));
      auto polling = g.Add("raw tcp polling", Contender::kRawTcpPollPingPong, size);
      // The blocking baseline tells about tcp; via is compared with polling.
      auto blocking =
          tcp ? g.Add("raw tcp blocking", Contender::kRawTcpPingPong, size) : std::nullopt;
      auto ours = g.Add("tocl tcp", Contender::kToclPingPong, size);
      g.AddRow(polling, std::nullopt, prefix + "raw tcp polling ping-pong");
      g.AddRow(blocking, polling, prefix + "raw tcp blocking ping-pong");
      g.AddRow(ours, polling, prefix + "tocl tcp",
               size == 8 ? std::optional(RatioAtMost(1.25)) : std::nullopt);
      if (size == 8 && tcp) {
        add_peers(g, ours, size, "tcp 8 B latency",
                  peers(peer(ucx(UcxTest::kTagLat, UcxTransport::kTcp, size), "UCX tcp",
                             RatioAtMost(1.1)),
                        peer(mpi(MpiCase::kPingPong, MpiBtl::kTcp, size), "Open MPI tcp")));
      }
      add_via(g, Contender::kToclPingPong, size, prefix, polling, ours);
    }
    groups.push_back(g.Build());
  }
  if ((tcp || via) && wanted("bandwidth")) {
    GroupBuilder g(fmt::format("bandwidth {}", tcp_suffix), "tcp", Quantity::kBandwidth, tocl);
    for (uint32_t size : kBandwidthSizes) {
      std::string prefix = fmt::format("bandwidth {}: ", SizeName(size));
      auto raw = g.Add("raw tcp stream", Contender::kRawTcpStream, size);
      auto ours = g.Add("tocl tcp", Contender::kToclStream, size);
      g.AddRow(raw, std::nullopt, prefix + "raw tcp stream");
      g.AddRow(ours, raw, prefix + "tocl tcp",
               size == 65536 ? std::optional(RatioAtLeast(0.95)) : std::nullopt);
      if (size == 65536 && tcp) {
        add_peers(g, ours, size, "tcp 64 KiB bandwidth",
                  peers(peer(ucx(UcxTest::kTagBw, UcxTransport::kTcp, size), "UCX tcp"),
                        peer(mpi(MpiCase::kStream, MpiBtl::kTcp, size), "Open MPI tcp")));
      }
      add_via(g, Contender::kToclStream, size, prefix, raw, ours);
    }
    groups.push_back(g.Build());
  }
  if (via && wanted("rate")) {
    // 8 B messages, one sender thread to one receiver thread.
    GroupBuilder g("rate tcp, via", "tcp", Quantity::kRate, tocl);
    std::string prefix = "rate 8 B: ";
    auto raw = g.Add("raw tcp stream", Contender::kRawTcpStream, 8);
    auto ours = g.Add("tocl tcp", Contender::kToclStream, 8);
    g.AddRow(raw, std::nullopt, prefix + "raw tcp stream");
    g.AddRow(ours, raw, prefix + "tocl tcp");
    add_via(g, Contender::kToclStream, 8, prefix, raw, ours);
    groups.push_back(g.Build());
  }
  if (shm && wanted("blocking")) {
    GroupBuilder g("blocking", "blocking", Quantity::kLatency, tocl);
    auto futex = g.Add("raw futex ping-pong", Contender::kRawFutexPingPong, 8);
    auto ours = g.Add("tocl shm, spin 0", Contender::kToclPingPong, 8);
    g.AddRow(futex, std::nullopt, "blocking 8 B: raw futex ping-pong");
    g.AddRow(ours, futex, "blocking 8 B: tocl shm, receiver asleep (spin 0)", RatioAtMost(1.2));
    groups.push_back(g.Build());
  }
  // A tocl shm 8 B ping-pong received another way against the same with
  // blocking Recvs, same rounds (target 1.2x).
  auto against_recv = [&](const char* name, Contender contender, const char* contender_name,
                          const char* row) {
    GroupBuilder g(name, "shm", Quantity::kLatency, tocl);
    auto blocking = g.Add("tocl shm, Recv", Contender::kToclPingPong, 8);
    auto other = g.Add(contender_name, contender, 8);
    g.AddRow(blocking, std::nullopt, fmt::format("{} 8 B: tocl shm, blocking Recv", name));
    g.AddRow(other, blocking, fmt::format("{} 8 B: tocl shm, {}", name, row), RatioAtMost(1.2));
    groups.push_back(g.Build());
  };
  if (shm && wanted("requests") && tocl) {
    // A reply received by an Irecv posted before the send and waited for
    // (tocl/request.h): what a posted receive costs on the delivery path.
    against_recv("requests", Contender::kToclIrecvPingPong, "tocl shm, Irecv + Wait",
                 "Irecv posted before Send, then Wait");
  }
  if (shm && wanted("handlers") && tocl) {
    // Dispatch latency (tocl/handler.h): the responder replies from a
    // message handler instead of a blocking Recv loop; the difference is
    // arrival-to-handler-entry against arrival-to-Recv-return.
    against_recv("handlers", Contender::kToclHandlerPingPong, "tocl shm, handler replies",
                 "responder is a message handler");
  }
  if (wanted("packed") && tocl) {
    // A 16-value header and a 4 MiB body (issue #19): packed, the body
    // placed by the receiver's header handler in its memory, against one
    // Send of the same bytes pre-packed in one buffer and received with
    // Recv (the body left in library memory), same rounds, each answered
    // by 8 B. Lower is better; target 1.2x.
    constexpr uint32_t kBody = uint32_t{4} << 20;
    for (const char* network : {"shm", "tcp"}) {
      if ((network == std::string_view("shm") && !shm) ||
          (network == std::string_view("tcp") && !tcp)) {
        continue;
      }
      GroupBuilder g(fmt::format("packed {}", network), network, Quantity::kLatency, tocl);
      auto prepacked = g.Add(fmt::format("tocl {}, pre-packed Send + Recv", network),
                             Contender::kToclPrepackedPingPong, kBody);
      auto into = g.Add(fmt::format("tocl {}, pre-packed Send + RecvInto", network),
                        Contender::kToclPrepackedIntoPingPong, kBody);
      auto packed = g.Add(fmt::format("tocl {}, packed + header handler", network),
                          Contender::kToclPackedPingPong, kBody);
      g.AddRow(
          prepacked, std::nullopt,
          fmt::format("packed 16 values + 4 MiB: tocl {}, one pre-packed Send, Recv", network));
      g.AddRow(
          into, prepacked,
          fmt::format("packed 16 values + 4 MiB: tocl {}, one pre-packed Send, RecvInto", network));
      g.AddRow(packed, into,
               fmt::format("packed 16 values + 4 MiB: tocl {}, packed, against RecvInto", network));
      g.AddRow(packed, prepacked,
               fmt::format("packed 16 values + 4 MiB: tocl {}, packed, body placed by a header "
                           "handler",
                           network),
               RatioAtMost(1.2));
      groups.push_back(g.Build());
    }
  }
  if (tcp && wanted("blocking")) {
    // A conversation between sleeping threads over tcp: what acknowledgements
    // cost when each receiver sleeps between messages (they ride on the
    // answers: subsystem/tcp/reverse_acks.h).
    GroupBuilder g("blocking tcp", "blocking-tcp", Quantity::kLatency, tocl);
    auto raw = g.Add("raw tcp blocking ping-pong", Contender::kRawTcpPingPong, 8);
    auto ours = g.Add("tocl tcp, spin 0", Contender::kToclPingPong, 8);
    g.AddRow(raw, std::nullopt, "blocking 8 B: raw tcp blocking ping-pong");
    g.AddRow(ours, raw, "blocking 8 B: tocl tcp, receiver asleep (spin 0)");
    groups.push_back(g.Build());
  }
  return groups;
}

bool GroupNeedsTocl(const Group& group) {
  if (group.idle_cpu) return true;
  return std::any_of(group.entries.begin(), group.entries.end(),
                     [](const Entry& entry) { return msg::IsTocl(entry.contender); });
}

// The pairs of peers a group runs between.
std::set<std::string> PairsOf(const Group& group) {
  std::set<std::string> pairs = {group.pair};
  for (const Entry& entry : group.entries) pairs.insert(entry.pair);
  return pairs;
}

// The pairs whose tocl runtimes a group measures, with the Gids (thread
// pairs) each needs.
std::map<std::string, uint32_t> ToclPairsOf(const Group& group) {
  std::map<std::string, uint32_t> pairs;
  if (group.idle_cpu) pairs[group.pair] = 1;
  for (const Entry& entry : group.entries) {
    if (!msg::IsTocl(entry.contender)) continue;
    uint32_t& gids = pairs[entry.pair];
    gids = std::max({gids, entry.pairs, 1u});
  }
  return pairs;
}

struct Run {
  explicit Run(const MsgBenchOptions& bench_options) : options(bench_options) {}
  const MsgBenchOptions& options;
  bool tocl = false;
  int rounds = kMinRounds;
  std::chrono::nanoseconds warmup{0};
  std::chrono::nanoseconds measure{0};
  std::chrono::nanoseconds idle{0};
  std::string daemon_address;
  pid_t daemon_pid = -1;  // a daemon this run started
  std::map<std::string, std::unique_ptr<PeerPair>> pairs;
  std::set<std::string> runtimes;     // pairs whose peers have started tocl
  std::set<std::string> unavailable;  // pairs whose tocl did not start (may_fail): skipped
  uint32_t next_run_id = 0;
  int rounds_run = 0;
  int rounds_loaded = 0;
};

std::chrono::milliseconds CallTimeout(std::chrono::nanoseconds work) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(work) + kCallSlack;
}

void CopyText(char* target, size_t capacity, std::string_view text) {
  size_t n = std::min(capacity - 1, text.size());
  std::copy_n(text.data(), n, target);
  target[n] = '\0';
}

// Starts tocl in both peers of `pair` (once) and makes sure each has `gids`
// enrolled Gids and knows the other's.
Status EnsureRuntime(Run& run, PeerPair& pair, uint32_t gids) {
  Reply initiator;
  Reply responder;
  if (!run.runtimes.contains(pair.name())) {
    const PairConfig& config = ConfigOf(pair.name());
    Command start;
    start.op = Op::kStartRuntime;
    start.spin_us = config.spin_us;
    CopyText(start.subsystems, sizeof start.subsystems, config.subsystems);
    CopyText(start.via_provider, sizeof start.via_provider, config.via_provider);
    CopyText(start.text, sizeof start.text, run.daemon_address);
    Progress(fmt::format(
        "{} pair: starting tocl (subsystems {}{}, spin {})", pair.name(), config.subsystems,
        *config.via_provider == '\0' ? "" : fmt::format(", via provider {}", config.via_provider),
        config.spin_us < 0 ? "default" : fmt::format("{} us", config.spin_us)));
    TOCL_RETURN_IF_ERROR(pair.Call(start, &initiator, &responder, CallTimeout({})));
    run.runtimes.insert(pair.name());
  }
  Command enroll;
  enroll.op = Op::kEnroll;
  enroll.count = gids;
  TOCL_RETURN_IF_ERROR(pair.Call(enroll, &initiator, &responder, CallTimeout({})));
  Command to_initiator;
  to_initiator.op = Op::kSetPeerThreads;
  to_initiator.gid_count = responder.gid_count;
  std::copy_n(responder.gids, responder.gid_count, to_initiator.gids);
  Command to_responder;
  to_responder.op = Op::kSetPeerThreads;
  to_responder.gid_count = initiator.gid_count;
  std::copy_n(initiator.gids, initiator.gid_count, to_responder.gids);
  return pair.Call(to_initiator, to_responder, nullptr, nullptr, CallTimeout({}));
}

Status SetIdleThreads(PeerPair& pair, uint32_t count, bool start) {
  Command command;
  command.op = start ? Op::kStartIdleThreads : Op::kStopIdleThreads;
  command.count = count;
  return pair.Call(command, nullptr, nullptr, CallTimeout(std::chrono::seconds(120)));
}

double ValueOf(Quantity quantity, const Entry& entry, const Reply& reply) {
  switch (quantity) {
    case Quantity::kLatency:
      return reply.p50_ns;
    case Quantity::kBandwidth:
      return static_cast<double>(reply.messages) * entry.size / reply.seconds /
             (1024.0 * 1024.0 * 1024.0);
    case Quantity::kRate:
      return static_cast<double>(reply.messages) / reply.seconds / 1e6;
  }
  return 0;
}

const char* UnitOf(Quantity quantity) {
  switch (quantity) {
    case Quantity::kLatency:
      return "ns";
    case Quantity::kBandwidth:
      return "GiB/s";
    case Quantity::kRate:
      return "M msg/s";
  }
  return "";
}

const char* MetricOf(Quantity quantity) {
  switch (quantity) {
    case Quantity::kLatency:
      return "one-way p50, median of rounds";
    case Quantity::kBandwidth:
      return "bandwidth, median of rounds";
    case Quantity::kRate:
      return "messages/s, median of rounds";
  }
  return "";
}

// CPU time (user, nice and system; not interrupts, which our own loopback
// traffic causes) used by the whole machine and by our processes (this one,
// the peers, the daemon), in clock ticks, and when it was read.
struct CpuProbe {
  int64_t machine = 0;
  int64_t ours = 0;
  Clock::time_point at;
};

// With `children`, also the CPU time of its children that it has waited
// for: the peer libraries' processes (ucx_perftest, mpiexec and its ranks)
// count as ours once reaped.
int64_t ProcessTicks(pid_t pid, bool children = false) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(stat, text);
  // "pid (name) state ppid ...": utime and stime are the 12th and 13th
  // fields after the name, counted over all of the process's threads.
  size_t name_end = text.rfind(')');
  if (name_end == std::string::npos) return 0;
  std::istringstream fields(text.substr(name_end + 2));
  std::string field;
  int64_t ticks = 0;
  // cutime and cstime follow them.
  const int last = children ? 15 : 13;
  for (int i = 0; i < last && fields >> field; ++i) {
    if (i >= 11) ticks += std::strtoll(field.c_str(), nullptr, 10);
  }
  return ticks;
}

CpuProbe ProbeCpu(const Run& run) {
  CpuProbe probe;
  probe.at = Clock::now();
  std::ifstream stat("/proc/stat");
  std::string cpu;
  int64_t user = 0, nice = 0, system = 0;
  if (stat >> cpu >> user >> nice >> system) probe.machine = user + nice + system;
  probe.ours = ProcessTicks(::getpid(), true);
  std::vector<pid_t> ours;
  if (run.daemon_pid > 0) ours.push_back(run.daemon_pid);
  for (const auto& [name, pair] : run.pairs) {
    ours.push_back(pair->initiator_pid());
    ours.push_back(pair->responder_pid());
  }
  for (pid_t pid : ours) {
    if (pid > 0) probe.ours += ProcessTicks(pid);
  }
  return probe;
}

// The CPUs other processes used between two probes (0.5: half of one CPU).
double OtherCpus(const CpuProbe& before, const CpuProbe& after) {
  static const double kTicksPerSecond = static_cast<double>(::sysconf(_SC_CLK_TCK));
  double seconds = std::chrono::duration<double>(after.at - before.at).count();
  if (seconds <= 0) return 0;
  auto others = static_cast<double>((after.machine - before.machine) - (after.ours - before.ours));
  return std::max(0.0, others / kTicksPerSecond / seconds);
}

bool Skipped(const Run& run, const Entry& entry) {
  return run.unavailable.contains(entry.pair);
}

// One run of `entry` between its pair; its value in the group's unit.
Result<double> RunEntry(Run& run, const Group& group, Entry& entry,
                        std::chrono::nanoseconds measure) {
  if (entry.library) {
    TOCL_ASSIGN_OR_RETURN(msg::LibraryFigures figures, entry.library->Run(run.warmup, measure));
    Reply reply;
    reply.p50_ns = figures.one_way_ns;
    reply.messages = figures.messages;
    reply.seconds = figures.seconds;
    double value = ValueOf(group.quantity, entry, reply);
    if (!(value > 0)) return Internal(fmt::format("{}: the run measured nothing", entry.label));
    return value;
  }
  PeerPair& pair = *run.pairs.at(entry.pair);
  if (entry.idle_threads > 0) TOCL_RETURN_IF_ERROR(SetIdleThreads(pair, entry.idle_threads, true));
  Command command;
  command.op = Op::kRun;
  command.contender = entry.contender;
  command.size = entry.size;
  command.pairs = entry.pairs;
  command.run_id = ++run.next_run_id;
  command.warmup_ns = run.warmup.count();
  command.measure_ns = measure.count();
  command.batch_ns = std::chrono::nanoseconds(kBatch).count();
  Reply reply;
  Status status = pair.Call(command, &reply, nullptr, CallTimeout(run.warmup + measure));
  if (entry.idle_threads > 0 && status.ok()) status = SetIdleThreads(pair, 0, false);
  TOCL_RETURN_IF_ERROR(status.WithContext(fmt::format("{} {}", entry.label, SizeName(entry.size))));
  entry.per_batch.push_back(static_cast<double>(reply.per_batch));
  double value = ValueOf(group.quantity, entry, reply);
  if (!(value > 0)) {
    return Internal(
        fmt::format("{} {}: the run measured nothing", entry.label, SizeName(entry.size)));
  }
  return value;
}

std::string Describe(const Group& group, const Entry& entry, double value) {
  return fmt::format("{} {} {} {}", entry.label, SizeName(entry.size), FormatNumber(value),
                     UnitOf(group.quantity));
}

void AddRows(const Run& run, const Group& group, Report& report) {
  const char* unit = UnitOf(group.quantity);
  std::string how =
      fmt::format("{} rounds x {} ms", run.rounds,
                  std::chrono::duration_cast<std::chrono::milliseconds>(run.measure).count());
  for (const Row& row : group.rows) {
    const Entry& entry = group.entries[row.entry];
    if (Skipped(run, entry) || (row.reference && Skipped(run, group.entries[*row.reference]))) {
      continue;
    }
    std::string note = how;
    if (group.quantity == Quantity::kLatency && !entry.library) {
      // Few round trips per batch means slow hops: a loaded machine, or sleeping.
      note += fmt::format(", samples of {:.0f} round trips", Median(entry.per_batch));
    }
    if (entry.pairs > 1) note += fmt::format(", {} pairs summed", entry.pairs);
    if (entry.idle_threads > 0) {
      note += fmt::format(", {} more threads blocked in Recv per process", entry.idle_threads);
    }
    if (group.loaded_rounds > 0) {
      note += fmt::format(", LOADED: other processes used CPU in {} of {} rounds",
                          group.loaded_rounds, run.rounds);
    }
    if (!row.reference) {
      Figure& figure =
          report.Add(row.case_name, MetricOf(group.quantity), Median(entry.values), unit);
      if (row.target) figure.WithTarget(*row.target);
      figure.WithNote(note);
      continue;
    }
    const Entry& reference = group.entries[*row.reference];
    std::string baseline = reference.label;
    if (reference.pair != entry.pair) {
      baseline += fmt::format(" (pair {}, this: pair {})", reference.pair, entry.pair);
    }
    std::vector<double> ratios;
    for (size_t i = 0; i < entry.values.size() && i < reference.values.size(); ++i) {
      ratios.push_back(entry.values[i] / reference.values[i]);
    }
    Figure& figure = report.Add(row.case_name, MetricOf(group.quantity), Median(entry.values), unit)
                         .WithBaseline(Median(reference.values))
                         .WithRatio(Median(ratios))
                         .WithNote(fmt::format("{}; baseline: {}", note, baseline));
    if (row.target) figure.WithTarget(*row.target);
    report.Add(row.case_name, "ratio, min of rounds", Min(ratios), "x")
        .WithNote(fmt::format("max {}", FormatNumber(Max(ratios))));
  }
}

// Starts tocl in every pair the group measures it between. A pair whose
// config may fail is reported and its entries skipped.
Status EnsureRuntimes(Run& run, const Group& group) {
  for (const auto& [name, gids] : ToclPairsOf(group)) {
    if (run.unavailable.contains(name)) continue;
    Status started = EnsureRuntime(run, *run.pairs.at(name), gids);
    if (started.ok()) continue;
    if (!ConfigOf(name).may_fail) return started;
    Progress(fmt::format("{}: tocl did not start, skipped: {}", name, started.ToString()));
    run.unavailable.insert(name);
  }
  return Status::Ok();
}

Status RunGroup(Run& run, Group& group, Report& report) {
  if (GroupNeedsTocl(group)) TOCL_RETURN_IF_ERROR(EnsureRuntimes(run, group));
  // One unrecorded pass: pages, connections and pools are set up, caches warm.
  for (Entry& entry : group.entries) {
    if (Skipped(run, entry)) continue;
    TOCL_RETURN_IF_ERROR(RunEntry(run, group, entry, run.warmup).status());
  }
  for (int round = 0; round < run.rounds; ++round) {
    // Baseline and measured entries alternate their order from round to
    // round, so that a drift of the machine hits both alike.
    std::vector<size_t> order(group.entries.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    CpuProbe before = ProbeCpu(run);
    for (size_t i : order) {
      if (Skipped(run, group.entries[i])) continue;
      TOCL_ASSIGN_OR_RETURN(double value, RunEntry(run, group, group.entries[i], run.measure));
      group.entries[i].values.push_back(value);
    }
    double others = OtherCpus(before, ProbeCpu(run));
    bool loaded = others > kLoadedCpus;
    if (loaded) ++group.loaded_rounds;
    ++run.rounds_run;
    if (loaded) ++run.rounds_loaded;
    std::string line = fmt::format(
        "{} round {}/{}{}:", group.name, round + 1, run.rounds,
        loaded ? fmt::format(" (LOADED: other processes used {:.0f}% of a CPU)", 100 * others)
               : "");
    for (const Entry& entry : group.entries) {
      if (Skipped(run, entry)) continue;
      line += fmt::format(" {};", Describe(group, entry, entry.values.back()));
    }
    line.pop_back();
    Progress(line);
  }
  AddRows(run, group, report);
  return Status::Ok();
}

// CPU use of both peers over an idle window: first with only the main thread
// enrolled (the baseline), then with 63 more threads blocked in Recv.
Status RunIdle(Run& run, PeerPair& pair, Report& report) {
  TOCL_RETURN_IF_ERROR(EnsureRuntime(run, pair, 1));
  Command window;
  window.op = Op::kIdleWindow;
  window.measure_ns = run.idle.count();
  auto seconds = std::chrono::duration<double>(run.idle).count();
  auto measure = [&]() -> Result<double> {
    Reply initiator;
    Reply responder;
    TOCL_RETURN_IF_ERROR(pair.Call(window, &initiator, &responder, CallTimeout(run.idle)));
    return std::max(initiator.cpu_percent, responder.cpu_percent);
  };
  Progress(fmt::format("idle: {} s with 1 enrolled thread per process", seconds));
  TOCL_ASSIGN_OR_RETURN(double baseline, measure());
  TOCL_RETURN_IF_ERROR(SetIdleThreads(pair, kIdleThreads, true));
  // Registration with the daemon happens in the background: let it settle.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Progress(
      fmt::format("idle: {} s with {} enrolled threads per process", seconds, kIdleThreads + 1));
  Result<double> loaded = measure();
  Status stopped = SetIdleThreads(pair, 0, false);
  TOCL_RETURN_IF_ERROR(loaded.status());
  TOCL_RETURN_IF_ERROR(stopped);
  Figure& figure =
      report
          .Add("idle CPU: 64 enrolled threads per process", "CPU over the window", *loaded,
               "% of a core")
          .WithBaseline(baseline)
          .WithTarget({Target::Bound::kAtMost, 1})
          .WithNote(fmt::format("{:.0f} s, the busier of the 2 processes, 63 threads in Recv; "
                                "baseline: 1 enrolled thread",
                                seconds));
  if (baseline > 0) figure.WithRatio(*loaded / baseline);
  return Status::Ok();
}

void AddMpiRows(const Run& run, Report& report) {
  std::vector<uint32_t> sizes(std::begin(kLatencySizes), std::end(kLatencySizes));
  auto measured = msg::RunMpiPingPong(sizes, run.measure);
  if (!measured.ok()) {
    Progress(fmt::format("MPI ping-pong: {}", measured.status().ToString()));
    return;
  }
  for (const auto& [size, nanos] : *measured) {
    report
        .Add(fmt::format("latency {}: MPI ping-pong (peer)", SizeName(size)), "one-way p50", nanos,
             "ns")
        .WithNote("mpiexec -n 2, its own processes, not interleaved");
  }
}

// The peers spin on two cores: anything else running halves what they get,
// and the figures mean little. Said on stderr, before and after.
void WarnIfLoaded(std::string_view when) {
  const double load = LoadAverage();
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  if (load > 0.75 * cpus) {
    Progress(
        fmt::format("warning: load average {:.1f} on {} CPUs {}: other processes compete "
                    "with the peers, the figures are not reliable",
                    load, cpus, when));
  }
}

}  // namespace

const std::vector<std::string>& MsgCaseNames() {
  static const std::vector<std::string> kNames = {"latency",  "blocking", "bandwidth", "long",
                                                  "rate",     "rate64",   "threads",   "idle",
                                                  "requests", "handlers", "packed"};
  return kNames;
}

const std::vector<std::string>& MsgNetworkNames() {
  static const std::vector<std::string> kNames = {"shm", "tcp", "via"};
  return kNames;
}

Status RunMsgBench(const MsgBenchOptions& options, Report& report) {
  Run run(options);
  run.rounds = std::max(options.repeats, kMinRounds);
  run.measure = options.quick ? std::chrono::milliseconds(30) : options.run;
  run.warmup = options.quick ? std::chrono::milliseconds(10) : options.warmup;
  run.idle = options.quick ? std::chrono::milliseconds(1000) : options.idle;
  if (run.measure <= std::chrono::nanoseconds(0) || run.warmup < std::chrono::nanoseconds(0)) {
    return InvalidArgument("--run-ms must be positive and --warmup-ms not negative");
  }

  if (options.peers) {
    TOCL_RETURN_IF_ERROR(msg::LibraryPeersAvailable().WithContext("--peers"));
    if (options.baselines_only || !msg::ToclRuntimeBuilt()) {
      return InvalidArgument(
          "--peers compares the peers with tocl, which this run does not measure");
    }
  }
  run.tocl = !options.baselines_only && msg::ToclRuntimeBuilt();
  if (!options.baselines_only && !msg::ToclRuntimeBuilt()) {
    Progress("this tocl-bench was built without the tocl runtime: baselines only");
  }
  // tocl over via: the sockets provider always, ibverbs when this machine
  // has an RDMA device (asked here, before the peers are forked; the probe
  // starts no thread).
  std::vector<std::string> via_pairs;
  if (run.tocl && Contains(options.networks, "via")) {
    via_pairs.emplace_back("via");
    if (msg::ViaIbverbsDevicePresent()) {
      via_pairs.emplace_back("via-ibverbs");
    } else {
      Progress("via-ibverbs: no RDMA device, skipped");
    }
  }
  std::vector<Group> groups = MakeGroups(options, run.tocl, via_pairs);
  if (!Contains(options.networks, "shm")) {
    for (std::string_view name : {"blocking", "long", "rate64", "threads", "idle"}) {
      if (Contains(options.cases, name)) {
        Progress(fmt::format("'{}' has shm cases only and shm is not in --network: skipped", name));
      }
    }
  }
  if (!run.tocl) {
    for (std::string_view name : {"threads", "idle", "rate64"}) {
      if (std::find(options.cases.begin(), options.cases.end(), name) != options.cases.end()) {
        Progress(fmt::format("'{}' measures tocl only: skipped", name));
      }
    }
  }
  if (groups.empty()) return InvalidArgument("no case to run");

  // The peers are forked first, while this process has one thread: the
  // daemon client below starts gRPC's threads.
  for (const Group& group : groups) {
    for (const std::string& name : PairsOf(group)) {
      if (run.pairs.contains(name)) continue;
      TOCL_ASSIGN_OR_RETURN(run.pairs[name], PeerPair::Fork(name));
    }
  }

  std::unique_ptr<DaemonProcess> daemon;
  if (run.tocl) {
    if (options.daemon_address.empty()) {
      Progress(fmt::format("starting {}", options.toclsd_path));
      TOCL_ASSIGN_OR_RETURN(daemon, DaemonProcess::Start(options.toclsd_path));
      run.daemon_address = daemon->address();
      run.daemon_pid = daemon->pid();
    } else {
      run.daemon_address = options.daemon_address;
    }
  }

  WarnIfLoaded("at the start");
  Progress(fmt::format("{} rounds, {} ms per run after {} ms of warm-up", run.rounds,
                       std::chrono::duration_cast<std::chrono::milliseconds>(run.measure).count(),
                       std::chrono::duration_cast<std::chrono::milliseconds>(run.warmup).count()));
  for (size_t g = 0; g < groups.size(); ++g) {
    Group& group = groups[g];
    if (group.idle_cpu) {
      TOCL_RETURN_IF_ERROR(RunIdle(run, *run.pairs.at(group.pair), report));
    } else {
      TOCL_RETURN_IF_ERROR(RunGroup(run, group, report));
    }
    if (group.name == "latency shm" && msg::MpiPingPongBuilt()) AddMpiRows(run, report);
    for (const std::string& name : PairsOf(group)) {
      bool pair_done =
          std::none_of(groups.begin() + static_cast<std::ptrdiff_t>(g) + 1, groups.end(),
                       [&](const Group& later) { return PairsOf(later).contains(name); });
      if (pair_done) {
        TOCL_RETURN_IF_ERROR(run.pairs.at(name)->Exit());
        run.pairs.erase(name);
      }
    }
  }
  WarnIfLoaded("at the end");
  if (run.rounds_loaded > 0) {
    Progress(
        fmt::format("warning: other processes used CPU time in {} of {} rounds (marked "
                    "LOADED in the notes): those figures are not reliable",
                    run.rounds_loaded, run.rounds_run));
  }
  if (daemon) TOCL_RETURN_IF_ERROR(daemon->Stop());
  return Status::Ok();
}

}  // namespace tocl::bench
