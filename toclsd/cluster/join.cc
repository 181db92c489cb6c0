#include "cluster/join.h"

#include <fmt/format.h>

#include "cluster/channel.h"
#include "tocl/directory/v1/cluster.grpc.pb.h"

namespace tocl::daemon::cluster {

Result<pb::JoinResponse> JoinOnce(const std::vector<std::string>& seeds,
                                  const pb::JoinRequest& request, std::chrono::milliseconds timeout,
                                  bool wait_for_ready) {
  std::string failures;
  Status refused;
  for (const std::string& address : seeds) {
    auto stub = pb::Cluster::NewStub(NewPeerChannel(address));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    context.set_wait_for_ready(wait_for_ready);
    pb::JoinResponse response;
    grpc::Status status = stub->Join(&context, request, &response);
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
