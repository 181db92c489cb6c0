// tocl-multicast-worker: both ends of the netns multicast test and of
// `tocl-bench multicast`, through the public API only (tocl/multicast.h).
// Prints "started pid P", "gid thread I gid G" per thread, then "ready",
// then events ("EVENT key value ...", worker_lines.h).
//
//   listen --threads N [--print-each] [--partial-timeout-ms T]
//       every thread receives until the sender's end marker (kEndTag):
//       each message starts with its index in the sender's sequence (u32),
//       which must be the one after the last ("error order ..." otherwise);
//       prints "received thread G count C bytes B" at the end, with
//       --print-each also "got thread G index I" for each message, and
//       "probe thread G from F" for a probe (kProbeTag: in no sequence).
//       T: RuntimeOptions::partial_timeout (a relay's long sends wait for a
//       stopped receiver that long).
//   send --to G1,G2,... --rounds R --size S [--relay-local] [--mode M]
//        [--timeout-ms T] [--probe G,...]
//       M interleave (default): R messages of S bytes; the even ones by one
//         Multicast to every G, the odd ones by a Send to each, so each
//         receiver's sequence mixes both; "multicast index I delivered D
//         receivers N copies C" each, "outcome receiver G status ..." for a
//         receiver that did not get it.
//       M bench: R rounds, each a Multicast and the same message sent by a
//         Send to each G (which goes first alternates): "op kind multicast|sends
//         round R us T tx B copies C", B the bytes the host's interfaces
//         sent meanwhile (/proc/net/dev of its namespace, every eth*).
//       M relay-death (the netns relay-death test; R ignored): a Send
//         (index 0) and a Multicast (index 1) to every G, so that every
//         connection the next one takes is made; "waiting"; at SIGUSR1 a
//         Multicast (index 2), and a Send (index 3) once it returned.
//         Meanwhile, at a second SIGUSR1, a second thread multicasts a probe
//         (kProbeTag) to the --probe Gs: "probed delivered D". Every outcome
//         printed, "carried index I receiver G carrier P status ...", and
//         every Send's, "send index I receiver G status ..." (a failed one
//         is no error here: the test judges).
//       T: MulticastOptions::timeout.
//       Then an end marker to each G ("end receiver G status ..." in
//       relay-death); "sent count N".
// Exit 0 on success, 1 on a failure (an "error" line says what), 2 usage.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "long_worker.h"
#include "tocl/multicast.h"
#include "tocl/runtime.h"

namespace tocl::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The relay-death sender's probe: not in any receiver's sequence.
constexpr Tag kProbeTag = 3;

struct Options {
  std::string command;
  int threads = 1;
  bool print_each = false;
  std::chrono::milliseconds partial_timeout{0};  // 0: the runtime's default
  std::vector<Gid> to;
  std::vector<Gid> probe;
  uint32_t rounds = 10;
  size_t size = 1000;
  bool relay_local = false;
  std::chrono::milliseconds timeout{0};  // 0: MulticastOptions' default
  std::string mode = "interleave";
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tocl-multicast-worker: %s\nusage: tocl-multicast-worker listen --threads N "
               "[--print-each] [--partial-timeout-ms T]\n"
               "       tocl-multicast-worker send --to G,... --rounds R --size S "
               "[--relay-local] [--mode interleave|bench|relay-death] [--timeout-ms T] "
               "[--probe G,...]\n",
               why.c_str());
  return 2;
}

Status ParseGids(const std::string& value, std::vector<Gid>& gids) {
  std::stringstream list(value);
  for (std::string item; std::getline(list, item, ',');) {
    auto gid = Gid::Parse(item);
    if (!gid.ok()) return gid.status();
    gids.push_back(*gid);
  }
  return Status::Ok();
}

