#include "runtime/membership/member_set.h"

#include <utility>

#include "core/gid_scope.h"

namespace tocl {

std::string_view MembershipChangeName(MembershipChange change) {
  switch (change) {
    case MembershipChange::kJoined:
      return "joined";
    case MembershipChange::kLeft:
      return "left";
    case MembershipChange::kUnreachable:
      return "unreachable";
    case MembershipChange::kReachable:
      return "reachable";
    case MembershipChange::kCurrent:
      return "current";
  }
  return "unknown";
}

}  // namespace tocl

namespace tocl::runtime {

bool MemberSet::AnyWithin(Gid scope) const {
  // Members in Gid order: those within a scope are one range from it.
  auto it = members_.lower_bound(scope);
  return it != members_.end() && WithinScope(it->first, scope);
}

std::vector<MembershipEvent> MemberSet::Reconcile(std::vector<Entity> read) {
  std::map<Gid, Entity> now;
  for (Entity& entity : read) {
    const Gid gid = entity.gid;
    now.insert_or_assign(gid, std::move(entity));
  }
  std::vector<MembershipEvent> left, turned, joined;
  for (auto& [gid, member] : members_) {
    auto found = now.find(gid);
    if (found == now.end()) {
      left.push_back({MembershipChange::kLeft, std::move(member)});
      continue;
    }
    const bool was_down = member.state == EntityState::kUnreachable;
    const bool is_down = found->second.state == EntityState::kUnreachable;
    if (was_down != is_down) {
      turned.push_back(
          {is_down ? MembershipChange::kUnreachable : MembershipChange::kReachable, found->second});
    }
  }
  for (const auto& [gid, entity] : now) {
    if (!members_.contains(gid)) joined.push_back({MembershipChange::kJoined, entity});
  }
  members_ = std::move(now);
  std::vector<MembershipEvent> events = std::move(left);
  events.reserve(events.size() + turned.size() + joined.size());
  for (auto* part : {&turned, &joined}) {
    std::move(part->begin(), part->end(), std::back_inserter(events));
  }
  return events;
}

}  // namespace tocl::runtime
