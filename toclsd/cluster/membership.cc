#include "cluster/membership.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "tocl/entity.h"

namespace tocl::daemon::cluster {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

pb::Member ToMember(const directory::MemberRow& row) {
  pb::Member member;
  member.set_host(row.host.raw());
  member.set_name(row.name);
  member.set_address(row.address);
  return member;
}

}  // namespace

Membership::Membership(directory::Store& store, directory::MemberRow self, MembershipTiming timing,
                       directory::DaemonChannels channels)
    : store_(store), self_(std::move(self)), timing_(timing), channels_(std::move(channels)) {}

Membership::~Membership() {
  Stop();
}

void Membership::Start(const std::vector<directory::MemberRow>& members) {
  std::vector<std::pair<Gid, bool>> initial;
  for (const directory::MemberRow& row : members) {
    if (row.host == self_.host) continue;
    // A member recorded as down stays down until it is heard.
    Result<pb::Entity> host = store_.Lookup(row.host);
    initial.emplace_back(row.host, !host.ok() || host->state() != pb::UNREACHABLE);
  }
  std::lock_guard lock(mu_);
  if (stopping_ || started_) return;
  started_ = true;
  const auto now = Clock::now();
  for (const directory::MemberRow& row : members) {
    if (row.host == self_.host || row.address.empty()) continue;
    auto found = std::find_if(initial.begin(), initial.end(),
                              [&](const auto& entry) { return entry.first == row.host; });
    Peer& peer = peers_[row.host];
    peer.row = row;
    peer.reachable = found == initial.end() || found->second;
    // A member already down needs to be heard to come back; the others get
    // the full down_after from now.
    peer.heard = peer.reachable ? now : Clock::time_point{};
    peer.link = std::make_unique<MemberLink>(*this, store_, peer.row, timing_.heartbeat_interval,
                                             channels_);
  }
  monitor_ = std::thread([this] { Monitor(); });
}

void Membership::Stop() {
  std::vector<std::unique_ptr<MemberLink>> links;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [host, peer] : peers_) {
      if (peer.link) links.push_back(std::move(peer.link));
    }
  }
  wake_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  {
    std::lock_guard lock(mu_);
    for (auto& link : retired_) links.push_back(std::move(link));
    retired_.clear();
  }
  // Each link cancels its calls in flight before it joins its threads.
  links.clear();
}

bool Membership::UpsertLocked(const directory::MemberRow& row, bool first_hand,
                              std::unique_ptr<MemberLink>& replaced) {
  if (row.address.size() > kMaxMemberAddressBytes ||
      (!row.name.empty() && !ValidateName("member", row.name).ok()) ||
      (!row.address.empty() && row.address.find_first_of(" \t\r\n") != std::string::npos)) {
    spdlog::warn("member {} with a malformed name or address ignored", row.host.ToString());
    return false;
  }
  auto it = peers_.find(row.host);
  if (it == peers_.end()) {
    if (row.address.empty()) return false;  // cannot be reached yet
    if (peers_.size() >= static_cast<size_t>(kMaxMembers)) {
      spdlog::warn("member {} at {} ignored: this daemon keeps at most {} members",
                   row.host.ToString(), row.address, kMaxMembers);
      return false;
    }
    Peer& peer = peers_[row.host];
    peer.row = row;
    // Also when learned second hand: a member that is actually down is
    // then marked so after down_after, not at once.
    peer.heard = Clock::now();
    if (started_ && !stopping_) {
      peer.link = std::make_unique<MemberLink>(*this, store_, peer.row, timing_.heartbeat_interval,
                                               channels_);
    }
    spdlog::info("member {} '{}' at {}", row.host.ToString(), row.name, row.address);
    return true;
  }
  Peer& peer = it->second;
  // Second hand, an address is only tried while the one known here does
  // not answer: a member restarted elsewhere is found again through the
  // members that did hear from it.
  // At most one such move per down_after: two members that remember
  // different addresses must not make the link flap.
  if (!first_hand && (peer.reachable || Clock::now() - peer.moved_at < timing_.down_after)) {
    return false;
  }
  if (first_hand) peer.heard = Clock::now();
  bool moved = !row.address.empty() && row.address != peer.row.address;
  bool renamed = first_hand && !row.name.empty() && row.name != peer.row.name;
  if (!moved && !renamed) return false;
  if (moved) {
    spdlog::info("member {} moved from {} to {}", row.host.ToString(), peer.row.address,
                 row.address);
    peer.row.address = row.address;
    peer.moved_at = Clock::now();
    replaced = std::move(peer.link);
    if (started_ && !stopping_) {
      peer.link = std::make_unique<MemberLink>(*this, store_, peer.row, timing_.heartbeat_interval,
                                               channels_);
    }
  }
  if (renamed) peer.row.name = row.name;
  return true;
}

