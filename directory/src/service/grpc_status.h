#pragma once

#include <grpcpp/support/status.h>

#include "tocl/status.h"

namespace tocl::directory {

// tocl::Status -> grpc::Status with the same meaning ("try again" becomes
// UNAVAILABLE, the gRPC code clients retry on).
grpc::Status ToGrpcStatus(const Status& status);

}  // namespace tocl::directory
