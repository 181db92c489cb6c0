// The enroll stream of one process, and its recovery when the daemon
// restarts: a watcher thread reads the stream; when it breaks, the thread
// reconnects and re-enrolls with the same Gid and session token.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "core/logger.h"
#include "directory_client/channel.h"
#include "directory_client/convert.h"
#include "directory_client/grpc_status.h"
#include "tocl/directory_client.h"

namespace tocl {

using EnrollStream =
    grpc::ClientReaderWriter<client::pb::EnrollRequest, client::pb::EnrollResponse>;

struct ProcessSession::Impl {
  explicit Impl(client::ChannelTarget target) : connection(std::move(target)) {}

  client::ConnectionSlot connection;        // its own channel: outlives the DirectoryClient
  client::pb::EnrollRegister registration;  // resume fields filled after the first enroll

  mutable std::mutex mu;
  std::condition_variable changed;  // connected, closing, writing or watcher_done changed
  Gid gid;                          // guarded by mu (fixed after the first enroll)
  std::string token;                // guarded by mu
  std::string host_name;            // guarded by mu
  std::string data_plane_secret;    // guarded by mu
  bool connected = false;           // guarded by mu
  bool closing = false;             // guarded by mu
  bool watcher_done = false;        // guarded by mu
  Status failure;                   // guarded by mu: why the session ended for good
  // The stream's connection outlives the stream (declared first).
  std::shared_ptr<client::Connection> stream_connection;  // guarded by mu
  std::unique_ptr<grpc::ClientContext> context;           // guarded by mu
  std::unique_ptr<EnrollStream> stream;                   // guarded by mu
  // The context of an enroll attempt in flight, so that Close() can cancel
  // it (a daemon that accepted the connection but hangs must not hang us).
  grpc::ClientContext* connecting = nullptr;  // guarded by mu
  // A Write on `stream` is in progress (a report, or Close()'s goodbye).
  // gRPC allows one Write beside one Read, and Finish() beside neither, so
  // writers take turns and the watcher waits for this to clear.
  bool writing = false;  // guarded by mu
  std::atomic<uint64_t> reenrolls{0};
  std::thread watcher;

