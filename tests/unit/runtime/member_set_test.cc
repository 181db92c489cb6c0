// The member set of a membership watch: what a new read of the directory
// changes about the members reported so far (leaves, state turns, joins),
// with nothing reported twice.
#include "runtime/membership/member_set.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace tocl::runtime {
namespace {

constexpr Gid kA = Gid::Process(1, 2);
constexpr Gid kB = Gid::Process(1, 3);
constexpr Gid kC = Gid::Process(2, 1);

Entity Member(Gid gid, EntityState state = EntityState::kRunning) {
  Entity entity;
  entity.gid = gid;
  entity.kind = EntityKind::kProcess;
  entity.name = gid.ToString();
  entity.state = state;
  return entity;
}

// "joined h1.p2" per event, to compare whole sequences.
std::vector<std::string> Described(const std::vector<MembershipEvent>& events) {
  std::vector<std::string> text;
  for (const MembershipEvent& event : events) {
    text.push_back(std::string(MembershipChangeName(event.change)) + " " +
                   event.entity.gid.ToString());
  }
  return text;
}

TEST_CASE("the first read joins every member in Gid order", "[membership]") {
  MemberSet set;
  CHECK(Described(set.Reconcile({Member(kC), Member(kA), Member(kB)})) ==
        std::vector<std::string>{"joined h1.p2", "joined h1.p3", "joined h2.p1"});
  CHECK(set.size() == 3);
  CHECK(set.Reconcile({Member(kA), Member(kB), Member(kC)}).empty());  // nothing changed
  CHECK(set.Reconcile({}).size() == 3);
  CHECK(set.Reconcile({}).empty());
}

TEST_CASE("a read reports leaves, then state turns, then joins, each once", "[membership]") {
  MemberSet set;
  (void)set.Reconcile({Member(kA), Member(kB)});
  // A left, B's host went down, C joined while its host is down.
  auto events =
      set.Reconcile({Member(kB, EntityState::kUnreachable), Member(kC, EntityState::kUnreachable)});
  CHECK(Described(events) ==
        std::vector<std::string>{"left h1.p2", "unreachable h1.p3", "joined h2.p1"});
  CHECK(events[0].entity.name == "h1.p2");  // as last reported
  CHECK(events[2].entity.state == EntityState::kUnreachable);
  CHECK(
      set.Reconcile({Member(kB, EntityState::kUnreachable), Member(kC, EntityState::kUnreachable)})
          .empty());
  CHECK(Described(set.Reconcile({Member(kB), Member(kC)})) ==
        std::vector<std::string>{"reachable h1.p3", "reachable h2.p1"});
  CHECK_FALSE(set.Contains(kA));
  CHECK(set.Contains(kB));
}

TEST_CASE("a member whose attributes change is updated silently, and reported as it is now",
          "[membership]") {
  MemberSet set;
  (void)set.Reconcile({Member(kA)});
  Entity changed = Member(kA);
  changed.attributes = {{"role", "indexer"}};
  CHECK(set.Reconcile({changed}).empty());
  auto events = set.Reconcile({});
  REQUIRE(events.size() == 1);
  CHECK(events[0].entity.attributes.at("role") == "indexer");
}

TEST_CASE("a scope holds a member when the member is it, a thread of it or on it", "[membership]") {
  MemberSet set;
  const Gid thread = Gid::Thread(kB, 7);
  (void)set.Reconcile({Member(kA), Member(thread)});
  CHECK(set.AnyWithin(kA));
  CHECK(set.AnyWithin(kB));  // its thread is a member
  CHECK(set.AnyWithin(thread));
  CHECK_FALSE(set.AnyWithin(Gid::Thread(kB, 8)));
  CHECK_FALSE(set.AnyWithin(Gid::Process(1, 4)));
  CHECK(set.AnyWithin(Gid::Host(1)));
  CHECK_FALSE(set.AnyWithin(Gid::Host(2)));
  (void)set.Reconcile({Member(Gid::Host(2))});  // hosts can be members too
  CHECK(set.AnyWithin(Gid::Host(2)));
  CHECK_FALSE(set.AnyWithin(Gid::Host(1)));
}

TEST_CASE("membership changes have names", "[membership]") {
  CHECK(MembershipChangeName(MembershipChange::kJoined) == "joined");
  CHECK(MembershipChangeName(MembershipChange::kLeft) == "left");
  CHECK(MembershipChangeName(MembershipChange::kUnreachable) == "unreachable");
  CHECK(MembershipChangeName(MembershipChange::kReachable) == "reachable");
  CHECK(MembershipChangeName(MembershipChange::kCurrent) == "current");
}

}  // namespace
}  // namespace tocl::runtime
