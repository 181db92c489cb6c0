// Reaching the daemon named by a `--daemon ADDR` flag, with errors a person
// can act on.
//
//   auto client = tocl::cli::ConnectToDaemon(flag);
//   if (!client.ok()) { /* "cannot reach the daemon at unix:/x/toclsd.sock: ..." */ }
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "tocl/directory_client.h"
#include "tocl/status.h"

namespace tocl::cli {

// How long a tool waits for a daemon that has a socket but does not answer.
inline constexpr std::chrono::milliseconds kConnectTimeout = std::chrono::seconds(3);

// The gRPC address for what a user typed: "unix:/path" and "host:port" as
// they are; a bare socket path (anything with a '/' or without a ':')
// becomes "unix:<path>".
std::string NormalizeDaemonAddress(std::string_view address);

// Connects to the daemon at `address` (any form NormalizeDaemonAddress
// takes). Fails at once when a unix socket file is missing, else waits up
// to `timeout`. Errors: Unavailable "cannot reach the daemon at ADDR: why".
// A TCP address uses TLS with the credentials in $TOCL_CREDENTIALS (which
// `tocl --credentials` sets); a failed TLS handshake fails at once, saying
// so; credentials that cannot be loaded are an error naming the file.
Result<std::unique_ptr<DirectoryClient>> ConnectToDaemon(
    std::string_view address, std::chrono::milliseconds timeout = kConnectTimeout);

}  // namespace tocl::cli
