#include "directory_client/connect_failure.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>

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

bool Refused(std::string_view grpc_message) {
  // gRPC 1.51 words it "... Failed to connect to remote host: Connection
  // refused" (strerror of ECONNREFUSED).
  constexpr std::string_view kRefused = "connection refused";
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return std::search(grpc_message.begin(), grpc_message.end(), kRefused.begin(), kRefused.end(),
                     [&](char a, char b) { return lower(a) == b; }) != grpc_message.end();
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
      // The host answered that nothing listens on the port: waiting out
      // the timeout would only repeat it.
      if (Refused(last)) {
        return Unavailable(fmt::format(
            "cannot reach the daemon at {}: connection refused (nothing listens there; is "
            "toclsd running, listening on that address?)",
            target.target));
      }
    }
    if (!connection.channel->WaitForStateChange(state, deadline)) break;
  }
  // Only a failed handshake (above) says TLS is the matter: a silent
  // address gets no advice about credentials.
  if (!tcp) {
    return Unavailable(
        fmt::format("cannot reach the daemon at {} (is toclsd running?)", target.target));
  }
  return Unavailable(
      fmt::format("cannot reach the daemon at {}{}: no answer (is toclsd running?{})",
                  target.target, how, last.empty() ? "" : " " + last));
}

}  // namespace tocl::client
