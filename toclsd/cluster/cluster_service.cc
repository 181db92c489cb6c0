#include "cluster/cluster_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "cluster/node_key.h"
#include "service/grpc_status.h"
#include "tocl/entity.h"

namespace tocl::daemon::cluster {
namespace {

using directory::ToGrpcStatus;

// Own changes read per store call, and the size at which a batch is sent
// even if more would fit: far below the 64 MiB message limit, since an
// entity may carry 256 KiB of attributes.
constexpr size_t kBatchEvents = 1000;
constexpr size_t kBatchBytes = 8 << 20;
// An idle stream sends an empty batch this often: the replica's proof that
// the stream is alive (it reconnects after three silent periods).
constexpr auto kKeepalive = std::chrono::seconds(1);
// How often a waiting stream looks at cancellation and shutdown.
constexpr auto kWaitSlice = std::chrono::milliseconds(200);

grpc::Status Refuse(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

Status CheckMember(const pb::Member& member, std::string_view what) {
  const Gid host = Gid::FromRaw(member.host());
  if (!host.is_host()) {
    return InvalidArgument(fmt::format("{}: {} is not a host id", what, host.ToString()));
  }
  TOCL_RETURN_IF_ERROR(ValidateName("host", member.name()).WithContext(what));
  if (member.address().empty()) return InvalidArgument(fmt::format("{}: no address", what));
  return Status::Ok();
}

}  // namespace

ClusterService::ClusterService(directory::Store& store, Membership& membership, bool seed,
                               directory::LoopbackPeers loopback)
    : store_(store),
      membership_(membership),
      seed_(seed),
      callers_(std::nullopt, std::move(loopback)) {}

grpc::Status ClusterService::CheckDaemonCaller(const grpc::ServerContext& context,
                                               std::string_view call) const {
  Result<directory::Caller> caller = callers_.Identify(context);
  if (caller.ok() && caller->channel == directory::Caller::Channel::kUnixSocket) {
    caller = PermissionDenied(fmt::format(
        "{} is not a daemon: the Cluster service is for daemons over TCP", caller->Describe()));
  }
  if (caller.ok()) return grpc::Status::OK;
  spdlog::warn("cluster {} from {} refused: {}", call, context.peer(), caller.status().message());
  return ToGrpcStatus(caller.status());
}

void ClusterService::BeginShutdown() {
  shutting_down_.store(true, std::memory_order_release);
  store_.WakeWatchers();
}

grpc::Status ClusterService::Join(grpc::ServerContext* context, const pb::JoinRequest* request,
                                  pb::JoinResponse* response) {
  if (grpc::Status allowed = CheckDaemonCaller(*context, "join"); !allowed.ok()) return allowed;
  if (!seed_) {
    return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  fmt::format("{} is not the seed of its cluster; join through the daemon "
                              "started with --seed",
                              store_.host().ToString()));
  }
  if (!IsNodeKey(request->node_key())) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  fmt::format("node key of {} characters is not {} hex digits",
                              request->node_key().size(), kNodeKeyChars));
  }
  if (request->address().empty()) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT, "a join without the joiner's address");
  }
  const Gid wanted = Gid::FromRaw(request->wanted_host());
  if (!wanted.is_null() && !wanted.is_host()) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  fmt::format("wanted host {} is not a host id", wanted.ToString()));
  }
  Result<Gid> host =
      store_.AssignMember(request->node_key(), request->name(), request->address(), wanted);
  if (!host.ok()) {
    spdlog::warn("join of '{}' at {} (peer {}) refused: {}", request->name(), request->address(),
                 context->peer(), host.status().ToString());
    return ToGrpcStatus(host.status());
  }
  pb::Member joiner;
  joiner.set_host(host->raw());
  joiner.set_name(request->name());
  joiner.set_address(request->address());
  membership_.HeardFrom(joiner);
  spdlog::info("'{}' at {} joined as {}", request->name(), request->address(), host->ToString());

  Result<std::vector<directory::MemberRow>> members = store_.Members();
  if (!members.ok()) return ToGrpcStatus(members.status());
  response->set_host(host->raw());
  for (const directory::MemberRow& row : *members) {
    pb::Member* member = response->add_members();
    member->set_host(row.host.raw());
    member->set_name(row.name);
    member->set_address(row.address);
  }
  return grpc::Status::OK;
}

grpc::Status ClusterService::Heartbeat(grpc::ServerContext* context,
                                       const pb::HeartbeatRequest* request,
                                       pb::HeartbeatResponse* response) {
  if (grpc::Status allowed = CheckDaemonCaller(*context, "heartbeat"); !allowed.ok()) {
    return allowed;
  }
  if (shutting_down()) {
    return Refuse(grpc::StatusCode::UNAVAILABLE, "the daemon is shutting down");
  }
  Status valid = CheckMember(request->from(), "heartbeat sender");
  if (!valid.ok()) return ToGrpcStatus(valid);
  if (!membership_.HeardFrom(request->from())) {
    return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  fmt::format("{} is this daemon's own host id; two daemons cannot share one",
                              store_.host().ToString()));
  }
  membership_.Learn(request->members(), Gid::FromRaw(request->from().host()));
  *response->mutable_self() = membership_.self();
  response->set_head_seq(store_.head_seq());
  membership_.FillMembers(response->mutable_members());
  return grpc::Status::OK;
}

