#include "directory_client/grpc_status.h"

#include <fmt/format.h>

namespace tocl::client {

Status FromGrpcStatus(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return Status::Ok();
  StatusCode code = StatusCode::kInternal;
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return Status::Ok();
    case grpc::StatusCode::CANCELLED:
      code = StatusCode::kCancelled;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = StatusCode::kInvalidArgument;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = StatusCode::kNotFound;
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
      code = StatusCode::kAlreadyExists;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      code = StatusCode::kPermissionDenied;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      code = StatusCode::kResourceExhausted;
      break;
    case grpc::StatusCode::OUT_OF_RANGE:
      code = StatusCode::kOutOfRange;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      code = StatusCode::kUnavailable;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = StatusCode::kDeadlineExceeded;
      break;
    case grpc::StatusCode::ABORTED:
      code = StatusCode::kInProgress;
      break;
    case grpc::StatusCode::DATA_LOSS:
      code = StatusCode::kDataLoss;
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      code = StatusCode::kUnimplemented;
      break;
    default:
      code = StatusCode::kInternal;
      break;
  }
  // The daemon's own messages are complete sentences; transport failures
  // get the call's name in front.
  if (code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded ||
      code == StatusCode::kCancelled || code == StatusCode::kInternal) {
    return Status(code, fmt::format("{}: {}", what, status.error_message()));
  }
  return Status(code, status.error_message());
}

}  // namespace tocl::client
