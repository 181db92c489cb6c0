// The daemon addresses a client accepts, checked before any connection is
// tried: a typo is InvalidArgument saying what is wrong, not a wait for a
// daemon that cannot be there.
#pragma once

#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::client {

// "unix:PATH" (also "unix:///abs/path"), a socket path ("/p", "./p",
// "../p"), or "HOST:PORT" (a name, an IPv4 address or "[IPv6]", and a
// port from 1 to 65535) -> the gRPC target. InvalidArgument for anything
// else: "unix:" without a path, no port or one that is not a number in
// range, an empty host, spaces or other characters no host name has.
Result<std::string> DaemonTarget(std::string_view address);

}  // namespace tocl::client