Status Parse(int argc, char** argv, Options& options) {
  options.command = argc > 1 ? argv[1] : "";
  if (options.command != "listen" && options.command != "send") {
    return InvalidArgument("listen or send?");
  }
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--relay-local") {
      options.relay_local = true;
      continue;
    }
    if (flag == "--print-each") {
      options.print_each = true;
      continue;
    }
    if (i + 1 >= argc) return InvalidArgument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--threads") {
      options.threads = std::stoi(value);
    } else if (flag == "--rounds") {
      options.rounds = static_cast<uint32_t>(std::stoul(value));
    } else if (flag == "--size") {
      options.size = std::stoul(value);
    } else if (flag == "--mode") {
      options.mode = value;
    } else if (flag == "--timeout-ms") {
      options.timeout = std::chrono::milliseconds(std::stoul(value));
    } else if (flag == "--partial-timeout-ms") {
      options.partial_timeout = std::chrono::milliseconds(std::stoul(value));
    } else if (flag == "--to") {
      TOCL_RETURN_IF_ERROR(ParseGids(value, options.to));
    } else if (flag == "--probe") {
      TOCL_RETURN_IF_ERROR(ParseGids(value, options.probe));
    } else {
      return InvalidArgument("unknown flag " + flag);
    }
  }
  if (options.threads < 1 || options.threads > 64) return InvalidArgument("1..64 threads");
  if (options.command == "send" && options.to.empty()) return InvalidArgument("send needs --to");
  if (options.mode != "interleave" && options.mode != "bench" && options.mode != "relay-death") {
    return InvalidArgument("--mode interleave, bench or relay-death");
  }
  if (options.mode == "relay-death" && options.probe.empty()) {
    return InvalidArgument("--mode relay-death needs --probe");
  }
  if (options.size < sizeof(uint32_t)) return InvalidArgument("--size is at least 4");
  return Status::Ok();
}

