#include "service/daemon_stubs.h"

namespace tocl::directory {

namespace pb = ::tocl::directory::v1;

pb::Directory::Stub& DaemonStubs::For(const std::string& address) {
  std::lock_guard lock(mu_);
  auto& stub = stubs_[address];
  // (A forwarded ReadLog answer carries up to 4 MiB of log: the channel
  // takes 64 MiB.)
  if (!stub) stub = pb::Directory::NewStub(channels_.New(address));
  return *stub;
}

std::unique_ptr<grpc::ClientContext> DaemonStubs::ForwardContext(
    const grpc::ServerContext& incoming, Gid self, std::chrono::milliseconds fallback) {
  auto context = std::make_unique<grpc::ClientContext>();
  const auto deadline = incoming.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    context->set_deadline(std::chrono::system_clock::now() + fallback);
  } else {
    context->set_deadline(deadline);
  }
  context->AddMetadata(kForwardedByKey, self.ToString());
  return context;
}

bool DaemonStubs::Forwarded(const grpc::ServerContext& incoming) {
  return incoming.client_metadata().contains(kForwardedByKey);
}

}  // namespace tocl::directory
