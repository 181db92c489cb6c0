#pragma once

#include <grpcpp/support/status.h>

#include <string_view>

#include "tocl/status.h"

namespace tocl::client {

// grpc::Status -> tocl::Status. `what` names the call ("lookup h1.p2") so
// that a connection failure reads as a sentence, not a gRPC code.
Status FromGrpcStatus(const grpc::Status& status, std::string_view what);

}  // namespace tocl::client
