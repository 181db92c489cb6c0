#include "service/placement.h"

#include <fmt/format.h>

#include <limits>
#include <vector>

#include "query/query_parser.h"
#include "store/limits.h"

namespace tocl::directory {
namespace {

// The host's entity, with NotFound / Unavailable saying why it cannot take
// a process.
Result<pb::Entity> UsableHost(Store& store, Gid host) {
  Result<pb::Entity> entity = store.Lookup(host);
  if (entity.status().code() == StatusCode::kNotFound) {
    return NotFound(fmt::format("host {} is not a member of this cluster", host.ToString()));
  }
  TOCL_RETURN_IF_ERROR(entity.status());
  if (entity->state() == pb::UNREACHABLE) {
    return Unavailable(fmt::format("host {} is down", host.ToString()));
  }
  if (entity->state() != pb::RUNNING) {
    return Unavailable(fmt::format("host {} has left the cluster", host.ToString()));
  }
  return entity;
}

Result<Gid> LeastLoaded(Store& store, const std::string& where) {
  // Parsed alone first, so that an error's position is in the caller's text.
  TOCL_RETURN_IF_ERROR(query::Parse(where).status().WithContext("where"));
  const std::string expression = fmt::format("kind=host and ({})", where);
  std::vector<Gid> up;
  std::vector<Gid> down;
  std::string page;
  do {
    TOCL_ASSIGN_OR_RETURN(pb::QueryResponse response,
                          store.Query(expression, kMaxQueryResults, page));
    for (const pb::Entity& entity : response.entities()) {
      (entity.state() == pb::RUNNING ? up : down).push_back(Gid::FromRaw(entity.gid()));
    }
    page = response.next_page_token();
  } while (!page.empty());
  if (up.empty() && down.empty()) {
    return NotFound(fmt::format("no host matches '{}'", where));
  }
  if (up.empty()) {
    return Unavailable(fmt::format("every host that matches '{}' is down", where));
  }
  Gid best;
  uint64_t best_count = std::numeric_limits<uint64_t>::max();
  for (Gid host : up) {  // in gid order: the first of equals wins
    TOCL_ASSIGN_OR_RETURN(uint64_t count, store.RunningProcessCount(host));
    if (count < best_count) {
      best = host;
      best_count = count;
    }
  }
  return best;
}

}  // namespace

Result<Gid> ChooseHost(Store& store, const pb::SpawnProcessRequest& request) {
  if (request.host() != 0 && !request.where().empty()) {
    return InvalidArgument("give the host or the where expression to place the process, not both");
  }
  if (!request.where().empty()) return LeastLoaded(store, request.where());
  if (request.host() == 0) return store.host();
  const Gid host = Gid::FromRaw(request.host());
  if (!host.is_host()) {
    return InvalidArgument(fmt::format("{} is not a host id", host.ToString()));
  }
  if (host == store.host()) return host;
  TOCL_RETURN_IF_ERROR(UsableHost(store, host).status());
  return host;
}

Result<std::string> DaemonAddress(Store& store, Gid host) {
  TOCL_ASSIGN_OR_RETURN(pb::Entity entity, UsableHost(store, host));
  if (entity.address().empty()) {
    return Unavailable(
        fmt::format("the address of host {}'s daemon is not known here", host.ToString()));
  }
  return entity.address();
}

}  // namespace tocl::directory
