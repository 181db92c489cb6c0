#include "tocl/directory_client.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>

#include "core/environment.h"
#include "directory_client/channel.h"
#include "directory_client/connect_failure.h"
#include "directory_client/convert.h"
#include "directory_client/daemon_address.h"
#include "directory_client/grpc_status.h"
#include "grpc_tls/tls_credentials.h"
#include "security/credentials.h"

namespace tocl {
namespace client {

Result<ChannelTarget> ResolveTarget(std::string_view address, const std::string& credentials_dir) {
  TOCL_ASSIGN_OR_RETURN(std::string target, DaemonTarget(address));
  ChannelTarget resolved{.target = std::move(target)};
  if (resolved.target.starts_with("unix:")) return resolved;
  std::optional<std::string> directory = credentials_dir.empty()
                                             ? security::CredentialsDirectoryFromEnvironment()
                                             : std::optional<std::string>(credentials_dir);
  if (!directory) return resolved;
  Result<security::Credentials> credentials = security::LoadCredentials(*directory);
  if (!credentials.ok()) {
    // Whatever is wrong with them (missing, exposed, mismatched), they are
    // the caller's to fix: InvalidArgument, the message naming the file.
    return InvalidArgument(
        fmt::format("credentials for {} ({}): {}", resolved.target,
                    credentials_dir.empty() ? "$TOCL_CREDENTIALS" : "credentials_dir",
                    credentials.status().message()));
  }
  resolved.tls = grpc_tls::ChannelCredentials(*credentials);
  resolved.credentials_dir = *directory;
  return resolved;
}

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelTarget& target) {
  grpc::ChannelArguments args;
  // A daemon restart should be noticed and reconnected within about a
  // second, not after gRPC's default backoff of up to two minutes.
  // (Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also uses it as the
  // connect timeout, and 100 ms is too short for a daemon that just started.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // The enroll stream is how the daemon learns a process died; keepalives
  // find a dead peer on a TCP path where no FIN/RST arrives.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // The daemon caps a Query page at 2 MiB; other replies are smaller. The
  // margin keeps older or newer daemons readable.
  args.SetMaxReceiveMessageSize(64 << 20);
  if (!target.tls) {
    return grpc::CreateCustomChannel(target.target, grpc::InsecureChannelCredentials(), args);
  }
  grpc_tls::SetServerNameOverride(args);
  return grpc::CreateCustomChannel(target.target, target.tls, args);
}

Connection::Connection(const ChannelTarget& target)
    : channel(MakeChannel(target)),
      directory(pb::Directory::NewStub(channel)),
      health(grpc::health::v1::Health::NewStub(channel)) {}

std::shared_ptr<Connection> ConnectionSlot::Get() const {
  std::lock_guard lock(mu_);
  return current_;
}

void ConnectionSlot::Retire(const std::shared_ptr<Connection>& failed) {
  std::lock_guard lock(mu_);
  if (current_ == failed) current_ = std::make_shared<Connection>(target_);
}

void ConnectionSlot::Observe(const std::shared_ptr<Connection>& used, const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) Retire(used);
}

std::unique_ptr<grpc::ClientContext> NewCallContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  return context;
}

}  // namespace client

std::string DirectoryClient::DefaultAddress() {
  return FromEnvironment("TOCL_DAEMON", "unix:/var/lib/tocl/toclsd.sock");
}

DirectoryClient::DirectoryClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectoryClient::~DirectoryClient() = default;

const std::string& DirectoryClient::address() const {
  return impl_->connection.target();
}

Result<std::unique_ptr<DirectoryClient>> DirectoryClient::Connect(
    std::string address, std::chrono::milliseconds timeout) {
  if (address.empty()) return InvalidArgument("empty daemon address");
  return Connect(ConnectOptions{.address = std::move(address), .timeout = timeout});
}

