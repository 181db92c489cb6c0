#include "runtime/directory_queries.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "core/deadline.h"

namespace tocl::runtime {
namespace {

using SystemClock = std::chrono::system_clock;

// The largest page the daemon gives (its kMaxQueryResults).
constexpr size_t kPage = 10'000;

}  // namespace

bool DaemonWentAway(const Status& status) {
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kCancelled;
}

void PauseUnlessStopped(std::stop_token stop, std::chrono::nanoseconds pause) {
  std::mutex mu;
  std::unique_lock lock(mu);
  std::condition_variable_any().wait_for(lock, stop, pause, [] { return false; });
}

Result<std::vector<Entity>> QueryEntities(DirectoryClient& client, std::string_view expression,
                                          size_t limit) {
  if (limit == 0) return client.QueryAll(expression);
  std::vector<Entity> found;
  std::string token;
  do {
    const size_t page = std::min(limit - found.size(), kPage);
    TOCL_ASSIGN_OR_RETURN(QueryPage next,
                          client.Query(expression, static_cast<uint32_t>(page), token));
    const size_t take = std::min(next.entities.size(), limit - found.size());
    std::move(next.entities.begin(), next.entities.begin() + static_cast<ptrdiff_t>(take),
              std::back_inserter(found));
    token = std::move(next.next_page_token);
  } while (!token.empty() && found.size() < limit);
  return found;
}

Result<DirectoryRead> ReadMatches(DirectoryClient& client, std::string_view expression,
                                  size_t limit) {
  DirectoryRead read;
  TOCL_ASSIGN_OR_RETURN(read.seen, client.Ping());
  TOCL_ASSIGN_OR_RETURN(read.matches, QueryEntities(client, expression, limit));
  return read;
}

Result<std::vector<Entity>> AwaitMatches(DirectoryClient& client, std::string_view expression,
                                         size_t count, std::chrono::milliseconds timeout,
                                         std::stop_token stop) {
  if (count == 0) return InvalidArgument("WaitForQuery needs a count of at least 1");
  const SystemClock::time_point deadline = DeadlineAfter<SystemClock>(timeout);
  const auto stopped = [] {
    return Status(StatusCode::kCancelled, "the runtime is shutting down");
  };
  size_t matched = 0;
  auto retry = kFirstRetry;
  Status unreachable;
  for (;;) {
    if (stop.stop_requested()) return stopped();
    Result<DirectoryRead> answer = ReadMatches(client, expression, count);
    Status failure;
    std::optional<std::vector<Entity>> found;
    if (answer.ok()) {
      if (answer->matches.size() >= count) return std::move(answer->matches);
      matched = answer->matches.size();
      uint64_t seen = answer->seen;
      // Each change after the last answer may complete the match: ask again.
      // Changes it already included (seq <= seen) are skipped, so that a
      // burst of them costs one question, not one each.
      Status asked;
      Status watched = client.WatchUntil(
          seen, deadline,
          [&](const ChangeEvent& event) {
            if (event.seq <= seen) return true;
            Result<DirectoryRead> again = ReadMatches(client, expression, count);
            if (!again.ok()) {
              asked = again.status();
              return false;
            }
            seen = again->seen;
            if (again->matches.size() >= count) {
              found = std::move(again->matches);
              return false;
            }
            matched = again->matches.size();
            return true;
          },
          {}, stop);
      if (found) return std::move(*found);
      failure = asked.ok() ? watched : asked;
    } else {
      failure = answer.status();
    }
    if (stop.stop_requested()) return stopped();
    if (failure.code() == StatusCode::kDeadlineExceeded || SystemClock::now() >= deadline) {
      return DeadlineExceeded(fmt::format(
          "{} of the {} entities waited for match '{}' after {} ms{}", matched, count, expression,
          timeout.count(),
          unreachable.ok()
              ? ""
              : fmt::format(" (the daemon was unreachable: {})", unreachable.message())));
    }
    // The daemon went away (our own cancellation is checked above): ask
    // again shortly, until the deadline. Anything else (a query the daemon
    // refuses) is final.
    if (!DaemonWentAway(failure)) return failure;
    unreachable = failure;
    PauseUnlessStopped(stop, std::min<SystemClock::duration>(retry, deadline - SystemClock::now()));
    retry = std::min(retry * 2, kLastRetry);
  }
}

}  // namespace tocl::runtime
