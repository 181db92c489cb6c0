#include "daemon.h"

#include <fmt/format.h>
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <span>

#include "grpc_tls/tls_credentials.h"
#include "security_config.h"
#include "socket_access.h"
#include "spawn/exec_helper.h"
#include "spawn/run_as.h"
#include "spawn/spawner.h"

namespace tocl::daemon {
namespace {

// How long calls in flight get to finish at shutdown. Enroll streams and
// watches are ended at once (BeginShutdown); this covers unary calls, which
// take milliseconds. gRPC 1.51 waits out the whole deadline whenever any
// client is connected, even idle, so it is kept short.
constexpr auto kShutdownGrace = std::chrono::milliseconds(500);

// Processes recorded as running whose OS process is gone are marked exited
// now; the others get the grace period to re-enroll.
std::vector<Gid> SortOrphans(directory::Store& store) {
  std::vector<Gid> orphans;
  auto running = store.RunningProcesses();
  if (!running.ok()) {
    spdlog::error("cannot list running processes: {}", running.status().ToString());
    return orphans;
  }
  for (const auto& [gid, pid] : *running) {
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      Status marked = store.MarkProcessExited(gid, "the process ended while its daemon was down");
      if (!marked.ok()) spdlog::error("mark {} exited: {}", gid.ToString(), marked.ToString());
      continue;
    }
    orphans.push_back(gid);
  }
  return orphans;
}

// The spawner's policy from the config: what it may start, and as whom.
Result<spawn::SpawnerOptions> SpawnPolicy(const DaemonConfig& config) {
  spawn::SpawnerOptions options;
  options.state_dir = config.state_dir;
  options.socket_path = config.socket_path();
  options.allow = spawn::AllowList(config.spawn_allow);
  options.log_max_bytes = static_cast<uint64_t>(config.spawn_log_max_bytes);
  const bool root = ::geteuid() == 0;
  if (config.spawn_allow.empty()) {
    spdlog::info("spawning is disabled: no [spawn] allow list");
  } else if (root && !config.spawn_run_as.empty()) {
    TOCL_ASSIGN_OR_RETURN(options.run_as,
                          spawn::ResolveRunAs(config.spawn_run_as, config.spawn_run_as_group));
    TOCL_ASSIGN_OR_RETURN(options.exec_helper, spawn::FindExecHelper());
    spdlog::info("spawned programs run as {}", options.run_as->Describe());
  } else if (root) {
    spdlog::warn(
        "toclsd runs as root with a [spawn] allow list but no run_as: spawned programs run as "
        "root");
  } else if (!config.spawn_run_as.empty()) {
    spdlog::warn(
        "spawn run_as '{}' is ignored: toclsd is not root, spawned programs run as its "
        "own user (uid {})",
        config.spawn_run_as, ::geteuid());
  }
  return options;
}

bool SocketAnswers(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  bool answers = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return answers;
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config, StateLock lock)
    : config_(config), lock_(std::move(lock)) {}

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonConfig& config) {
  // Before anything is touched: wrong credentials stop the start.
  TOCL_ASSIGN_OR_RETURN(std::optional<security::Credentials> credentials,
                        LoadDaemonCredentials(config));
  const directory::DaemonChannels channels =
      credentials ? directory::DaemonChannels(*credentials) : directory::DaemonChannels();
  TOCL_ASSIGN_OR_RETURN(StateLock lock, StateLock::Acquire(config.state_dir, config.lock_path()));
  std::unique_ptr<Daemon> daemon(new Daemon(config, std::move(lock)));
  // Before anything is created: a socket others could replace stops the start.
  std::optional<gid_t> socket_group;
  if (!config.socket_group.empty()) {
    TOCL_ASSIGN_OR_RETURN(socket_group, spawn::ResolveGroup(config.socket_group, "socket_group"));
  }
  TOCL_RETURN_IF_ERROR(
      PrepareSocketDirectory(config.socket_path(), config.state_dir, socket_group));

  // Cluster: the TCP address is settled (a port 0 chosen and held) before
  // the store opens, since a joining daemon gives it to the seed in exchange
  // for its host id.
  cluster::ListenAddress listen;
  // Who a plaintext TCP peer is, told by its connection to this listener
  // (loopback_peer.h); without one no TCP peer is known.
  directory::LoopbackPeers loopback;
  if (config.listen != "none") {
    TOCL_ASSIGN_OR_RETURN(listen, cluster::ListenAddress::Reserve(config.listen));
    TOCL_ASSIGN_OR_RETURN(loopback, directory::LoopbackPeers::ForListenAddress(listen.address()));
  }
  std::optional<cluster::ClusterPlan> plan;
  if (config.in_cluster()) {
    TOCL_ASSIGN_OR_RETURN(plan, cluster::PlanCluster(config, listen.address(), channels));
  }

  directory::StoreOptions options;
  options.path = config.database_path();
  options.host_name = config.host_name;
  options.cache_kib = config.cache_kib;
  options.host_id = plan ? plan->host_id : static_cast<uint32_t>(config.host_id.value_or(0));
  options.host_attributes = config.attributes;
  options.host_attributes["networks"] = config.networks;
  auto store = directory::Store::Open(options);
  if (!store.ok()) {
    if (store.status().code() == StatusCode::kDataLoss) {
      return DataLoss(fmt::format(
          "directory database {} is corrupt or not a tocl database ({}); move it away to start "
          "with an empty directory",
          options.path, store.status().message()));
    }
    return store.status().WithContext(fmt::format("directory database {}", options.path));
  }
  daemon->store_ = std::move(*store);
  // It holds every process's session token.
  TOCL_RETURN_IF_ERROR(RestrictDatabaseFiles(options.path));
  TOCL_ASSIGN_OR_RETURN(spawn::SpawnerOptions spawn_policy, SpawnPolicy(config));
  auto spawner = spawn::Spawner::Start(*daemon->store_, std::move(spawn_policy));
  if (!spawner.ok()) return spawner.status();
  daemon->spawner_ = std::move(*spawner);
  directory::DirectoryServiceOptions service_options{
      .channels = channels, .loopback = loopback, .accept_times = &daemon->accept_times_};
  if (!config.admin_group.empty()) {
    TOCL_ASSIGN_OR_RETURN(service_options.admin_group,
                          spawn::ResolveGroup(config.admin_group, "admin_group"));
  }
  if (credentials) {
    const std::span<const std::byte> secret = credentials->secret.bytes();
    service_options.data_plane_secret.assign(reinterpret_cast<const char*>(secret.data()),
                                             secret.size());
  }
  daemon->service_ = std::make_unique<directory::DirectoryService>(
      *daemon->store_, daemon->spawner_.get(), std::move(service_options));

  if (plan) {
    TOCL_ASSIGN_OR_RETURN(daemon->cluster_,
                          cluster::Cluster::Start(config, std::move(*plan), *daemon->store_,
                                                  channels, std::move(loopback)));
  }
  daemon->trimmer_ = std::make_unique<cluster::ChangeLogTrimmer>(
      *daemon->store_, static_cast<uint64_t>(config.change_log_keep));
  if (config.retain_exited().count() > 0) {
    spawn::Spawner* spawner_raw = daemon->spawner_.get();
    daemon->sweeper_ = std::make_unique<retention::RetentionSweeper>(
        *daemon->store_, config.retain_exited(),
        [spawner_raw](std::span<const Gid> processes) { spawner_raw->RemoveLogs(processes); });
  }

  // Before serving: a process that enrolls once the server is up must not
  // be taken for one that was running before this start.
  std::vector<Gid> orphans = SortOrphans(*daemon->store_);

  const std::string socket_path = config.socket_path();
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument(
        fmt::format("socket path {} is longer than the {} bytes unix sockets allow", socket_path,
                    sizeof(sockaddr_un::sun_path) - 1));
  }
  // A socket file left by a dead daemon is removed; one that answers
  // belongs to a live daemon (--socket may point outside our state
  // directory, which our lock does not cover).
  if (SocketAnswers(socket_path)) {
    return FailedPrecondition(
        fmt::format("another daemon is listening on {}; choose another --socket", socket_path));
  }
  std::error_code ignored;
  std::filesystem::remove(socket_path, ignored);

  {
    // Bound 0600 from the start (0777 less the umask), the group's bits
    // only once it is chown'ed below.
    ScopedUmask private_socket(0177);
    Result<std::unique_ptr<UnixListener>> unix_listener =
        UnixListener::Listen(socket_path, daemon->accept_times_);
    if (!unix_listener.ok()) {
      return Unavailable(fmt::format("cannot listen on unix:{}: {}", socket_path,
                                     unix_listener.status().message()));
    }
    daemon->unix_listener_ = std::move(*unix_listener);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // The unix socket is not one of gRPC's ports: toclsd accepts its
  // connections and hands them over (unix_listener.h), so that every call
  // is known by its connection's kernel credentials.
  int tcp_port = 0;
  if (config.listen != "none") {
    // The unix socket stays plaintext: its file permissions say who may
    // connect. TCP is mutual TLS with credentials, else loopback only
    // (security_config.h).
    builder.AddListeningPort(
        listen.address(),
        credentials ? grpc_tls::ServerCredentials(*credentials) : grpc::InsecureServerCredentials(),
        &tcp_port);
  }
  builder.RegisterService(daemon->service_.get());
  if (daemon->cluster_) builder.RegisterService(daemon->cluster_->service());
  // Clients ping every 10 s on enroll streams to detect dead peers; allow it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20'000);
  builder.SetMaxReceiveMessageSize(64 << 20);
  // Written before the server answers: whoever sees the daemon up can read it.
  TOCL_RETURN_IF_ERROR(
      cluster::WriteListenAddressFile(config.listen_address_path(), listen.address()));
  daemon->server_ = builder.BuildAndStart();
  listen.Release();  // gRPC holds the port now (or failed to)
  if (!daemon->server_) {
    (void)cluster::WriteListenAddressFile(config.listen_address_path(), "");
    return Unavailable(
        fmt::format("cannot listen on {} (address in use or not permitted)", listen.address()));
  }
  TOCL_RETURN_IF_ERROR(RestrictSocketFile(socket_path, socket_group));
  daemon->unix_listener_->Serve(*daemon->server_);
  if (config.listen != "none") {
    if (tcp_port == 0) {
      return Unavailable(fmt::format("cannot listen on {}", config.listen));
    }
    std::string host = config.listen.substr(0, config.listen.rfind(':'));
    daemon->tcp_address_ = fmt::format("{}:{}", host, tcp_port);
  }
  daemon->server_->GetHealthCheckService()->SetServingStatus(true);

  if (!orphans.empty()) {
    spdlog::info("{} processes were running before this start; they have {:.1f} s to re-enroll",
                 orphans.size(), config.grace_period_seconds);
    Daemon* raw = daemon.get();
    daemon->grace_thread_ = std::thread([raw, orphans = std::move(orphans)]() mutable {
      raw->ExpireOrphansAfterGrace(std::move(orphans));
    });
  }
  spdlog::info("toclsd ready: host {} '{}', unix:{}{}{}, state {}, networks {}",
               daemon->store_->host().ToString(), config.host_name, socket_path,
               daemon->tcp_address_.empty() ? "" : ", tcp ", daemon->tcp_address_, config.state_dir,
               config.networks);
  return daemon;
}

