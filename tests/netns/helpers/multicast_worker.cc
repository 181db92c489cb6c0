// tocl-multicast-worker: both ends of the netns multicast test and of
// `tocl-bench multicast`, through the public API only (tocl/multicast.h).
// Prints "started pid P", "gid thread I gid G" per thread, then "ready",
// then events ("EVENT key value ...", worker_lines.h).
//
//   listen --threads N
//       every thread receives until the sender's end marker (kEndTag):
//       each message starts with its index in the sender's sequence (u32),
//       which must be the one after the last ("error order ..." otherwise);
//       prints "received thread G count C bytes B" at the end.
//   send --to G1,G2,... --rounds R --size S [--relay-local] [--mode M]
//       M interleave (default): R messages of S bytes; the even ones by one
//         Multicast to every G, the odd ones by a Send to each, so each
//         receiver's sequence mixes both; "multicast index I delivered D
//         receivers N copies C" each, "outcome receiver G status ..." for a
//         receiver that did not get it.
//       M bench: R rounds, each a Multicast and the same message sent by a
//         Send to each G (which goes first alternates): "op kind multicast|sends
//         round R us T tx B copies C", B the bytes the host's interfaces
//         sent meanwhile (/proc/net/dev of its namespace, every eth*).
//       Then an end marker to each G; "sent count N".
// Exit 0 on success, 1 on a failure (an "error" line says what), 2 usage.
#include <fmt/format.h>
#include <unistd.h>

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

struct Options {
  std::string command;
  int threads = 1;
  std::vector<Gid> to;
  uint32_t rounds = 10;
  size_t size = 1000;
  bool relay_local = false;
  std::string mode = "interleave";
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tocl-multicast-worker: %s\nusage: tocl-multicast-worker listen --threads N\n"
               "       tocl-multicast-worker send --to G,... --rounds R --size S "
               "[--relay-local] [--mode interleave|bench]\n",
               why.c_str());
  return 2;
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
    } else if (flag == "--to") {
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) {
        auto gid = Gid::Parse(item);
        if (!gid.ok()) return gid.status();
        options.to.push_back(*gid);
      }
    } else {
      return InvalidArgument("unknown flag " + flag);
    }
  }
  if (options.threads < 1 || options.threads > 64) return InvalidArgument("1..64 threads");
  if (options.command == "send" && options.to.empty()) return InvalidArgument("send needs --to");
  if (options.mode != "interleave" && options.mode != "bench") {
    return InvalidArgument("--mode interleave or bench");
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

void Listen(Runtime& runtime, Gid self, LinePrinter& out, bool& failed) {
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
      Listen(runtime, threads[i], out, bad);
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

int RunSend(Runtime& runtime, const Options& options, LinePrinter& out) {
  auto me = runtime.EnrollThread("mcast-sender");
  if (!me.ok()) {
    out.Print("error enroll status {}", me.status().ToString());
    return 1;
  }
  out.Print("gid thread 0 gid {}", me->ToString());
  out.Print("ready");
  const MulticastOptions multicast_options{.relay_local = options.relay_local};
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
  LinePrinter out;
  out.Print("started pid {}", ::getpid());
  auto runtime = tocl::Runtime::Start({.name = "mcast-" + options.command});
  if (!runtime.ok()) {
    out.Print("error start status {}", runtime.status().ToString());
    return 1;
  }
  int code = options.command == "listen" ? RunListen(**runtime, options, out)
                                         : RunSend(**runtime, options, out);
  if (tocl::Status down = (*runtime)->Shutdown(); !down.ok()) {
    out.Print("error shutdown status {}", down.ToString());
    code = 1;
  }
  out.Print("done");
  return code;
}