  // Opens a stream and registers (or resumes); on success installs it.
  Status OpenStream();
  void WatchLoop();
  // Ok while the session can be used now, else why not.
  Status UsableLocked() const;
  // Snapshot for a call that needs the session: gid + token, or why not.
  Result<std::pair<Gid, std::string>> Credentials() const;
  // Writes one report on the enroll stream, taking turns with other writers.
  Status WriteReport(const client::pb::EnrollRequest& request);
};

Status ProcessSession::Impl::OpenStream() {
  auto used = connection.Get();
  auto new_context = std::make_unique<grpc::ClientContext>();
  client::pb::EnrollRequest request;
  {
    std::lock_guard lock(mu);
    if (closing) return Status(StatusCode::kCancelled, "the session is closing");
    connecting = new_context.get();
    *request.mutable_register_() = registration;
  }
  std::unique_ptr<EnrollStream> new_stream = used->directory->EnrollProcess(new_context.get());
  client::pb::EnrollResponse response;
  const bool answered = new_stream->Write(request) && new_stream->Read(&response);
  const bool enrolled_ok = answered && response.has_enrolled();
  {
    std::lock_guard lock(mu);
    connecting = nullptr;
  }
  if (!enrolled_ok) {
    // A daemon that answered something else keeps the stream open: cancel
    // it. Otherwise the stream has ended and Finish returns the daemon's
    // status at once (cancelling first would turn a refusal into CANCELLED).
    if (answered) new_context->TryCancel();
    grpc::Status status = new_stream->Finish();
    connection.Observe(used, status);
    if (status.ok()) return Unavailable("the daemon closed the enroll stream");
    return client::FromGrpcStatus(status, "enroll");
  }
  const auto& enrolled = response.enrolled();
  std::lock_guard lock(mu);
  if (closing) {
    new_context->TryCancel();
    return Status(StatusCode::kCancelled, "the session is closing");
  }
  gid = Gid::FromRaw(enrolled.gid());
  token = enrolled.session_token();
  host_name = enrolled.host_name();
  data_plane_secret = enrolled.data_plane_secret();
  registration.set_resume_gid(enrolled.gid());
  registration.set_resume_token(enrolled.session_token());
  stream.reset();  // the old stream goes before its context and connection
  context = std::move(new_context);
  stream_connection = std::move(used);
  stream = std::move(new_stream);
  connected = true;
  changed.notify_all();
  return Status::Ok();
}

void ProcessSession::Impl::WatchLoop() {
  // The Gid never changes after the first enroll; read it once, locked.
  const std::string name = [this] {
    std::lock_guard lock(mu);
    return gid.ToString();
  }();
  auto finish = [this](Status why) {
    std::lock_guard lock(mu);
    failure = std::move(why);
    watcher_done = true;
    connected = false;
    changed.notify_all();
  };
  for (;;) {
    EnrollStream* current = nullptr;
    {
      std::lock_guard lock(mu);
      current = stream.get();
    }
    // The daemon sends nothing after Enrolled yet; Read returns when the
    // stream ends (goodbye answered, daemon gone, or cancelled).
    client::pb::EnrollResponse ignored;
    while (current->Read(&ignored)) {
    }
    {
      std::unique_lock lock(mu);
      changed.wait(lock, [this] { return !writing; });
      connected = false;  // no writer may start on a stream being finished
    }
    grpc::Status ended = current->Finish();
    // The daemon went away: start the next attempt on a fresh channel.
    connection.Retire(connection.Get());
    {
      std::unique_lock lock(mu);
      connected = false;
      if (closing) {
        lock.unlock();
        finish(Status::Ok());
        return;
      }
    }
    Log().warn("lost the enroll stream of process {} ({}); re-enrolling", name,
               ended.error_message());
    auto backoff = std::chrono::milliseconds(50);
    for (;;) {
      {
        std::unique_lock lock(mu);
        if (changed.wait_for(lock, backoff, [this] { return closing; })) {
          lock.unlock();
          finish(Status::Ok());
          return;
        }
      }
      Status status = OpenStream();
      if (status.ok()) {
        reenrolls.fetch_add(1, std::memory_order_relaxed);
        Log().info("process {} re-enrolled", name);
        break;
      }
      Log().debug("re-enroll of process {} failed: {}", name, status.ToString());
      bool closed_meanwhile = false;
      {
        std::lock_guard lock(mu);
        closed_meanwhile = closing;
      }
      if (closed_meanwhile) {
        finish(Status::Ok());
        return;
      }
      // A daemon that is down, starting or stopping answers UNAVAILABLE,
      // DEADLINE_EXCEEDED or CANCELLED: keep trying. Anything else is its
      // word that this process cannot come back (e.g. expired after the
      // grace period).
      if (status.code() != StatusCode::kUnavailable &&
          status.code() != StatusCode::kDeadlineExceeded &&
          status.code() != StatusCode::kCancelled) {
        Log().error("process {} cannot re-enroll: {}", name, status.ToString());
        finish(status);
        return;
      }
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
  }
}

Status ProcessSession::Impl::UsableLocked() const {
  if (closing) return FailedPrecondition("the process session is closed");
  if (watcher_done && !failure.ok()) return failure;
  if (!connected) return Unavailable("re-enrolling with the daemon; try again");
  return Status::Ok();
}

Result<std::pair<Gid, std::string>> ProcessSession::Impl::Credentials() const {
  std::lock_guard lock(mu);
  TOCL_RETURN_IF_ERROR(UsableLocked());
  return std::make_pair(gid, token);
}

namespace {

// The identity a daemon gives a program it spawns (toclsd/spawn/README.md):
// the process row reserved for it and the token to enroll into it with.
struct SpawnIdentity {
  Gid gid;
  std::string token;
};

// Only the first enrollment of the process takes the identity: a later
// one (after Close) is a new process.
std::atomic<bool> spawn_identity_taken{false};

Result<std::string> HexDecode(std::string_view hex, std::string_view variable) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.empty() || hex.size() % 2 != 0) {
    return InvalidArgument(fmt::format("{} is not hex ({} characters)", variable, hex.size()));
  }
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = nibble(hex[2 * i]);
    const int low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      return InvalidArgument(fmt::format("{} is not hex (character {})", variable, 2 * i));
    }
    bytes[i] = static_cast<char>(high << 4 | low);
  }
  return bytes;
}

