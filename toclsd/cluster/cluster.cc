#include "cluster/cluster.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "cluster/join.h"
#include "cluster/listen_address.h"
#include "cluster/node_key.h"
#include "grpc_tls/tls_credentials.h"

namespace tocl::daemon::cluster {
namespace {

using std::chrono::milliseconds;

milliseconds Millis(double seconds) {
  return milliseconds(static_cast<int64_t>(seconds * 1000));
}

constexpr milliseconds kJoinAttemptTimeout{2000};

std::string Addresses(const std::vector<std::string>& seeds) {
  return fmt::format("{}", fmt::join(seeds, ", "));
}

std::vector<directory::MemberRow> ToRows(
    const google::protobuf::RepeatedPtrField<pb::Member>& members) {
  std::vector<directory::MemberRow> rows;
  for (const pb::Member& member : members) {
    Gid host = Gid::FromRaw(member.host());
    if (host.is_host()) rows.push_back({host, member.name(), member.address()});
  }
  return rows;
}

// The seed's answer must match what this daemon already is.
Status CheckAssigned(const DaemonConfig& config, Gid assigned, uint32_t recorded) {
  if (!assigned.is_host()) {
    return Internal(fmt::format("the seed answered with {}, not a host id", assigned.ToString()));
  }
  if (config.host_id && assigned.host_index() != *config.host_id) {
    return FailedPrecondition(fmt::format(
        "the seed knows this daemon (node key in {}) as {}, not as --host-id {}; start it "
        "without --host-id or with --host-id {}",
        config.node_key_path(), assigned.ToString(), *config.host_id, assigned.host_index()));
  }
  if (recorded != 0 && assigned.host_index() != recorded) {
    return FailedPrecondition(fmt::format(
        "the seed assigned {}, but the database {} belongs to h{}; the seed does not know this "
        "daemon's node key ({}): restore it, or use another state directory",
        assigned.ToString(), config.database_path(), recorded, config.node_key_path()));
  }
  return Status::Ok();
}

}  // namespace

Result<ClusterPlan> PlanCluster(const DaemonConfig& config, const std::string& bound,
                                const directory::DaemonChannels& channels) {
  ClusterPlan plan;
  TOCL_ASSIGN_OR_RETURN(plan.node_key, LoadOrCreateNodeKey(config.node_key_path()));
  plan.advertise = config.advertise.empty() ? bound : config.advertise;
  if (config.advertise.empty() && IsWildcardAddress(bound)) {
    return InvalidArgument(fmt::format(
        "listening on {} (every interface): other daemons need one address to reach this one; "
        "give it with --advertise HOST:PORT",
        bound));
  }
  TOCL_ASSIGN_OR_RETURN(uint32_t recorded,
                        directory::Store::RecordedHostId(config.database_path()));
  const uint32_t wanted = config.host_id ? static_cast<uint32_t>(*config.host_id) : recorded;
  if (config.seed) {
    plan.host_id = wanted != 0 ? wanted : 1;
    return plan;
  }

  pb::JoinRequest request;
  request.set_node_key(plan.node_key);
  request.set_name(config.host_name);
  request.set_address(plan.advertise);
  if (wanted != 0) request.set_wanted_host(Gid::Host(wanted).raw());
  const auto deadline = std::chrono::steady_clock::now() + Millis(config.join_timeout_seconds);
  auto backoff = milliseconds(200);
  for (;;) {
    // An attempt waits for a seed that is starting, but not past the timeout.
    const auto remaining =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    const milliseconds attempt = std::clamp(remaining, milliseconds(100), kJoinAttemptTimeout);
    // A daemon that can start on its recorded id does not wait for a seed
    // that refuses connections; a new one must, the seed may be starting.
    Result<pb::JoinResponse> joined =
        JoinOnce(channels, config.join, request, attempt, /*wait_for_ready=*/recorded == 0);
    if (joined.ok()) {
      const Gid assigned = Gid::FromRaw(joined->host());
      TOCL_RETURN_IF_ERROR(CheckAssigned(config, assigned, recorded));
      plan.host_id = assigned.host_index();
      plan.joined = std::move(*joined);
      return plan;
    }
    if (joined.status().code() != StatusCode::kUnavailable) {
      return joined.status().WithContext("joining the cluster");
    }
    if (recorded != 0) {
      spdlog::warn(
          "no seed answered ({}); starting as h{} with the members recorded, joining in the "
          "background",
          joined.status().message(), recorded);
      plan.host_id = recorded;
      return plan;
    }
    if (std::chrono::steady_clock::now() + backoff > deadline) {
      const bool handshake = grpc_tls::HandshakeFailed(joined.status().message());
      return Unavailable(fmt::format(
          "no seed answered within {:.1f} s at {} (last: {}); a new daemon needs the seed to be "
          "given a host id{}",
          config.join_timeout_seconds, Addresses(config.join), joined.status().message(),
          handshake ? ". The TLS handshake failed: the seed and this daemon need credentials "
                      "made by the same `tocl keygen` (one CA), or neither any"
                    : ""));
    }
    // Pacing between attempts, not synchronisation: the seed may be starting.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

Cluster::Cluster(const DaemonConfig& config, ClusterPlan plan, directory::Store& store,
                 directory::DaemonChannels channels)
    : config_(config), plan_(std::move(plan)), store_(store), channels_(std::move(channels)) {}

Result<std::unique_ptr<Cluster>> Cluster::Start(const DaemonConfig& config, ClusterPlan plan,
                                                directory::Store& store,
                                                directory::DaemonChannels channels,
                                                directory::LoopbackPeers loopback) {
  std::unique_ptr<Cluster> cluster(
      new Cluster(config, std::move(plan), store, std::move(channels)));
  const ClusterPlan& planned = cluster->plan_;
  TOCL_RETURN_IF_ERROR(store.SetOwnAddress(planned.advertise));
  if (config.seed) {
    Result<Gid> self =
        store.AssignMember(planned.node_key, config.host_name, planned.advertise, store.host());
    if (!self.ok()) {
      return self.status().WithContext(fmt::format(
          "the seed's own node key ({}) is not the one its database gave {} to; was it replaced?",
          config.node_key_path(), store.host().ToString()));
    }
    if (*self != store.host()) {
      return FailedPrecondition(
          fmt::format("this seed's database gave its node key {} before, not {}", self->ToString(),
                      store.host().ToString()));
    }
  }
  if (planned.joined) TOCL_RETURN_IF_ERROR(store.SaveMembers(ToRows(planned.joined->members())));
  TOCL_ASSIGN_OR_RETURN(std::vector<directory::MemberRow> members, store.Members());

  MembershipTiming timing;
  timing.heartbeat_interval = Millis(config.heartbeat_interval_seconds);
  timing.down_after = Millis(config.down_after_seconds);
  cluster->membership_ = std::make_unique<Membership>(
      store, directory::MemberRow{store.host(), config.host_name, planned.advertise}, timing,
      cluster->channels_);
  cluster->service_ = std::make_unique<ClusterService>(store, *cluster->membership_, config.seed,
                                                       std::move(loopback));
  cluster->membership_->Start(members);
  if (!config.seed && !planned.joined) {
    Cluster* raw = cluster.get();
    cluster->joiner_ = std::thread([raw] { raw->JoinInBackground(); });
  }
  spdlog::info("cluster: {} {} at {}, {} members known", config.seed ? "seed" : "member",
               store.host().ToString(), planned.advertise, members.size());
  return cluster;
}

void Cluster::JoinInBackground() {
  pb::JoinRequest request;
  request.set_node_key(plan_.node_key);
  request.set_name(config_.host_name);
  request.set_address(plan_.advertise);
  request.set_wanted_host(store_.host().raw());
  auto backoff = milliseconds(500);
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (wake_.wait_for(lock, backoff, [this] { return stopping_; })) return;
    }
    backoff = std::min(backoff * 2, milliseconds(5000));
    // Short attempts: Stop waits for the one in flight.
    Result<pb::JoinResponse> joined =
        JoinOnce(channels_, config_.join, request, milliseconds(500), /*wait_for_ready=*/false);
    if (joined.status().code() == StatusCode::kUnavailable) continue;
    if (!joined.ok()) {
      spdlog::error("joining through the seed: {}; going on as {} without it",
                    joined.status().ToString(), store_.host().ToString());
      return;
    }
    if (Gid::FromRaw(joined->host()) != store_.host()) {
      spdlog::error("the seed now assigns {} to this daemon, which runs as {}: going on without it",
                    Gid::FromRaw(joined->host()).ToString(), store_.host().ToString());
      return;
    }
    Status saved = store_.SaveMembers(ToRows(joined->members()));
    if (!saved.ok()) spdlog::error("recording members: {}", saved.ToString());
    membership_->Learn(joined->members());
    spdlog::info("joined the cluster through the seed as {}", store_.host().ToString());
    return;
  }
}

void Cluster::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (joiner_.joinable()) joiner_.join();
  if (service_) service_->BeginShutdown();
  if (membership_) membership_->Stop();
}

Cluster::~Cluster() {
  Stop();
}

}  // namespace tocl::daemon::cluster
