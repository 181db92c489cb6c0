// Membership upcalls (Ibis IPL's joined/left/died upcalls): a watch of a
// directory query (Runtime::WatchMembers) calls back when an entity that
// matches it joins, leaves, or becomes unreachable and comes back.
//
//   auto watch = runtime->WatchMembers("kind=process and role=indexer",
//                                      [&](const tocl::MembershipEvent& event) {
//     switch (event.change) {
//       case tocl::MembershipChange::kJoined: shards.Add(event.entity.gid); break;
//       case tocl::MembershipChange::kLeft: shards.Remove(event.entity.gid); break;
//       case tocl::MembershipChange::kUnreachable: shards.Suspend(event.entity.gid); break;
//       case tocl::MembershipChange::kReachable: shards.Resume(event.entity.gid); break;
//       case tocl::MembershipChange::kCurrent: ready.set_value(); break;  // initial set done
//     }
//   });
//   ...
//   runtime->CancelWatchMembers(*watch);  // no callback runs once this returns
//
// The members are the entities that match the query and run: the directory
// shows them running, or unreachable (their host stopped answering
// heartbeats). Processes and threads alike (the query language's `kind`),
// hosts too.
//
// What a watch delivers, in this order:
//   1. kJoined for every current member, in Gid order, then one kCurrent
//      (no entity): the initial set is complete.
//   2. Then each change, as the directory shows it: kJoined when an entity
//      starts to match (it enrolled, registered, or its attributes changed
//      so that it matches), kLeft when one stops (it exited, left, or no
//      longer matches), kUnreachable when a member's host stops answering
//      heartbeats, kReachable when it answers again.
// Between an entity's kJoined and its kLeft the only events about it are
// kUnreachable and kReachable, in turn; each is reported once. Gids are
// never reused: an entity joins again only if it stopped matching and
// matches again (its attributes changed back).
//
// No gap, no duplicate: the watch asks the daemon for the newest change
// number (Ping) before it reads the set (Query), then follows the daemon's
// change stream (Watch) from that number. Every change after it makes the
// watch read the set again and compare it with the members it reported;
// the difference is what it calls back with. So a change is in the initial
// set or comes after it, never both, never neither, and a burst of changes
// costs one read (changes already included in the last read are skipped).
// When the stream breaks (the daemon restarts, the connection drops) the
// watch reads the set again when the daemon answers (pauses of 20 ms
// growing to 0.5 s) and reports the difference: kLeft for members that
// vanished meanwhile, kJoined for new ones, nothing twice.
//
// What it costs and what it does not see: each read is a query of the
// whole matching set. Every registration or update anywhere in the
// cluster's directory makes one (the daemon alone evaluates queries); an
// exit, or a host going down or coming back, only when a member lies in
// it. A watch of a large set in a cluster where entities come and go all
// the time costs the daemon that. An entity that joined and left between
// two reads (within the time of one read) is reported by neither. The
// entity of a kLeft is what the directory says after it left (exited with
// its reason and status, or still running when it no longer matches; the
// last one reported when the daemon no longer knows it).
//
// Threading: each watch has its own thread, which makes every callback of
// that watch, one at a time, in order. A slow callback holds up only its
// own watch (later changes wait, and come as one difference); other
// watches, notifications and messaging go on. (Meanwhile the daemon's
// stream to the watch waits once gRPC's window is full: do not block in a
// callback for long.) A callback may call any Runtime method but Shutdown,
// including CancelWatchMembers of its own watch (it returns at once; no
// callback starts after it). Cancelling another watch from a callback
// waits for that watch's callback to return: two watches must not cancel
// each other from their callbacks.
//
// Latency: a process's exit reaches a watch on its host as soon as the
// daemon has committed it, plus one read (the exit's own entity is
// reported: no lookup). From a SIGKILL to the kLeft callback, one host,
// debug build on a loaded 2-vCPU VM: median 13-17 ms, within a few
// milliseconds of an exit notice (Notify) of the same process in the same run
// (tests/integration/membership_test.cc, [latency], prints both). Another
// host's changes come after their replication to the watcher's daemon.
#pragma once

#include <functional>
#include <string_view>

#include "tocl/entity.h"
#include "tocl/export.h"

namespace tocl {

enum class MembershipChange {
  kJoined,       // the entity matches and runs (or is unreachable: its entity's state says)
  kLeft,         // it exited, left or no longer matches
  kUnreachable,  // its host stopped answering heartbeats
  kReachable,    // its host answers again
  kCurrent,      // the initial set is complete (once per watch, no entity)
};
// "joined", "left", "unreachable", "reachable", "current"
TOCL_EXPORT std::string_view MembershipChangeName(MembershipChange change);

struct MembershipEvent {
  MembershipChange change = MembershipChange::kJoined;
  // The entity as the directory showed it (see above for kLeft); empty for
  // kCurrent.
  Entity entity;
};

using MembershipCallback = std::function<void(const MembershipEvent&)>;

}  // namespace tocl