void Daemon::ExpireOrphansAfterGrace(std::vector<Gid> orphans) {
  {
    std::unique_lock lock(mu_);
    if (stopping_cv_.wait_for(lock, config_.grace_period(), [this] { return stopping_; })) return;
  }
  auto expired = store_->ExpireUnresumed(
      orphans, fmt::format("did not re-enroll within {:.1f} s after the daemon restarted",
                           config_.grace_period_seconds));
  if (!expired.ok()) {
    spdlog::error("expiring processes that did not re-enroll: {}", expired.status().ToString());
  } else if (*expired > 0) {
    spdlog::info("{} processes did not re-enroll and are marked exited", *expired);
  }
}

void Daemon::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stopping_cv_.notify_all();
  if (grace_thread_.joinable()) grace_thread_.join();
  if (!server_) return;  // Start() failed: nothing was served
  spdlog::info("toclsd stopping");
  // Cluster first: heartbeats and pullers stop calling out, Replicate
  // streams end, so the server below has only local calls to finish.
  if (cluster_) cluster_->Stop();
  trimmer_->Stop();
  if (sweeper_) sweeper_->Stop();  // before the spawner its callback uses
  {
    spawner_->BeginShutdown();
    service_->BeginShutdown();
    server_->GetHealthCheckService()->SetServingStatus(false);
    unix_listener_->Stop();  // no connection is handed to a server shutting down
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server_->Wait();
  }
  spawner_.reset();  // stops reaping (children run on) before the store goes
  store_.reset();    // drains the writer: every acknowledged write is committed
  std::error_code ignored;
  std::filesystem::remove(config_.socket_path(), ignored);
  spdlog::info("toclsd stopped");
}

Daemon::~Daemon() {
  Shutdown();
}

}  // namespace tocl::daemon
