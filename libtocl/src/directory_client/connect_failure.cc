#include "directory_client/connect_failure.h"

#include <fmt/format.h>

#include <string>

#include "grpc_tls/tls_credentials.h"

namespace tocl::client {
namespace {

// How long the call that asks gRPC why the channel failed may take.
constexpr auto kProbeTimeout = std::chrono::seconds(1);

// gRPC's reason for the last failed connection attempt: a call that does
// not wait for the channel fails with it at once ("" when the call reached
// the daemon after all).
std::string LastError(const Connection& connection) {
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  context.set_deadline(std::chrono::system_clock::now() + kProbeTimeout);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = connection.health->Check(&context, request, &response);
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  return status.error_message().empty() ? "unavailable" : status.error_message();
}

std::string Advice(const ChannelTarget& target) {
  if (target.tls) {
    return fmt::format(
        "the daemon must run with credentials of the same cluster as {} (tocl keygen: one CA "
        "for all hosts)",
        target.credentials_dir);
  }
  return "a daemon with credentials takes only TLS connections: give this host's credentials "
         "directory with --credentials DIR or $TOCL_CREDENTIALS";
}

}  // namespace

Status AwaitConnected(const Connection& connection, const ChannelTarget& target,
                      std::chrono::system_clock::time_point deadline) {
  const bool tcp = !target.target.starts_with("unix:");
  const std::string how = target.tls ? fmt::format(" over TLS ({})", target.credentials_dir) : "";
  std::string last;
  for (;;) {
    const grpc_connectivity_state state = connection.channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return Status::Ok();
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && tcp) {
      last = LastError(connection);
      if (last.empty()) return Status::Ok();
      if (grpc_tls::HandshakeFailed(last)) {
        return Unavailable(fmt::format(
            "cannot reach the daemon at {}{}: the connection failed in the TLS handshake ({}); {}",
            target.target, how, last, Advice(target)));
      }
    }
    if (!connection.channel->WaitForStateChange(state, deadline)) break;
  }
  if (!tcp) {
    return Unavailable(
        fmt::format("cannot reach the daemon at {} (is toclsd running?)", target.target));
  }
  return Unavailable(fmt::format("cannot reach the daemon at {}{} (is toclsd running?{}); {}",
                                 target.target, how, last.empty() ? "" : " " + last,
                                 Advice(target)));
}

}  // namespace tocl::client
