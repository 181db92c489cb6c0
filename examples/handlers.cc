// Message handlers (upcalls): a "squares" service whose requests each run
// a handler on the runtime's threads, which replies to the sender; a
// client thread sends it numbers and collects the answers with Recv. A
// second, ordered handler keeps a log in arrival order.
//
//   ./handlers      # prints each answer, then "8 answers, log: 1 2 3 4 5 6 7 8"
//
// The service could be in another process: clients only need its Gid
// (registration->thread), or find it in the directory by its name
// ("kind=thread and name=squares"). Runs in one process, enrolled with the
// local toclsd ($TOCL_DAEMON, else /var/lib/tocl/toclsd.sock).
#include <tocl/handler.h>
#include <tocl/runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr tocl::Tag kSquare = 1;  // a request: one uint64_t
constexpr tocl::Tag kAnswer = 2;  // the reply: the request's number and its square
constexpr tocl::Tag kLog = 3;     // a line for the ordered log
constexpr uint64_t kRequests = 8;

int Fail(const char* what, const tocl::Status& status) {
  std::fprintf(stderr, "handlers: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

template <typename T>
std::span<const std::byte> BytesOf(const T& value) {
  return std::as_bytes(std::span(&value, 1));
}

}  // namespace

int main() {
  auto runtime = tocl::Runtime::Start({.name = "handlers-example"});
  if (!runtime.ok()) return Fail("start", runtime.status());
  tocl::Runtime& rt = **runtime;

  // The service: a thread of its own, enrolled by the runtime; several
  // calls may run at once (unordered), each answers its request's sender.
  auto squares = rt.RegisterHandler(tocl::Gid(), /*source=*/tocl::Gid(), kSquare,
                                    [&rt](tocl::HandlerContext& call) {
                                      uint64_t n = 0;
                                      std::memcpy(&n, call.message.data(), sizeof n);
                                      const uint64_t answer[2] = {n, n * n};
                                      (void)rt.Send(call.self, call.info.source, kAnswer,
                                                    std::as_bytes(std::span(answer)));
                                    },
                                    {.thread_name = "squares"});
  if (!squares.ok()) return Fail("register the squares handler", squares.status());

  // An ordered handler: one call at a time, in the order the lines came.
  std::mutex log_mu;
  std::condition_variable log_cv;
  std::string log;
  auto logger = rt.RegisterHandler(tocl::Gid(), tocl::Gid(), kLog,
                                   [&](tocl::HandlerContext& call) {
                                     std::lock_guard lock(log_mu);
                                     if (!log.empty()) log += ' ';
                                     log.append(reinterpret_cast<const char*>(call.message.data()),
                                                call.message.size());
                                     log_cv.notify_all();
                                   },
                                   {.ordered = true, .thread_name = "log"});
  if (!logger.ok()) return Fail("register the log handler", logger.status());

  // The client.
  tocl::Result<tocl::Gid> me = rt.EnrollThread("client");
  if (!me.ok()) return Fail("enroll", me.status());
  for (uint64_t n = 1; n <= kRequests; ++n) {
    tocl::Status sent = rt.Send(*me, squares->thread, kSquare, BytesOf(n));
    if (!sent.ok()) return Fail("send a request", sent);
  }
  for (uint64_t i = 0; i < kRequests; ++i) {
    // Answers come in whatever order the calls finished.
    tocl::Result<tocl::Buffer> reply =
        rt.RecvFor(*me, std::chrono::seconds(10), squares->thread, kAnswer);
    if (!reply.ok()) return Fail("receive an answer", reply.status());
    uint64_t answer[2];
    std::memcpy(answer, reply->data(), sizeof answer);
    std::printf("%llu squared is %llu\n", static_cast<unsigned long long>(answer[0]),
                static_cast<unsigned long long>(answer[1]));
    const std::string line = std::to_string(i + 1);
    tocl::Status logged =
        rt.Send(*me, logger->thread, kLog, std::as_bytes(std::span(line.data(), line.size())));
    if (!logged.ok()) return Fail("send a log line", logged);
  }

  // Cancel waits for running calls: once it returns, none runs. The log's
  // lines may still be on their way: send a last one and wait for it.
  const std::string last = "end";
  (void)rt.Send(*me, logger->thread, kLog, std::as_bytes(std::span(last.data(), last.size())));
  {
    std::unique_lock lock(log_mu);
    if (!log_cv.wait_for(lock, std::chrono::seconds(10), [&] { return log.ends_with("end"); })) {
      return Fail("wait for the log", tocl::Status(tocl::StatusCode::kDeadlineExceeded, log));
    }
  }
  for (tocl::HandlerId id : {squares->id, logger->id}) {
    tocl::Status cancelled = rt.CancelHandler(id);
    if (!cancelled.ok()) return Fail("cancel a handler", cancelled);
  }
  std::lock_guard lock(log_mu);
  std::printf("%llu answers, log: %s\n", static_cast<unsigned long long>(kRequests),
              log.substr(0, log.size() - 4).c_str());
  return 0;
}
