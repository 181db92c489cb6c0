// tocl-long-worker: one end of the netns long-message tests
// (tests/netns/long_messages_test.cc), using only tocl/runtime.h.
//
//   tocl-long-worker recv [--threads N] [--senders N] [--into BYTES] [--slow-ms MS]
//                         [--patience-s S] [--pause-before-exit] [RUNTIME OPTIONS]
//   tocl-long-worker send --to GID[,GID...] --plan PLAN [--threads N] [--progress-ms MS]
//                         [--wait-after-failure] [--pause-before-end] [--pause-before-exit]
//                         [RUNTIME OPTIONS]
//   RUNTIME OPTIONS: --reassembly-cap BYTES --fragment-timeout-ms MS --partial-timeout-ms MS
//
// Networks, daemon and peer daemons come from $TOCL_NETWORKS, $TOCL_DAEMON
// and $TOCL_PEER_DAEMONS. Sizes take K, M, G suffixes.
//
// Both print "started pid P", then "gid thread I gid G" per thread; the receiver
// then "ready". Receiving thread I takes messages (Recv, or RecvInto with
// --into) from anyone until --senders end markers came; it checks each
// message (test_message.h: size, body SHA-256) and the order per sending
// thread, prints "got thread I from G seq S bytes B sha256 HEX" and
// "finished thread I from G count N" (N messages came, as the marker
// says), or "error thread I ..." for anything wrong. Sending thread I sends
// its plan to its destination, printing "sending thread I seq S bytes B",
// then "sent ... sha256 HEX seconds T" or "send-failed ... seconds T status
// STATUS"; then an end marker with the number it sent ("ended thread I
// count N"). The go signal (--wait-after-failure, --pause-before-end) is
// end of file on stdin. With --progress-ms the sender prints "progress
// fragments N bytes B" (fragments and bytes sent so far, every network)
// when they changed. At
// the end (the receiver once its threads are done) both print "network name
// N kind K device D failures F frames_sent F bytes_sent B provider P" per
// network (provider "-" but for via), "peer network N gid G sent S resent R
// failed 0|1 bandwidth B" per peer a network sent fragments to, and for a
// via network "vi network N peer G class C state S posted P credits C
// queued Q sent S received R" per VI of its pool. With --pause-before-exit
// either then prints "paused" and waits for the go signal before it shuts
// down (its peers' VIs stay connected, its daemon gets its statistics).
// Last line "done".
//
// Exit codes: 0 everything checked out, 1 an error (on stdout as "error"
// lines), 2 usage.
#include "long_worker.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "test_message.h"

namespace tocl::testing {

void WaitForGo() {
  static std::mutex mu;
  std::lock_guard lock(mu);
  char chunk[256];
  while (::read(STDIN_FILENO, chunk, sizeof(chunk)) > 0) {
  }
}

void PrintNetworks(const Runtime& runtime, LinePrinter& out) {
  for (const NetworkStats& network : runtime.Networks()) {
    out.Print(
        "network name {} kind {} device {} failures {} frames_sent {} bytes_sent {} provider {}",
        network.name, network.kind, network.device.empty() ? "-" : network.device, network.failures,
        network.frames_sent, network.bytes_sent, network.provider.empty() ? "-" : network.provider);
    for (const NetworkPeerStats& peer : network.peers) {
      out.Print("peer network {} gid {} sent {} resent {} failed {} bandwidth {:.0f}", network.name,
                peer.peer.ToString(), peer.fragments_sent, peer.fragments_resent,
                peer.failed ? 1 : 0, peer.bandwidth);
    }
    for (const ViStats& vi : network.vis) {
      out.Print(
          "vi network {} peer {} class {} state {} posted {} credits {} queued {} sent {} "
          "received {}",
          network.name, vi.peer.ToString(), vi.class_bytes, vi.state.empty() ? "-" : vi.state,
          vi.posted, vi.credits, vi.queued, vi.sent, vi.received);
    }
  }
}

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "tocl-long-worker: %s\n"
               "usage: tocl-long-worker recv [--threads N] [--senders N] [--into BYTES] "
               "[--slow-ms MS] [--patience-s S] [--pause-before-exit] [RUNTIME OPTIONS]\n"
               "       tocl-long-worker send --to GID[,GID...] --plan PLAN [--threads N] "
               "[--progress-ms MS] [--wait-after-failure] [--pause-before-end] "
               "[--pause-before-exit] [RUNTIME OPTIONS]\n"
               "RUNTIME OPTIONS: --reassembly-cap BYTES --fragment-timeout-ms MS "
               "--partial-timeout-ms MS\n",
               why.c_str());
  return 2;
}

