#include "service/daemon_stubs.h"

namespace tocl::directory {

namespace pb = ::tocl::directory::v1;

pb::Directory::Stub& DaemonStubs::For(const std::string& address) {
  std::lock_guard lock(mu_);
  auto& stub = stubs_[address];
  if (!stub) {
    grpc::ChannelArguments args;
    // A forwarded ReadLog answer carries up to 4 MiB of log.
    args.SetMaxReceiveMessageSize(64 << 20);
    stub = pb::Directory::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
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
