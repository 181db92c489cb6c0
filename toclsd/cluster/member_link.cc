#include "cluster/member_link.h"

#include <spdlog/spdlog.h>

#include "cluster/membership.h"

namespace tocl::daemon::cluster {

MemberLink::MemberLink(Membership& membership, directory::Store& store, directory::MemberRow peer,
                       std::chrono::milliseconds heartbeat_interval,
                       const directory::DaemonChannels& channels)
    : membership_(membership),
      store_(store),
      peer_(std::move(peer)),
      interval_(heartbeat_interval),
      heartbeat_stub_(pb::Cluster::NewStub(channels.New(peer_.address))) {
  const Gid host = peer_.host;
  puller_ = std::make_unique<ReplicaPuller>(store_, host, channels.New(peer_.address),
                                            [this, host] { membership_.Heard(host); });
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

MemberLink::~MemberLink() {
  Stop();
}

void MemberLink::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (heartbeat_) heartbeat_->TryCancel();
  }
  wake_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  puller_->Stop();
}

void MemberLink::HeartbeatLoop() {
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    next += interval_;
    grpc::ClientContext context;
    // The deadline is the interval: a heartbeat that cannot finish before
    // the next one is due counts as lost, and calls never pile up.
    context.set_deadline(std::chrono::system_clock::now() + interval_);
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      heartbeat_ = &context;
    }
    pb::HeartbeatRequest request;
    *request.mutable_from() = membership_.self();
    request.set_head_seq(store_.head_seq());
    membership_.FillMembers(request.mutable_members());
    pb::HeartbeatResponse response;
    grpc::Status status = heartbeat_stub_->Heartbeat(&context, request, &response);
    {
      std::lock_guard lock(mu_);
      heartbeat_ = nullptr;
    }
    if (status.ok()) {
      if (Gid::FromRaw(response.self().host()) != peer_.host) {
        if (!warned_) {
          spdlog::warn("{} answers heartbeats as {}, not as {}: ignored", peer_.address,
                       Gid::FromRaw(response.self().host()).ToString(), peer_.host.ToString());
          warned_ = true;
        }
      } else {
        warned_ = false;
        membership_.Heard(peer_.host);
        membership_.Learn(response.members(), peer_.host);
      }
    } else if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION && !warned_) {
      // The member refuses us (e.g. it holds our host id): say it once.
      spdlog::warn("{} ({}) refuses heartbeats: {}", peer_.host.ToString(), peer_.address,
                   status.error_message());
      warned_ = true;
    }
    std::unique_lock lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // after a stall, do not send a burst
    wake_.wait_until(lock, next, [this] { return stopping_; });
    if (stopping_) return;
  }
}

}  // namespace tocl::daemon::cluster
