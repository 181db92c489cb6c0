// The runtime's questions to the directory (Runtime::Query, WaitForQuery,
// the membership watches' reads), over the process's own connection to its
// daemon, and how they wait out a daemon that went away.
//
// WaitForQuery sleeps on the daemon's change stream: it asks again only
// when the directory changed, so it costs nothing while nothing happens
// and answers within one query of the change that completes the match.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>
#include <string_view>
#include <vector>

#include "tocl/directory_client.h"

namespace tocl::runtime {

// Every entity that matches `expression` (limit 0), or the first `limit`
// in Gid order.
Result<std::vector<Entity>> QueryEntities(DirectoryClient& client, std::string_view expression,
                                          size_t limit);

// After the daemon could not be reached, or a change stream broke: the
// first pause before asking again, and the longest (each doubles the last).
inline constexpr std::chrono::milliseconds kFirstRetry{20};
inline constexpr std::chrono::milliseconds kLastRetry{500};

// Whether a call failed because the daemon went away (a restart: calls end
// Unavailable, or Cancelled by a daemon that stops with them in flight),
// so that asking again later may work. The caller tells its own
// cancellation apart (its stop token) before asking this.
bool DaemonWentAway(const Status& status);

// Sleeps `pause`, or until `stop` is requested.
void PauseUnlessStopped(std::stop_token stop, std::chrono::nanoseconds pause);

// One look at the directory: the matches, and the newest change they
// include (at least: the query runs after the Ping). A reader that follows
// the change stream from `seen` misses nothing and may skip the changes up
// to it.
struct DirectoryRead {
  uint64_t seen = 0;
  std::vector<Entity> matches;
};

// A Ping, then QueryEntities(expression, limit); the errors of either.
Result<DirectoryRead> ReadMatches(DirectoryClient& client, std::string_view expression,
                                  size_t limit);

// The first `count` matches (Gid order) once at least that many match.
// DeadlineExceeded saying how many matched when `timeout` passes first;
// Cancelled when `stop` is requested; InvalidArgument for count 0 and what
// the daemon refuses (a query that does not parse names the position).
// While the daemon cannot be reached (a restart) it keeps trying until the
// deadline.
Result<std::vector<Entity>> AwaitMatches(DirectoryClient& client, std::string_view expression,
                                         size_t count, std::chrono::milliseconds timeout,
                                         std::stop_token stop);

}  // namespace tocl::runtime
