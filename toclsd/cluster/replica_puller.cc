#include "cluster/replica_puller.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

namespace tocl::daemon::cluster {
namespace {

constexpr auto kMinBackoff = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::seconds(1);

std::vector<pb::ChangeEvent> TakeEvents(pb::ReplicationBatch& batch) {
  std::vector<pb::ChangeEvent> events;
  events.reserve(batch.events_size());
  for (pb::ChangeEvent& event : *batch.mutable_events()) events.push_back(std::move(event));
  return events;
}

}  // namespace

ReplicaPuller::ReplicaPuller(directory::Store& store, Gid origin,
                             std::shared_ptr<grpc::Channel> channel, std::function<void()> heard)
    : store_(store),
      origin_(origin),
      stub_(pb::Cluster::NewStub(std::move(channel))),
      heard_(std::move(heard)),
      thread_([this] { Loop(); }) {}

ReplicaPuller::~ReplicaPuller() {
  Stop();
}

void ReplicaPuller::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (context_) context_->TryCancel();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReplicaPuller::Reconnect() {
  {
    std::lock_guard lock(mu_);
    reconnect_now_ = true;
    if (context_) context_->TryCancel();
  }
  wake_.notify_all();
}

void ReplicaPuller::CancelIfSilent(std::chrono::steady_clock::duration silence) {
  std::lock_guard lock(mu_);
  if (context_ && std::chrono::steady_clock::now() - last_activity_ > silence) {
    // Debug only: a member that is down makes every attempt end this way,
    // and the membership already said it is down.
    spdlog::debug("replication from {}: nothing for {} ms, reconnecting", origin_.ToString(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(silence).count());
    context_->TryCancel();
  }
}

void ReplicaPuller::Loop() {
  auto backoff = std::chrono::steady_clock::duration(kMinBackoff);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      reconnect_now_ = false;
    }
    if (PullOnce()) backoff = kMinBackoff;
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, backoff, [this] { return stopping_ || reconnect_now_; });
    if (reconnect_now_) {
      backoff = kMinBackoff;
    } else {
      backoff = std::min<std::chrono::steady_clock::duration>(backoff * 2, kMaxBackoff);
    }
  }
}

bool ReplicaPuller::PullOnce() {
  Result<uint64_t> since = store_.ReplicaProgress(origin_);
  if (!since.ok()) {
    spdlog::error("replication from {}: reading its progress: {}", origin_.ToString(),
                  since.status().ToString());
    return false;
  }
  grpc::ClientContext context;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    context_ = &context;
    last_activity_ = std::chrono::steady_clock::now();
  }
  pb::ReplicateRequest request;
  request.set_from_host(store_.host().raw());
  request.set_since_seq(*since);
  std::unique_ptr<grpc::ClientReader<pb::ReplicationBatch>> reader =
      stub_->Replicate(&context, request);

  bool delivered = false;
  bool in_snapshot = false;
  uint64_t applied = *since;
  Status failed;
  pb::ReplicationBatch batch;
  while (reader->Read(&batch)) {
    {
      std::lock_guard lock(mu_);
      last_activity_ = std::chrono::steady_clock::now();
    }
    heard_();
    failed = Apply(batch, in_snapshot, applied);
    if (!failed.ok()) {
      context.TryCancel();
      while (reader->Read(&batch)) {
      }
      break;
    }
    if (!delivered && failing_) {
      spdlog::info("replication from {}: streaming again from seq {}", origin_.ToString(), *since);
    }
    delivered = true;
    failing_ = false;
  }
  grpc::Status end = reader->Finish();
  {
    std::lock_guard lock(mu_);
    context_ = nullptr;
  }
  if (!failed.ok()) {
    // A stream that sends what cannot be applied is dropped; the next one
    // starts again from the recorded progress.
    spdlog::error("replication from {}: batch refused, stream dropped: {}", origin_.ToString(),
                  failed.ToString());
    failing_ = true;
  } else if (!delivered && !failing_ && end.error_code() != grpc::StatusCode::CANCELLED) {
    // Before the first stream a member that is still starting is normal.
    if (streamed_) {
      spdlog::warn("replication from {}: {} (retrying)", origin_.ToString(), end.error_message());
    } else {
      spdlog::debug("replication from {}: {} (retrying)", origin_.ToString(), end.error_message());
    }
    failing_ = true;
  }
  if (delivered) streamed_ = true;
  return delivered;
}

Status ReplicaPuller::Apply(pb::ReplicationBatch& batch, bool& in_snapshot, uint64_t& applied) {
  if (batch.snapshot()) {
    if (!in_snapshot) {
      spdlog::info("replication from {}: receiving a snapshot", origin_.ToString());
      TOCL_RETURN_IF_ERROR(store_.BeginSnapshot(origin_));
      in_snapshot = true;
    }
    std::vector<pb::ChangeEvent> events = TakeEvents(batch);
    TOCL_RETURN_IF_ERROR(store_.ApplySnapshot(origin_, events));
    if (batch.snapshot_done()) {
      TOCL_RETURN_IF_ERROR(store_.FinishSnapshot(origin_, batch.head_seq()));
      in_snapshot = false;
      applied = batch.head_seq();
      spdlog::info("replication from {}: snapshot applied (to seq {})", origin_.ToString(),
                   applied);
    }
    return Status::Ok();
  }
  if (in_snapshot) {
    return InvalidArgument(
        fmt::format("{} sent changes before its snapshot was done", origin_.ToString()));
  }
  // A keepalive whose head did not move changes nothing: no write.
  if (batch.events().empty() && batch.head_seq() <= applied) return Status::Ok();
  std::vector<pb::ChangeEvent> events = TakeEvents(batch);
  TOCL_RETURN_IF_ERROR(store_.ApplyReplicated(origin_, events, batch.head_seq()));
  applied = batch.head_seq();
  return Status::Ok();
}

}  // namespace tocl::daemon::cluster
