#include "cluster/join.h"

#include <fmt/format.h>

#include "tocl/directory/v1/cluster.grpc.pb.h"

namespace tocl::daemon::cluster {
namespace {

// How long the call that asks gRPC why the seed was not reached may take.
constexpr auto kProbeTimeout = std::chrono::milliseconds(500);

}  // namespace

Result<pb::JoinResponse> JoinOnce(const directory::DaemonChannels& channels,
                                  const std::vector<std::string>& seeds,
                                  const pb::JoinRequest& request, std::chrono::milliseconds timeout,
                                  bool wait_for_ready) {
  std::string failures;
  Status refused;
  for (const std::string& address : seeds) {
    auto stub = pb::Cluster::NewStub(channels.New(address));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    context.set_wait_for_ready(wait_for_ready);
    pb::JoinResponse response;
    grpc::Status status = stub->Join(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && wait_for_ready) {
      // Waiting hides why the seed was not reached; a call that does not
      // wait fails with gRPC's last connection error (a TLS handshake
      // that failed, a refused connection), or gets through.
      grpc::ClientContext probe;
      probe.set_deadline(std::chrono::system_clock::now() + kProbeTimeout);
      status = stub->Join(&probe, request, &response);
    }
    if (status.ok()) return response;
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::ALREADY_EXISTS) {
      return AlreadyExists(
          fmt::format("the seed at {} refuses: {}", address, status.error_message()));
    }
    if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
        code == grpc::StatusCode::UNIMPLEMENTED) {
      failures +=
          fmt::format("{}{}: {}", failures.empty() ? "" : "; ", address, status.error_message());
      continue;
    }
    // Not the seed, a bad request: another address may still be the seed.
    refused = FailedPrecondition(fmt::format("{} refuses: {}", address, status.error_message()));
  }
  // While any address does not answer, the seed may be that one.
  if (!failures.empty()) {
    return Unavailable(refused.ok() ? failures : failures + "; " + refused.message());
  }
  return refused;
}

}  // namespace tocl::daemon::cluster