// The bytes every eth* interface of this namespace sent so far.
uint64_t SentBytes() {
  std::ifstream dev("/proc/net/dev");
  uint64_t total = 0;
  for (std::string line; std::getline(dev, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(' ');
    const std::string name = line.substr(start, colon - start);
    if (name.rfind("eth", 0) != 0) continue;
    std::istringstream fields(line.substr(colon + 1));
    uint64_t value = 0;
    // receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes
    for (int field = 0; field < 9 && fields >> value; ++field) {
    }
    total += value;
  }
  return total;
}

void Listen(Runtime& runtime, Gid self, bool print_each, LinePrinter& out, bool& failed) {
  uint32_t expected = 0;
  uint64_t bytes = 0;
  for (;;) {
    auto got = runtime.RecvFor(self, std::chrono::minutes(2));
    if (!got.ok()) {
      out.Print("error receive thread {} status {}", self.ToString(), got.status().ToString());
      failed = true;
      return;
    }
    if (got->tag() == kEndTag) break;
    if (got->tag() == kProbeTag) {
      out.Print("probe thread {} from {}", self.ToString(), got->source().ToString());
      continue;
    }
    uint32_t index = 0;
    if (got->size() < sizeof(index)) {
      out.Print("error short thread {} bytes {}", self.ToString(), got->size());
      failed = true;
      return;
    }
    std::memcpy(&index, got->data(), sizeof(index));
    if (index != expected) {
      out.Print("error order thread {} expected {} got {}", self.ToString(), expected, index);
      failed = true;
    }
    if (print_each) out.Print("got thread {} index {}", self.ToString(), index);
    expected = index + 1;
    bytes += got->size();
  }
  out.Print("received thread {} count {} bytes {}", self.ToString(), expected, bytes);
}

int RunListen(Runtime& runtime, const Options& options, LinePrinter& out) {
  std::vector<Gid> threads;
  for (int i = 0; i < options.threads; ++i) {
    auto gid = runtime.EnrollThread(fmt::format("listener-{}", i), {{"role", "mcast-listener"}});
    if (!gid.ok()) {
      out.Print("error enroll status {}", gid.status().ToString());
      return 1;
    }
    out.Print("gid thread {} gid {}", i, gid->ToString());
    threads.push_back(*gid);
  }
  out.Print("ready");
  std::vector<char> failed(threads.size(), 0);
  std::vector<std::thread> listeners;
  for (size_t i = 0; i < threads.size(); ++i) {
    listeners.emplace_back([&, i] {
      bool bad = false;
      Listen(runtime, threads[i], options.print_each, out, bad);
      failed[i] = bad ? 1 : 0;
    });
  }
  for (std::thread& listener : listeners) listener.join();
  for (char bad : failed) {
    if (bad != 0) return 1;
  }
  return 0;
}

std::vector<std::byte> Message(uint32_t index, size_t size) {
  std::vector<std::byte> payload(size);
  for (size_t i = 0; i < size; ++i) payload[i] = std::byte((i * 131 + index) & 0xFF);
  std::memcpy(payload.data(), &index, sizeof(index));
  return payload;
}

MulticastOptions MulticastOptionsOf(const Options& options) {
  MulticastOptions multicast{.relay_local = options.relay_local};
  if (options.timeout.count() > 0) multicast.timeout = options.timeout;
  return multicast;
}

// The relay-death test's go signal: SIGUSR1 (blocked in every thread since
// main, so one sent early waits), up to two minutes.
bool AwaitGo(LinePrinter& out) {
  sigset_t go;
  sigemptyset(&go);
  sigaddset(&go, SIGUSR1);
  const timespec limit{.tv_sec = 120, .tv_nsec = 0};
  for (;;) {
    if (::sigtimedwait(&go, nullptr, &limit) == SIGUSR1) return true;
    if (errno == EINTR) continue;
    out.Print("error go status no SIGUSR1 within {} s", limit.tv_sec);
    return false;
  }
}

int RunRelayDeath(Runtime& runtime, const Options& options, LinePrinter& out) {
  auto me = runtime.EnrollThread("mcast-sender");
  auto prober = runtime.EnrollThread("mcast-prober");
  if (!me.ok() || !prober.ok()) {
    out.Print("error enroll status {}", (me.ok() ? prober.status() : me.status()).ToString());
    return 1;
  }
  out.Print("gid thread 0 gid {}", me->ToString());
  out.Print("gid thread 1 gid {}", prober->ToString());
  out.Print("ready");
  const MulticastOptions multicast_options = MulticastOptionsOf(options);
  uint32_t index = 0;
  int code = 0;
  auto sends = [&] {
    const auto payload = Message(index, options.size);
    for (Gid to : options.to) {
      const Status sent = runtime.Send(*me, to, kDataTag, payload);
      out.Print("send index {} receiver {} status {}", index, to.ToString(), sent.ToString());
    }
    ++index;
  };
  auto multicast = [&] {
    const auto payload = Message(index, options.size);
    auto result = runtime.Multicast(*me, options.to, kDataTag, payload, multicast_options);
    if (!result.ok()) {
      out.Print("error multicast index {} status {}", index++, result.status().ToString());
      code = 1;
      return;
    }
    for (const MulticastOutcome& outcome : result->receivers) {
      out.Print("carried index {} receiver {} carrier {} status {}", index,
                outcome.receiver.ToString(), outcome.carried_by.ToString(),
                outcome.status.ToString());
    }
    ++index;
  };
  sends();
  multicast();
  out.Print("waiting");
  if (!AwaitGo(out)) return 1;
  // The probe: its relays answer it after what they were carrying before
  // (one request after the other), on the same connection to this process.
  bool probe_failed = false;  // the probe's thread's until joined
  std::thread probe([&] {
    if (!AwaitGo(out)) {
      probe_failed = true;
      return;
    }
    const std::vector<std::byte> nothing(sizeof(uint32_t));
    auto probed = runtime.Multicast(*prober, options.probe, kProbeTag, nothing, multicast_options);
    if (!probed.ok()) {
      out.Print("error probe status {}", probed.status().ToString());
      probe_failed = true;
      return;
    }
    out.Print("probed delivered {}", probed->delivered());
  });
  multicast();
  sends();
  probe.join();
  if (probe_failed) code = 1;
  for (Gid to : options.to) {
    const Status sent = runtime.Send(*me, to, kEndTag, std::span<const std::byte>());
    out.Print("end receiver {} status {}", to.ToString(), sent.ToString());
  }
  out.Print("sent count {}", index);
  return code;
}

int RunSend(Runtime& runtime, const Options& options, LinePrinter& out) {
  auto me = runtime.EnrollThread("mcast-sender");
  if (!me.ok()) {
    out.Print("error enroll status {}", me.status().ToString());
    return 1;
  }
  out.Print("gid thread 0 gid {}", me->ToString());
  out.Print("ready");
  const MulticastOptions multicast_options = MulticastOptionsOf(options);
  uint32_t index = 0;
  int code = 0;
  auto multicast = [&](uint32_t round) {
    const auto payload = Message(index, options.size);
    const uint64_t tx = SentBytes();
    const auto start = Clock::now();
    auto result = runtime.Multicast(*me, options.to, kDataTag, payload, multicast_options);
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    if (!result.ok()) {
      out.Print("error multicast index {} status {}", index, result.status().ToString());
      code = 1;
      return;
    }
    for (const MulticastOutcome& outcome : result->receivers) {
      if (!outcome.status.ok()) {
        out.Print("outcome receiver {} status {}", outcome.receiver.ToString(),
                  outcome.status.ToString());
        code = 1;
      }
    }
    if (options.mode == "bench") {
      out.Print("op kind multicast round {} us {} tx {} copies {}", round, us, SentBytes() - tx,
                result->copies_sent);
    } else {
      out.Print("multicast index {} delivered {} receivers {} copies {}", index,
                result->delivered(), result->receivers.size(), result->copies_sent);
    }
    ++index;
  };
  auto sends = [&](uint32_t round) {
    const auto payload = Message(index, options.size);
    const uint64_t tx = SentBytes();
    const auto start = Clock::now();
    for (Gid to : options.to) {
      if (Status sent = runtime.Send(*me, to, kDataTag, payload); !sent.ok()) {
        out.Print("error send index {} to {} status {}", index, to.ToString(), sent.ToString());
        code = 1;
      }
    }
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
    if (options.mode == "bench") {
      out.Print("op kind sends round {} us {} tx {} copies {}", round, us, SentBytes() - tx,
                options.to.size());
    }
    ++index;
  };
  for (uint32_t round = 0; round < options.rounds; ++round) {
    if (options.mode == "interleave") {
      round % 2 == 0 ? multicast(round) : sends(round);
    } else if (round % 2 == 0) {
      multicast(round);
      sends(round);
    } else {
      sends(round);
      multicast(round);
    }
  }
  for (Gid to : options.to) {
    if (Status sent = runtime.Send(*me, to, kEndTag, std::span<const std::byte>()); !sent.ok()) {
      out.Print("error end to {} status {}", to.ToString(), sent.ToString());
      code = 1;
    }
  }
  out.Print("sent count {}", index);
  return code;
}

}  // namespace
}  // namespace tocl::testing