Result<uint64_t> ClusterService::SendSnapshot(grpc::ServerContext* context,
                                              grpc::ServerWriter<pb::ReplicationBatch>* writer) {
  // Changes after this head are streamed after the snapshot; entities that
  // change while it is paged are sent again then (state-based: harmless).
  const uint64_t head = store_.head_seq();
  Gid after;
  for (;;) {
    if (context->IsCancelled() || shutting_down()) return Unavailable("stream ended");
    TOCL_ASSIGN_OR_RETURN(std::vector<pb::Entity> page,
                          store_.OwnEntitiesAfter(after, kBatchEvents));
    pb::ReplicationBatch batch;
    batch.set_snapshot(true);
    size_t bytes = 0;
    for (pb::Entity& entity : page) {
      after = Gid::FromRaw(entity.gid());
      bytes += entity.ByteSizeLong();
      pb::ChangeEvent* event = batch.add_events();
      event->set_op(pb::CHANGE_OP_ADDED);
      event->set_gid(entity.gid());
      event->set_at_us(entity.started_at_us());
      *event->mutable_entity() = std::move(entity);
      if (bytes >= kBatchBytes) {
        if (!writer->Write(batch)) return Unavailable("the replica went away");
        batch.clear_events();
        bytes = 0;
      }
    }
    const bool done = page.size() < kBatchEvents;
    if (done) {
      batch.set_snapshot_done(true);
      batch.set_head_seq(head);
    }
    if (!writer->Write(batch)) return Unavailable("the replica went away");
    if (done) return head;
  }
}

grpc::Status ClusterService::Replicate(grpc::ServerContext* context,
                                       const pb::ReplicateRequest* request,
                                       grpc::ServerWriter<pb::ReplicationBatch>* writer) {
  if (grpc::Status allowed = CheckDaemonCaller(*context, "replicate"); !allowed.ok()) {
    return allowed;
  }
  const Gid replica = Gid::FromRaw(request->from_host());
  uint64_t since = request->since_seq();
  Result<uint64_t> trimmed = store_.TrimmedThrough();
  if (!trimmed.ok()) return ToGrpcStatus(trimmed.status());
  const uint64_t head = store_.head_seq();
  // Too old: the changes it misses were trimmed. Newer than the head: this
  // daemon's log is not the one the replica followed (its database was
  // replaced). Either way only a snapshot makes the replica right.
  if (since < *trimmed || since > head) {
    spdlog::info("replica {} asks for changes after seq {} (log holds {}..{}): sending a snapshot",
                 replica.ToString(), since, *trimmed + 1, head);
    Result<uint64_t> snapshot_head = SendSnapshot(context, writer);
    if (!snapshot_head.ok()) return grpc::Status::OK;  // the replica or this daemon went away
    since = *snapshot_head;
  }
  auto last_sent = std::chrono::steady_clock::now();
  while (!context->IsCancelled() && !shutting_down()) {
    // Read before the changes: every own change up to it is in the result
    // (the reader's snapshot starts after it was committed).
    const uint64_t head_before = store_.head_seq();
    Result<std::vector<pb::ChangeEvent>> events = store_.OwnChangesSince(since, kBatchEvents);
    if (!events.ok()) return ToGrpcStatus(events.status());
    // The trimmer may have passed a replica that fell behind mid-stream
    // (checked after the read: a trim before or during it shows here). The
    // replica must start over and get a snapshot, not skip the gap.
    Result<uint64_t> trimmed_now = store_.TrimmedThrough();
    if (!trimmed_now.ok()) return ToGrpcStatus(trimmed_now.status());
    if (since < *trimmed_now) {
      spdlog::info("replica {} fell behind the trimmed log (seq {} < {}): ending its stream",
                   replica.ToString(), since, *trimmed_now);
      return Refuse(grpc::StatusCode::UNAVAILABLE,
                    "the change log was trimmed past this stream: reconnect for a snapshot");
    }
    if (!events->empty()) {
      pb::ReplicationBatch batch;
      size_t bytes = 0;
      for (size_t i = 0; i < events->size(); ++i) {
        pb::ChangeEvent& event = (*events)[i];
        bytes += event.ByteSizeLong();
        const uint64_t seq = event.seq();
        *batch.add_events() = std::move(event);
        const bool last = i + 1 == events->size();
        if (bytes >= kBatchBytes || last) {
          // A short read covered everything up to head_before.
          batch.set_head_seq(last && events->size() < kBatchEvents ? std::max(seq, head_before)
                                                                   : seq);
          if (!writer->Write(batch)) return grpc::Status::OK;
          since = batch.head_seq();
          batch.clear_events();
          bytes = 0;
        }
      }
      last_sent = std::chrono::steady_clock::now();
      continue;
    }
    // Nothing of ours up to head_before: replicated rows of other hosts
    // need not be scanned again.
    since = std::max(since, head_before);
    if (std::chrono::steady_clock::now() - last_sent >= kKeepalive) {
      pb::ReplicationBatch keepalive;
      keepalive.set_head_seq(since);
      if (!writer->Write(keepalive)) return grpc::Status::OK;
      last_sent = std::chrono::steady_clock::now();
    }
    store_.WaitForChange(since, std::chrono::steady_clock::now() + kWaitSlice);
  }
  return Refuse(grpc::StatusCode::UNAVAILABLE, "the daemon is shutting down");
}

}  // namespace tocl::daemon::cluster