Status ParseGids(const std::string& list, std::vector<Gid>& gids) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    TOCL_ASSIGN_OR_RETURN(Gid gid, Gid::Parse(list.substr(start, comma - start)));
    gids.push_back(gid);
    start = comma + 1;
  }
  return Status();
}

Status ParseOptions(int argc, char** argv, WorkerOptions& options) {
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--wait-after-failure") {
      options.wait_after_failure = true;
      continue;
    }
    if (flag == "--pause-before-end") {
      options.pause_before_end = true;
      continue;
    }
    if (flag == "--pause-before-exit") {
      options.pause_before_exit = true;
      continue;
    }
    if (i + 1 >= argc) return InvalidArgument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--to") {
      TOCL_RETURN_IF_ERROR(ParseGids(value, options.to));
    } else if (flag == "--plan") {
      options.plan = value;
    } else {
      TOCL_ASSIGN_OR_RETURN(uint64_t number, ParseSize(value));
      if (flag == "--threads") {
        options.threads = static_cast<int>(number);
      } else if (flag == "--senders") {
        options.senders = static_cast<int>(number);
      } else if (flag == "--into") {
        options.into_bytes = number;
      } else if (flag == "--slow-ms") {
        options.slow = std::chrono::milliseconds(number);
      } else if (flag == "--patience-s") {
        options.patience = std::chrono::seconds(number);
      } else if (flag == "--progress-ms") {
        options.progress = std::chrono::milliseconds(number);
      } else if (flag == "--reassembly-cap") {
        options.runtime.reassembly_cap = number;
      } else if (flag == "--fragment-timeout-ms") {
        options.runtime.fragment_timeout = std::chrono::milliseconds(number);
      } else if (flag == "--partial-timeout-ms") {
        options.runtime.partial_timeout = std::chrono::milliseconds(number);
      } else {
        return InvalidArgument("unknown flag " + flag);
      }
    }
  }
  if (options.threads < 1 || options.threads > 64) return InvalidArgument("1..64 threads");
  if (options.senders < 1) return InvalidArgument("--senders is at least 1");
  return Status();
}

}  // namespace
}  // namespace tocl::testing

int main(int argc, char** argv) {
  using namespace tocl::testing;
  const std::string command = argc > 1 ? argv[1] : "";
  if (command != "recv" && command != "send") return Usage("recv or send?");
  WorkerOptions options;
  options.runtime.name = "long-" + command;
  if (tocl::Status parsed = ParseOptions(argc, argv, options); !parsed.ok()) {
    return Usage(parsed.message());
  }
  if (command == "send" && (options.to.empty() || options.plan.empty())) {
    return Usage("send needs --to and --plan");
  }
  LinePrinter out;
  out.Print("started pid {}", ::getpid());
  auto runtime = tocl::Runtime::Start(options.runtime);
  if (!runtime.ok()) {
    out.Print("error start status {}", runtime.status().ToString());
    return 1;
  }
  int code =
      command == "recv" ? RunReceiver(**runtime, options, out) : RunSender(**runtime, options, out);
  if (tocl::Status down = (*runtime)->Shutdown(); !down.ok()) {
    out.Print("error shutdown status {}", down.ToString());
    code = 1;
  }
  out.Print("done");
  return code;
}
