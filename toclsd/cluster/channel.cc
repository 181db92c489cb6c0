#include "cluster/channel.h"

namespace tocl::daemon::cluster {

std::shared_ptr<grpc::Channel> NewPeerChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // gRPC's default backoff grows to two minutes: a member that restarted
  // would stay unreplicated that long. (Not the MIN backoff: gRPC also uses
  // it as the connect timeout.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace tocl::daemon::cluster
