#include "service/daemon_channels.h"

#include "grpc_tls/tls_credentials.h"

namespace tocl::directory {

DaemonChannels::DaemonChannels(const security::Credentials& credentials)
    : tls_(grpc_tls::ChannelCredentials(credentials)) {}

std::shared_ptr<grpc::Channel> DaemonChannels::New(const std::string& address) const {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // gRPC's default backoff grows to two minutes: a member that restarted
  // would stay unreplicated that long. (Not the MIN backoff: gRPC also uses
  // it as the connect timeout.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args.SetMaxReceiveMessageSize(64 << 20);
  if (!tls_) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc_tls::SetServerNameOverride(args);
  return grpc::CreateCustomChannel(address, tls_, args);
}

}  // namespace tocl::directory
