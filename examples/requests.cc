// Non-blocking requests and tag masks: one collector thread posts a receive
// for each worker's result up front, the workers send theirs with Isend
// (one of them a long message; to another process it would be carried on
// in the background while the worker goes on), and the collector takes the
// results as they complete.
//
//   ./requests      # prints each result as it comes, then "4 results, 1 long"
//
// Tags carry a kind in their top byte and a worker number in the rest; the
// collector receives "any result" with a masked tag selector, whatever the
// worker number. Runs in one process, enrolled with the local toclsd
// ($TOCL_DAEMON, else /var/lib/tocl/toclsd.sock).
#include <tocl/request.h>
#include <tocl/runtime.h>
#include <tocl/tag_match.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr tocl::Tag kResultKind = 0x0100'0000;
constexpr tocl::Tag kKindBits = 0xFF00'0000;
constexpr int kWorkers = 4;

int Fail(const char* what, const tocl::Status& status) {
  std::fprintf(stderr, "requests: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

// Worker `index` sends its result; the last one's is longer than one
// message (it is cut into fragments by the library).
tocl::Status Work(tocl::Runtime& runtime, tocl::Gid collector, int index) {
  tocl::Result<tocl::Gid> me = runtime.EnrollThread("worker-" + std::to_string(index));
  if (!me.ok()) return me.status();
  const size_t count = index == kWorkers - 1 ? runtime.short_max_payload() : 1000;
  std::vector<uint32_t> values(count);
  std::iota(values.begin(), values.end(), uint32_t(index) * 1000);
  // Isend returns at once; `values` must stay as it is until the request
  // completes (Wait below).
  tocl::Result<tocl::Request> sent = runtime.Isend(*me, collector, kResultKind | uint32_t(index),
                                                   std::as_bytes(std::span(values)));
  if (!sent.ok()) return sent.status();
  // ... other work could go here ...
  return sent->Wait(std::chrono::seconds(30));
}

}  // namespace

int main() {
  tocl::Result<std::unique_ptr<tocl::Runtime>> started = tocl::Runtime::Start({.name = "requests"});
  if (!started.ok()) return Fail("start", started.status());
  tocl::Runtime& runtime = **started;
  tocl::Result<tocl::Gid> collector = runtime.EnrollThread("collector");
  if (!collector.ok()) return Fail("enroll", collector.status());

  // One posted receive per expected result, plus one that nothing will
  // match (cancelled at the end). None costs a thread.
  const tocl::TagMatch any_result = tocl::TagMatch::Masked(kResultKind, kKindBits);
  std::vector<tocl::Request> pending;
  for (int i = 0; i < kWorkers; ++i) {
    tocl::Result<tocl::Request> posted = runtime.Irecv(*collector, tocl::Gid(), any_result);
    if (!posted.ok()) return Fail("Irecv", posted.status());
    pending.push_back(std::move(*posted));
  }
  tocl::Result<tocl::Request> never = runtime.Irecv(*collector, tocl::Gid(), 0x0200'0000);
  if (!never.ok()) return Fail("Irecv", never.status());

  std::vector<std::thread> workers;
  std::vector<tocl::Status> outcomes(kWorkers);
  for (int i = 0; i < kWorkers; ++i) {
    workers.emplace_back([&, i] { outcomes[i] = Work(runtime, *collector, i); });
  }

  int results = 0, long_ones = 0;
  for (;;) {
    tocl::Result<size_t> done = tocl::WaitAny(pending, std::chrono::seconds(30));
    if (done.status().code() == tocl::StatusCode::kInvalidArgument) break;  // none left
    if (!done.ok()) return Fail("WaitAny", done.status());
    tocl::Result<tocl::Buffer> result = pending[*done].TakeBuffer();
    if (!result.ok()) return Fail("result", result.status());
    const bool is_long = result->size() > runtime.short_max_payload();
    std::printf("worker %u: %zu values from %s%s\n", result->tag() & ~kKindBits,
                result->size() / sizeof(uint32_t), result->source().ToString().c_str(),
                is_long ? " (a long message)" : "");
    ++results;
    long_ones += is_long ? 1 : 0;
    pending[*done] = tocl::Request();  // WaitAny skips it from now on
  }
  for (std::thread& worker : workers) worker.join();
  for (const tocl::Status& outcome : outcomes) {
    if (!outcome.ok()) return Fail("worker", outcome);
  }
  // Nothing came for this one: cancelling it is Ok, and it completes with
  // Cancelled.
  if (tocl::Status cancelled = never->Cancel(); !cancelled.ok()) return Fail("Cancel", cancelled);
  std::printf("%d results, %d long\n", results, long_ones);
  return results == kWorkers ? 0 : 1;
}