// From TOCL_PROCESS_GID and TOCL_SPAWN_TOKEN; nullopt when they are not set.
Result<std::optional<SpawnIdentity>> SpawnIdentityFromEnvironment() {
  const char* gid_text = std::getenv("TOCL_PROCESS_GID");
  const char* token_text = std::getenv("TOCL_SPAWN_TOKEN");
  if (gid_text == nullptr || *gid_text == '\0') return std::optional<SpawnIdentity>();
  Result<Gid> gid = Gid::Parse(gid_text);
  if (!gid.ok() || !gid->is_process()) {
    return InvalidArgument(fmt::format("TOCL_PROCESS_GID '{}' is not a process id", gid_text));
  }
  if (token_text == nullptr) {
    return InvalidArgument("TOCL_PROCESS_GID is set but TOCL_SPAWN_TOKEN is not");
  }
  TOCL_ASSIGN_OR_RETURN(std::string token, HexDecode(token_text, "TOCL_SPAWN_TOKEN"));
  return std::optional<SpawnIdentity>(SpawnIdentity{*gid, std::move(token)});
}

// Bounds of a via network's fields that directory.proto sets and the daemon
// checks (toclsd ignores a whole report over them, so they are refused here,
// where the caller can be told).
constexpr size_t kMaxViProviderBytes = 32;
constexpr uint32_t kMinViClassBytes = 256;
constexpr uint32_t kMaxViClassBytes = uint32_t{1} << 20;

