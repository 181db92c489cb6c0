// The receiving end of tocl-long-worker (long_worker.cc says what it prints).
#include <atomic>
#include <map>
#include <thread>

#include "long_worker.h"
#include "test_message.h"

namespace tocl::testing {
namespace {

struct FromSender {
  uint64_t next_seq = 0;
  bool ended = false;
};

// One receiving thread; false when anything was wrong.
bool ReceiveAll(Runtime& runtime, Gid self, int index, const WorkerOptions& options,
                LinePrinter& out) {
  std::vector<std::byte> into(options.into_bytes);
  std::map<Gid, FromSender> senders;
  bool good = true;
  int ended = 0;
  while (ended < options.senders) {
    Buffer whole;
    std::span<const std::byte> message;
    Gid source;
    Tag tag = 0;
    if (!into.empty()) {
      auto info = runtime.RecvIntoFor(self, into, options.patience);
      if (!info.ok()) {
        out.Print("error thread {} receive status {}", index, info.status().ToString());
        return false;
      }
      message = std::span<const std::byte>(into).first(info->size);
      source = info->source;
      tag = info->tag;
    } else {
      auto got = runtime.RecvFor(self, options.patience);
      if (!got.ok()) {
        out.Print("error thread {} receive status {}", index, got.status().ToString());
        return false;
      }
      whole = std::move(got).value();
      message = whole.span();
      source = whole.source();
      tag = whole.tag();
    }
    FromSender& from = senders[source];
    if (from.ended) {
      out.Print("error thread {} from {} a message after the end marker", index, source.ToString());
      good = false;
    }
    if (tag == kEndTag) {
      auto count = ParseEndMarker(message);
      if (!count.ok() || *count != from.next_seq) {
        out.Print("error thread {} from {} end marker says {} messages, {} came", index,
                  source.ToString(), count.ok() ? std::to_string(*count) : "?", from.next_seq);
        good = false;
      }
      out.Print("finished thread {} from {} count {}", index, source.ToString(), from.next_seq);
      from.ended = true;
      ++ended;
      continue;
    }
    auto header = CheckTestMessage(message);
    if (tag != kDataTag || !header.ok()) {
      out.Print("error thread {} from {} tag {} bytes {}: {}", index, source.ToString(), tag,
                message.size(), header.status().ToString());
      good = false;
      continue;
    }
    if (header->seq != from.next_seq) {
      out.Print("error thread {} from {} seq {} where {} was next", index, source.ToString(),
                header->seq, from.next_seq);
      good = false;
    }
    from.next_seq = header->seq + 1;
    out.Print("got thread {} from {} seq {} bytes {} sha256 {}", index, source.ToString(),
              header->seq, header->size, Sha256::Hex(header->body_sha256));
    whole = Buffer();  // the memory goes back before the pause
    if (options.slow.count() > 0) std::this_thread::sleep_for(options.slow);  // the workload
  }
  return good;
}

}  // namespace

int RunReceiver(Runtime& runtime, const WorkerOptions& options, LinePrinter& out) {
  std::vector<Gid> gids;
  for (int i = 0; i < options.threads; ++i) {
    auto gid = runtime.EnrollThread("recv-" + std::to_string(i));
    if (!gid.ok()) {
      out.Print("error enroll status {}", gid.status().ToString());
      return 1;
    }
    gids.push_back(*gid);
    out.Print("gid thread {} gid {}", i, gid->ToString());
  }
  out.Print("ready");
  std::atomic<bool> good{true};
  std::vector<std::thread> threads;
  for (int i = 0; i < options.threads; ++i) {
    threads.emplace_back([&, i] {
      if (!ReceiveAll(runtime, gids[i], i, options, out)) good = false;
    });
  }
  for (std::thread& thread : threads) thread.join();
  PrintNetworks(runtime, out);
  if (options.pause_before_exit) {
    out.Print("paused");
    WaitForGo();
  }
  return good ? 0 : 1;
}

}  // namespace tocl::testing
