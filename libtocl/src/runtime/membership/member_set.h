// The members a membership watch has reported (Runtime::WatchMembers), and
// what a new read of the directory changes about them: the events its
// callback gets. No daemon, no thread: the watch (membership_watch.h) reads
// the directory and hands each read here.
//
// A read is every entity that matches the watch's query and runs (the
// directory shows it running, or unreachable: its host is down). Comparing
// it with the members reported so far gives, in this order and each in Gid
// order: kLeft for members it lacks, kUnreachable / kReachable for members
// whose state turned, kJoined for entities new to it. Nothing is reported
// twice: the set is exactly what the callbacks were told.
//
// Threading: one owner (the watch's thread).
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "tocl/entity.h"
#include "tocl/gid.h"
#include "tocl/membership.h"

namespace tocl::runtime {

class MemberSet {
 public:
  // The events that take the members to `read` (entities in any order, no
  // gid twice, none exited), which become the members. A kLeft carries the
  // member as last reported; a member whose state stayed is updated
  // silently (its attributes may have changed).
  std::vector<MembershipEvent> Reconcile(std::vector<Entity> read);

  // Whether a member lies inside `scope`: is it, or is a thread of it (a
  // process), or is on it (a host). The exit or unreachability of a scope
  // no member lies in changes nothing.
  bool AnyWithin(Gid scope) const;

  size_t size() const { return members_.size(); }
  bool Contains(Gid gid) const { return members_.contains(gid); }

 private:
  std::map<Gid, Entity> members_;  // as last reported, by gid
};

}  // namespace tocl::runtime