// The via fields of one network, of which only the first kMaxVisPerReport
// VIs are sent (and so checked).
Status CheckViPool(const NetworkStats& network) {
  if (network.provider.size() > kMaxViProviderBytes) {
    return InvalidArgument(fmt::format("network '{}': a provider name of {} bytes (at most {})",
                                       network.name, network.provider.size(), kMaxViProviderBytes));
  }
  const size_t vis = std::min(network.vis.size(), kMaxVisPerReport);
  for (size_t v = 0; v < vis; ++v) {
    const ViStats& vi = network.vis[v];
    if (!vi.peer.is_process()) {
      return InvalidArgument(fmt::format("network '{}': the peer {} of a VI is not a process id",
                                         network.name, vi.peer.ToString()));
    }
    if (vi.class_bytes < kMinViClassBytes || vi.class_bytes > kMaxViClassBytes ||
        !std::has_single_bit(vi.class_bytes)) {
      return InvalidArgument(fmt::format(
          "network '{}': a VI class of {} bytes to {} (a power of two, {} to {})", network.name,
          vi.class_bytes, vi.peer.ToString(), kMinViClassBytes, kMaxViClassBytes));
    }
    if (vi.state.empty() || vi.state.size() > kMaxViStateBytes) {
      return InvalidArgument(fmt::format("network '{}': a VI state of {} bytes to {} (1 to {})",
                                         network.name, vi.state.size(), vi.peer.ToString(),
                                         kMaxViStateBytes));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ProcessSession>> DirectoryClient::Enroll(const EnrollOptions& options) {
  TOCL_RETURN_IF_ERROR(ValidateName("process", options.name));
  TOCL_RETURN_IF_ERROR(ValidateAttributes(options.attributes));
  auto impl = std::make_unique<ProcessSession::Impl>(impl_->connection.channel_target());
  impl->registration.set_name(options.name);
  impl->registration.set_os_pid(options.os_pid != 0 ? options.os_pid : ::getpid());
  client::ToProto(options.attributes, impl->registration.mutable_attributes());
  // A program a daemon spawned enrolls into the row reserved for it (a
  // resume with its token), so that it has the Gid its spawner was told.
  TOCL_ASSIGN_OR_RETURN(std::optional<SpawnIdentity> identity, SpawnIdentityFromEnvironment());
  if (identity && !spawn_identity_taken.load(std::memory_order_acquire)) {
    impl->registration.set_resume_gid(identity->gid.raw());
    impl->registration.set_resume_token(identity->token);
    Status status = impl->OpenStream();
    if (status.code() == StatusCode::kUnavailable ||
        status.code() == StatusCode::kDeadlineExceeded || status.code() == StatusCode::kCancelled) {
      return status;  // the daemon did not answer: the identity is still ours to take
    }
    spawn_identity_taken.store(true, std::memory_order_release);
    if (status.code() == StatusCode::kPermissionDenied ||
        status.code() == StatusCode::kFailedPrecondition) {
      // A program started by the spawned one inherits its environment; it
      // is a process of its own.
      Log().info(
          "not enrolling as {} (the identity in TOCL_PROCESS_GID): {}; enrolling as a "
          "new process",
          identity->gid.ToString(), status.message());
      impl->registration.clear_resume_gid();
      impl->registration.clear_resume_token();
      TOCL_RETURN_IF_ERROR(impl->OpenStream());
    } else {
      TOCL_RETURN_IF_ERROR(status);
    }
  } else {
    TOCL_RETURN_IF_ERROR(impl->OpenStream());
  }
  ProcessSession::Impl* raw = impl.get();
  impl->watcher = std::thread([raw] { raw->WatchLoop(); });
  return std::make_unique<ProcessSession>(std::move(impl));
}

ProcessSession::ProcessSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProcessSession::~ProcessSession() {
  (void)Close();
}

Gid ProcessSession::gid() const {
  std::lock_guard lock(impl_->mu);
  return impl_->gid;
}

std::string ProcessSession::host_name() const {
  std::lock_guard lock(impl_->mu);
  return impl_->host_name;
}

std::string ProcessSession::data_plane_secret() const {
  std::lock_guard lock(impl_->mu);
  return impl_->data_plane_secret;
}

uint64_t ProcessSession::reenroll_count() const {
  return impl_->reenrolls.load(std::memory_order_relaxed);
}

Status ProcessSession::RegisterThreads(std::span<const ThreadInfo> threads) {
  TOCL_ASSIGN_OR_RETURN(auto credentials, impl_->Credentials());
  client::pb::RegisterThreadsRequest request;
  request.set_process(credentials.first.raw());
  request.set_session_token(credentials.second);
  request.mutable_threads()->Reserve(static_cast<int>(threads.size()));
  for (const ThreadInfo& thread : threads) {
    client::pb::ThreadRegistration* registration = request.add_threads();
    registration->set_gid(thread.gid.raw());
    registration->set_name(thread.name);
    client::ToProto(thread.attributes, registration->mutable_attributes());
  }
  auto context = client::NewCallContext();
  client::pb::WriteResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->RegisterThreads(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  return client::FromGrpcStatus(status, "register threads");
}

Status ProcessSession::UnregisterThreads(std::span<const Gid> threads, std::string_view reason) {
  TOCL_ASSIGN_OR_RETURN(auto credentials, impl_->Credentials());
  client::pb::UnregisterThreadsRequest request;
  request.set_process(credentials.first.raw());
  request.set_session_token(credentials.second);
  for (Gid thread : threads) request.add_threads(thread.raw());
  request.set_reason(std::string(reason));
  auto context = client::NewCallContext();
  client::pb::WriteResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->UnregisterThreads(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  return client::FromGrpcStatus(status, "unregister threads");
}

Status ProcessSession::PublishEndpoint(std::string_view subsystem, std::string_view address) {
  TOCL_ASSIGN_OR_RETURN(auto credentials, impl_->Credentials());
  client::pb::PublishEndpointRequest request;
  request.set_process(credentials.first.raw());
  request.set_session_token(credentials.second);
  request.mutable_endpoint()->set_subsystem(std::string(subsystem));
  request.mutable_endpoint()->set_address(std::string(address));
  auto context = client::NewCallContext();
  client::pb::WriteResponse response;
  auto connection = impl_->connection.Get();
  grpc::Status status = connection->directory->PublishEndpoint(context.get(), request, &response);
  impl_->connection.Observe(connection, status);
  return client::FromGrpcStatus(status, "publish endpoint");
}

Status ProcessSession::ReportPoolStats(std::span<const PoolClassStats> classes) {
  if (classes.size() > kMaxPoolClassesPerReport) {
    return InvalidArgument(fmt::format("{} pool classes in one report (at most {})", classes.size(),
                                       kMaxPoolClassesPerReport));
  }
  client::pb::EnrollRequest request;
  client::pb::PoolStatsReport* report = request.mutable_pool_stats();
  report->mutable_classes()->Reserve(static_cast<int>(classes.size()));
  for (const PoolClassStats& stats : classes) {
    if (stats.network.empty() || stats.network.size() > kMaxPoolNetworkBytes) {
      return InvalidArgument(fmt::format("a pool network name of {} bytes (1 to {})",
                                         stats.network.size(), kMaxPoolNetworkBytes));
    }
    client::ToProto(stats, report->add_classes());
  }
  return impl_->WriteReport(request);
}

Status ProcessSession::ReportNetworkStats(std::span<const NetworkStats> networks) {
  if (networks.size() > kMaxNetworksPerReport) {
    return InvalidArgument(fmt::format("{} networks in one report (at most {})", networks.size(),
                                       kMaxNetworksPerReport));
  }
  client::pb::EnrollRequest request;
  client::pb::NetworkStatsReport* report = request.mutable_network_stats();
  report->mutable_networks()->Reserve(static_cast<int>(networks.size()));
  for (size_t i = 0; i < networks.size(); ++i) {
    const NetworkStats& network = networks[i];
    if (network.name.empty() || network.name.size() > kMaxNetworkNameBytes) {
      return InvalidArgument(fmt::format("a network name of {} bytes (1 to {})",
                                         network.name.size(), kMaxNetworkNameBytes));
    }
    for (size_t j = 0; j < i; ++j) {
      if (networks[j].name == network.name) {
        return InvalidArgument(fmt::format("network '{}' twice in one report", network.name));
      }
    }
    if (network.kind.empty() || network.kind.size() > kMaxNetworkNameBytes) {
      return InvalidArgument(fmt::format("network '{}': a kind of {} bytes (1 to {})", network.name,
                                         network.kind.size(), kMaxNetworkNameBytes));
    }
    if (network.device.size() > kMaxNetworkDeviceBytes) {
      return InvalidArgument(fmt::format("network '{}': a device name of {} bytes (at most {})",
                                         network.name, network.device.size(),
                                         kMaxNetworkDeviceBytes));
    }
    if (network.address.size() > kMaxNetworkAddressBytes) {
      return InvalidArgument(fmt::format("network '{}': an address of {} bytes (at most {})",
                                         network.name, network.address.size(),
                                         kMaxNetworkAddressBytes));
    }
    const size_t peers = std::min(network.peers.size(), kMaxNetworkPeersPerReport);
    for (size_t p = 0; p < peers; ++p) {
      const NetworkPeerStats& peer = network.peers[p];
      if (!peer.peer.is_process()) {
        return InvalidArgument(fmt::format("network '{}': peer {} is not a process id",
                                           network.name, peer.peer.ToString()));
      }
      if (!std::isfinite(peer.bandwidth) || peer.bandwidth < 0) {
        return InvalidArgument(fmt::format("network '{}': a bandwidth of {} to {}", network.name,
                                           peer.bandwidth, peer.peer.ToString()));
      }
    }
    TOCL_RETURN_IF_ERROR(CheckViPool(network));
    client::ToProto(network, kMaxNetworkPeersPerReport, kMaxVisPerReport, report->add_networks());
  }
  return impl_->WriteReport(request);
}

Status ProcessSession::Impl::WriteReport(const client::pb::EnrollRequest& request) {
  std::unique_lock lock(mu);
  changed.wait(lock, [&] { return !writing || closing; });
  TOCL_RETURN_IF_ERROR(UsableLocked());
  // The watcher cannot replace or finish the stream while `writing` is set.
  EnrollStream* open_stream = stream.get();
  writing = true;
  lock.unlock();
  const bool written = open_stream->Write(request);
  lock.lock();
  writing = false;
  changed.notify_all();
  if (!written) return Unavailable("lost the enroll stream; re-enrolling with the daemon");
  return Status::Ok();
}

Status ProcessSession::Close(std::string_view reason) {
  Impl& impl = *impl_;
  {
    std::unique_lock lock(impl.mu);
    if (impl.closing) return Status::Ok();
    impl.closing = true;
    impl.changed.notify_all();
    if (impl.connecting != nullptr) impl.connecting->TryCancel();
    // A report being written goes first; one stuck on a daemon that does
    // not read is cancelled rather than hang the caller.
    if (!impl.changed.wait_for(lock, std::chrono::seconds(2), [&] { return !impl.writing; })) {
      if (impl.context) impl.context->TryCancel();
      impl.changed.wait(lock, [&] { return !impl.writing; });
    }
    if (impl.connected && impl.stream) {
      client::pb::EnrollRequest goodbye;
      goodbye.mutable_goodbye()->set_reason(std::string(reason));
      EnrollStream* stream = impl.stream.get();
      impl.writing = true;
      lock.unlock();
      if (stream->Write(goodbye)) stream->WritesDone();
      lock.lock();
      impl.writing = false;
      impl.changed.notify_all();
    }
    // The daemon ends the stream after the goodbye; if it does not answer
    // promptly, cancel rather than hang the caller.
    if (!impl.changed.wait_for(lock, std::chrono::seconds(2), [&] { return impl.watcher_done; })) {
      if (impl.context) impl.context->TryCancel();
    }
  }
  if (impl.watcher.joinable()) impl.watcher.join();
  return Status::Ok();
}

}  // namespace tocl
