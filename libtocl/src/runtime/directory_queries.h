// The runtime's questions to the directory (Runtime::Query, WaitForQuery),
// over the process's own connection to its daemon.
//
// WaitForQuery sleeps on the daemon's change stream: it asks again only
// when the directory changed, so it costs nothing while nothing happens
// and answers within one query of the change that completes the match.
#pragma once

#include <chrono>
#include <cstddef>
#include <stop_token>
#include <string_view>
#include <vector>

#include "tocl/directory_client.h"

namespace tocl::runtime {

// Every entity that matches `expression` (limit 0), or the first `limit`
// in Gid order.
Result<std::vector<Entity>> QueryEntities(DirectoryClient& client, std::string_view expression,
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
