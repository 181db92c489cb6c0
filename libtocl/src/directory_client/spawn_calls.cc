// DirectoryClient's spawn, kill and log calls (the daemon forks, signals and
// reads the files; these only check and carry the requests).
#include <fmt/format.h>

#include <algorithm>

#include "directory_client/channel.h"
#include "directory_client/convert.h"
#include "directory_client/grpc_status.h"
#include "tocl/directory_client.h"

namespace tocl {
namespace {

// What the daemon allows when the request says 0, and the margin a spawn
// call gets on top of the enroll timeout (placement, forwarding to another
// host's daemon, fork and exec).
constexpr auto kDaemonEnrollTimeout = std::chrono::seconds(10);
constexpr auto kSpawnMargin = std::chrono::seconds(5);
constexpr int kMaxSignal = 64;

Status CheckSpawnOptions(const SpawnOptions& options) {
  if (options.executable.empty()) return InvalidArgument("spawn: no executable given");
  if (!options.host.is_null() && !options.where.empty()) {
    return InvalidArgument(
        fmt::format("spawn: give a host ({}) or a placement query ('{}'), not both",
                    options.host.ToString(), options.where));
  }
  if (!options.host.is_null() && !options.host.is_host()) {
    return InvalidArgument(
        fmt::format("spawn: {} is not a host id (h3 is)", options.host.ToString()));
  }
  if (!options.parent.is_null() && !options.parent.is_thread()) {
    return InvalidArgument(
        fmt::format("spawn: the parent {} is not a thread id", options.parent.ToString()));
  }
  if (options.enroll_timeout.count() < 0 ||
      options.enroll_timeout > std::chrono::milliseconds(UINT32_MAX)) {
    return InvalidArgument(fmt::format("spawn: enroll timeout of {} ms is out of range",
                                       options.enroll_timeout.count()));
  }
  for (const std::string& entry : options.env) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0) {
      return InvalidArgument(fmt::format("spawn: environment entry '{}' is not KEY=VALUE", entry));
    }
  }
  if (!options.name.empty()) TOCL_RETURN_IF_ERROR(ValidateName("process", options.name));
  TOCL_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
  return Status::Ok();
}

}  // namespace

std::string_view LogStreamName(LogStream stream) {
  return stream == LogStream::kStderr ? "stderr" : "stdout";
}

Result<SpawnedProcess> DirectoryClient::SpawnProcess(const SpawnOptions& options) {
  TOCL_RETURN_IF_ERROR(CheckSpawnOptions(options));
  client::pb::SpawnProcessRequest request;
  request.set_executable(options.executable);
  for (const std::string& arg : options.args) request.add_args(arg);
  for (const std::string& entry : options.env) request.add_env(entry);
  client::ToProto(options.attributes, request.mutable_attributes());
  request.set_name(options.name);
  request.set_host(options.host.raw());
  request.set_where(options.where);
  request.set_enroll_timeout_ms(static_cast<uint32_t>(options.enroll_timeout.count()));
  request.set_parent(options.parent.raw());
  request.set_working_directory(options.working_directory);

  grpc::ClientContext context;
  const auto enroll_timeout = options.enroll_timeout.count() == 0
                                  ? std::chrono::milliseconds(kDaemonEnrollTimeout)
                                  : options.enroll_timeout;
  context.set_deadline(std::chrono::system_clock::now() + enroll_timeout + kSpawnMargin);
  client::pb::SpawnProcessResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->SpawnProcess(&context, request, &response);
  impl_->connection.Observe(connection, status);
  const std::string what = fmt::format("spawn {}", options.executable);
  if (status.error_code() == grpc::StatusCode::ABORTED) {
    // The daemon's word for "it exited before enrolling": not a transient
    // failure, and its message has the exit status.
    return FailedPrecondition(fmt::format("{}: {}", what, status.error_message()));
  }
  if (!status.ok()) return client::FromGrpcStatus(status, what);
  return SpawnedProcess{
      .gid = Gid::FromRaw(response.gid()),
      .os_pid = response.os_pid(),
      .stdout_path = response.stdout_path(),
      .stderr_path = response.stderr_path(),
  };
}

Status DirectoryClient::Kill(Gid process, int signal) {
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("kill: {} is not a process id", process.ToString()));
  }
  if (signal < 1 || signal > kMaxSignal) {
    return InvalidArgument(fmt::format("kill: signal {} is not 1..{}", signal, kMaxSignal));
  }
  auto context = client::NewCallContext();
  client::pb::KillRequest request;
  request.set_gid(process.raw());
  request.set_signal(signal);
  client::pb::KillResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->Kill(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  return client::FromGrpcStatus(status, fmt::format("kill {}", process.ToString()));
}

Result<LogChunk> DirectoryClient::ReadLog(Gid process, LogStream stream, uint64_t offset,
                                          uint32_t max_bytes) {
  if (!process.is_process()) {
    return InvalidArgument(fmt::format("logs: {} is not a process id", process.ToString()));
  }
  auto context = client::NewCallContext();
  client::pb::ReadLogRequest request;
  request.set_process(process.raw());
  request.set_stream(stream == LogStream::kStderr ? client::pb::LOG_STREAM_STDERR
                                                  : client::pb::LOG_STREAM_STDOUT);
  request.set_offset(offset);
  request.set_max_bytes(max_bytes);
  client::pb::ReadLogResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->ReadLog(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  if (!status.ok()) {
    return client::FromGrpcStatus(
        status, fmt::format("read the {} of {}", LogStreamName(stream), process.ToString()));
  }
  // A daemon older than the field answers 0: its data starts where asked.
  return LogChunk{.data = std::move(*response.mutable_data()),
                  .size = response.size(),
                  .process_exited = response.process_exited(),
                  .offset = std::max(offset, response.offset())};
}

}  // namespace tocl