void Membership::Record(const std::vector<directory::MemberRow>& rows) {
  if (rows.empty()) return;
  Status saved = store_.SaveMembers(rows);
  if (!saved.ok()) spdlog::error("recording cluster members: {}", saved.ToString());
}

bool Membership::HeardFrom(const pb::Member& member) {
  const Gid host = Gid::FromRaw(member.host());
  if (!host.is_host()) return false;
  if (host == self_.host) return false;
  directory::MemberRow row{host, member.name(), member.address()};
  std::unique_ptr<MemberLink> replaced;
  bool record = false;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return true;
    record = UpsertLocked(row, /*first_hand=*/true, replaced);
    if (replaced) retired_.push_back(std::move(replaced));
  }
  wake_.notify_all();
  if (record) Record({row});
  return true;
}

void Membership::Heard(Gid host) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(host);
  if (it != peers_.end()) it->second.heard = Clock::now();
}

void Membership::Learn(const google::protobuf::RepeatedPtrField<pb::Member>& members, Gid sender) {
  std::vector<directory::MemberRow> learned;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    int seen = 0;
    for (const pb::Member& member : members) {
      if (++seen > kMaxMembers) break;  // a list longer than any cluster we keep
      const Gid host = Gid::FromRaw(member.host());
      // The sender's entry for itself is first hand, and its link must not
      // be replaced from its own thread.
      if (!host.is_host() || host == self_.host || host == sender) continue;
      directory::MemberRow row{host, member.name(), member.address()};
      std::unique_ptr<MemberLink> old;
      if (UpsertLocked(row, /*first_hand=*/false, old)) learned.push_back(row);
      if (old) retired_.push_back(std::move(old));
    }
  }
  wake_.notify_all();
  Record(learned);
}

pb::Member Membership::self() const {
  return ToMember(self_);
}

void Membership::FillMembers(google::protobuf::RepeatedPtrField<pb::Member>* out) const {
  std::lock_guard lock(mu_);
  bool self_added = false;
  for (const auto& [host, peer] : peers_) {
    if (!self_added && self_.host < host) {
      *out->Add() = ToMember(self_);
      self_added = true;
    }
    *out->Add() = ToMember(peer.row);
  }
  if (!self_added) *out->Add() = ToMember(self_);
}

void Membership::Monitor() {
  const auto tick = std::clamp(timing_.heartbeat_interval / 2, std::chrono::milliseconds(20),
                               std::chrono::milliseconds(250));
  auto last = Clock::now();
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait_for(lock, tick, [this] { return stopping_ || !retired_.empty(); });
    if (stopping_) return;
    if (!retired_.empty()) {
      std::vector<std::unique_ptr<MemberLink>> retired = std::move(retired_);
      retired_.clear();
      lock.unlock();
      retired.clear();  // cancels their calls, joins their threads
      lock.lock();
      if (stopping_) return;
    }
    const auto now = Clock::now();
    // This daemon itself stalled (SIGSTOP, a swapped-out machine): nobody
    // could be heard meanwhile, so silence proves nothing about them.
    if (now - last > timing_.down_after / 2) {
      spdlog::warn("this daemon stalled for {:.1f} s; member silence restarts from now",
                   Seconds(now - last));
      for (auto& [host, peer] : peers_) {
        if (peer.heard != Clock::time_point{}) peer.heard = now;
      }
    }
    last = now;

    std::vector<std::pair<Gid, bool>> changes;
    std::vector<ReplicaPuller*> reconnect;
    for (auto& [host, peer] : peers_) {
      const bool silent =
          peer.heard == Clock::time_point{} || now - peer.heard > timing_.down_after;
      if (peer.reachable && silent) {
        peer.reachable = false;
        changes.emplace_back(host, false);
        spdlog::warn("member {} '{}' at {} not heard for {:.1f} s: marked unreachable",
                     host.ToString(), peer.row.name, peer.row.address,
                     peer.heard == Clock::time_point{} ? 0.0 : Seconds(now - peer.heard));
      } else if (!peer.reachable && !silent) {
        peer.reachable = true;
        changes.emplace_back(host, true);
        spdlog::info("member {} '{}' is back: marked reachable", host.ToString(), peer.row.name);
        if (peer.link) reconnect.push_back(&peer.link->puller());
      }
      if (peer.link) peer.link->puller().CancelIfSilent(timing_.replication_silence);
    }
    // Still under mu_: links are replaced only under mu_, so these stay valid.
    for (ReplicaPuller* puller : reconnect) puller->Reconnect();
    if (changes.empty()) continue;
    lock.unlock();
    for (const auto& [host, reachable] : changes) {
      Status written = store_.SetReachable(host, reachable);
      if (!written.ok()) {
        spdlog::error("marking {} {}: {}", host.ToString(), reachable ? "reachable" : "unreachable",
                      written.ToString());
      }
    }
    lock.lock();
  }
}

}  // namespace tocl::daemon::cluster
