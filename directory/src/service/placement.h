// Where a spawned process goes: a named host, the least loaded of the hosts
// a query names, or this host.
#pragma once

#include <string>

#include "store/store.h"
#include "tocl/directory/v1/directory.pb.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::directory {

// The host `request` is to run on, from the local store (this daemon's
// replica of the cluster):
//   host set  -> that host (NotFound when not a member, Unavailable when down)
//   where set -> of the hosts matching `kind=host and (where)` that are up,
//                the one with the fewest running processes (ties: lowest id);
//                NotFound when none matches, Unavailable when all are down
//   neither   -> this host
// InvalidArgument when both are set or `where` does not parse.
Result<Gid> ChooseHost(Store& store, const pb::SpawnProcessRequest& request);

// The gRPC address of `host`'s daemon, to forward to; `host` must be up
// (Unavailable "host h3 is down") and a member (NotFound).
Result<std::string> DaemonAddress(Store& store, Gid host);

}  // namespace tocl::directory