int main(int argc, char** argv) {
  using namespace tocl::testing;
  Options options;
  try {
    if (tocl::Status parsed = Parse(argc, argv, options); !parsed.ok()) {
      return Usage(parsed.message());
    }
  } catch (const std::exception& e) {
    return Usage(e.what());
  }
  if (options.mode == "relay-death") {
    // Before any thread starts: every thread inherits the mask (AwaitGo).
    sigset_t go;
    sigemptyset(&go);
    sigaddset(&go, SIGUSR1);
    ::pthread_sigmask(SIG_BLOCK, &go, nullptr);
  }
  LinePrinter out;
  out.Print("started pid {}", ::getpid());
  tocl::RuntimeOptions runtime_options{.name = "mcast-" + options.command};
  if (options.partial_timeout.count() > 0)
    runtime_options.partial_timeout = options.partial_timeout;
  auto runtime = tocl::Runtime::Start(runtime_options);
  if (!runtime.ok()) {
    out.Print("error start status {}", runtime.status().ToString());
    return 1;
  }
  int code = options.command == "listen"     ? RunListen(**runtime, options, out)
             : options.mode == "relay-death" ? RunRelayDeath(**runtime, options, out)
                                             : RunSend(**runtime, options, out);
  if (tocl::Status down = (*runtime)->Shutdown(); !down.ok()) {
    out.Print("error shutdown status {}", down.ToString());
    code = 1;
  }
  out.Print("done");
  return code;
}