Result<std::unique_ptr<DirectoryClient>> DirectoryClient::Connect(const ConnectOptions& options) {
  const std::string address = options.address.empty() ? DefaultAddress() : options.address;
  TOCL_ASSIGN_OR_RETURN(client::ChannelTarget resolved,
                        client::ResolveTarget(address, options.credentials_dir));
  const std::string& target = resolved.target;
  // A unix socket that is not there cannot start answering within the
  // timeout worth waiting for: say so at once.
  if (target.starts_with("unix:")) {
    std::string path = target.substr(5);
    if (path.starts_with("//")) path = path.substr(2);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return Unavailable(fmt::format(
          "cannot reach the daemon at {}: {} does not exist (is toclsd running?)", target, path));
    }
  }
  auto impl = std::make_unique<Impl>(resolved);
  auto connection = impl->connection.Get();
  TOCL_RETURN_IF_ERROR(client::AwaitConnected(*connection, resolved,
                                              std::chrono::system_clock::now() + options.timeout));
  return std::unique_ptr<DirectoryClient>(new DirectoryClient(std::move(impl)));
}

Result<uint64_t> DirectoryClient::Ping() {
  auto context = client::NewCallContext();
  client::pb::PingRequest request;
  client::pb::PingResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->Ping(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  if (!status.ok()) return client::FromGrpcStatus(status, "ping");
  return response.head_seq();
}

Status DirectoryClient::CheckHealth() {
  auto context = client::NewCallContext();
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->health->Check(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  if (!status.ok()) return client::FromGrpcStatus(status, "health check");
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return Unavailable("the daemon is not serving");
  }
  return Status::Ok();
}

Result<Entity> DirectoryClient::Lookup(Gid gid) {
  auto context = client::NewCallContext();
  client::pb::LookupRequest request;
  request.set_gid(gid.raw());
  client::pb::LookupResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->Lookup(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  if (!status.ok()) return client::FromGrpcStatus(status, fmt::format("lookup {}", gid.ToString()));
  return client::FromProto(response.entity());
}

Result<QueryPage> DirectoryClient::Query(std::string_view expression, uint32_t limit,
                                         std::string_view page_token) {
  auto context = client::NewCallContext();
  client::pb::QueryRequest request;
  request.set_expression(std::string(expression));
  request.set_limit(limit);
  request.set_page_token(std::string(page_token));
  client::pb::QueryResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->Query(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  if (!status.ok()) return client::FromGrpcStatus(status, "query");
  QueryPage page;
  page.entities.reserve(response.entities_size());
  for (const auto& entity : response.entities()) page.entities.push_back(client::FromProto(entity));
  page.next_page_token = response.next_page_token();
  return page;
}

Result<std::vector<Entity>> DirectoryClient::QueryAll(std::string_view expression,
                                                      size_t max_results) {
  std::vector<Entity> all;
  std::string token;
  do {
    TOCL_ASSIGN_OR_RETURN(QueryPage page, Query(expression, 10'000, token));
    if (all.size() + page.entities.size() > max_results) {
      return ResourceExhausted(
          fmt::format("query '{}' matches more than {} entities", expression, max_results));
    }
    std::move(page.entities.begin(), page.entities.end(), std::back_inserter(all));
    token = std::move(page.next_page_token);
  } while (!token.empty());
  return all;
}

namespace {

// The latest statistics the processes reported (pool or network): one RPC
// of `Stub::*rpc`, each process's entry converted with FromProto.
template <typename Request, typename Response, typename Rpc>
auto ReportedStats(client::ConnectionSlot& connection_pool, Gid process, std::string_view what,
                   Rpc rpc)
    -> Result<std::vector<decltype(client::FromProto(Response().processes(0)))>> {
  auto context = client::NewCallContext();
  Request request;
  request.set_process(process.raw());
  Response response;
  auto connection = connection_pool.Get();
  grpc::Status status = ((*connection->directory).*rpc)(context.get(), request, &response);
  connection_pool.Observe(connection, status);
  if (!status.ok()) {
    return client::FromGrpcStatus(status, process.is_null()
                                              ? std::string(what)
                                              : fmt::format("{} of {}", what, process.ToString()));
  }
  std::vector<decltype(client::FromProto(response.processes(0)))> all;
  all.reserve(static_cast<size_t>(response.processes_size()));
  for (const auto& stats : response.processes()) all.push_back(client::FromProto(stats));
  return all;
}

}  // namespace

Result<std::vector<ProcessPoolStats>> DirectoryClient::PoolStats(Gid process) {
  return ReportedStats<client::pb::GetPoolStatsRequest, client::pb::GetPoolStatsResponse>(
      impl_->connection, process, "pool stats", &client::pb::Directory::Stub::GetPoolStats);
}

Result<std::vector<ProcessNetworkStats>> DirectoryClient::NetworkStats(Gid process) {
  return ReportedStats<client::pb::GetNetworkStatsRequest, client::pb::GetNetworkStatsResponse>(
      impl_->connection, process, "network stats", &client::pb::Directory::Stub::GetNetworkStats);
}

namespace {

// Reads the change stream of `context` (opened by the caller) into
// `on_event` until it returns false (then cancels the call) or the stream
// ends. Returns whether `on_event` ended it, and the call's status.
std::pair<bool, grpc::Status> ReadChanges(client::ConnectionSlot& slot,
                                          grpc::ClientContext& context, uint64_t since_seq,
                                          const std::vector<ChangeOp>& ops,
                                          const std::function<bool(const ChangeEvent&)>& on_event) {
  client::pb::WatchRequest request;
  request.set_since_seq(since_seq);
  for (ChangeOp op : ops) request.add_ops(client::ToProto(op));
  auto connection = slot.Get();
  auto reader = connection->directory->Watch(&context, request);
  bool stopped_by_callback = false;
  client::pb::ChangeEvent event;
  while (reader->Read(&event)) {
    if (!on_event(client::FromProto(event))) {
      stopped_by_callback = true;
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  slot.Observe(connection, status);
  return {stopped_by_callback, status};
}

}  // namespace

Status DirectoryClient::Watch(uint64_t since_seq,
                              const std::function<bool(const ChangeEvent&)>& on_event,
                              const std::function<bool()>& stop, const std::vector<ChangeOp>& ops) {
  grpc::ClientContext context;
  // A blocked Read cannot see `stop`; a small companion thread polls it and
  // cancels the call.
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  std::atomic<bool> stopped{false};
  std::thread stopper;
  if (stop) {
    stopper = std::thread([&] {
      std::unique_lock lock(mu);
      while (!done) {
        if (stop()) {
          stopped = true;
          context.TryCancel();
          return;
        }
        done_cv.wait_for(lock, std::chrono::milliseconds(50));
      }
    });
  }
  auto [stopped_by_callback, status] =
      ReadChanges(impl_->connection, context, since_seq, ops, on_event);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  done_cv.notify_all();
  if (stopper.joinable()) stopper.join();
  if (stopped_by_callback || stopped) return Status::Ok();
  if (status.ok()) return Unavailable("the daemon ended the watch");
  return client::FromGrpcStatus(status, "watch");
}

Status DirectoryClient::WatchUntil(uint64_t since_seq,
                                   std::chrono::system_clock::time_point deadline,
                                   const std::function<bool(const ChangeEvent&)>& on_event,
                                   const std::vector<ChangeOp>& ops, std::stop_token stop) {
  grpc::ClientContext context;
  context.set_deadline(deadline);
  // Runs at once when stop was requested before: a context cancelled
  // before its call starts cancels the call as it starts.
  std::stop_callback cancel(stop, [&context] { context.TryCancel(); });
  auto [stopped_by_callback, status] =
      ReadChanges(impl_->connection, context, since_seq, ops, on_event);
  if (stopped_by_callback) return Status::Ok();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return DeadlineExceeded("the watch reached its deadline");
  }
  if (stop.stop_requested()) return Status(StatusCode::kCancelled, "the watch was stopped");
  if (status.ok()) return Unavailable("the daemon ended the watch");
  return client::FromGrpcStatus(status, "watch");
}

}  // namespace tocl
