// Who is in the cluster and who is alive, as this daemon sees it.
//
// Members come from the seed's join answer, from the store (recorded at
// earlier runs), from every heartbeat (each carries the sender's member
// list: gossip, so the cluster converges without the seed) and from joins
// the seed answers. Each other member gets a MemberLink (heartbeats and the
// replica puller). A member is heard when its heartbeat arrives, when it
// answers ours, or when a replication batch from it arrives; one not heard
// for `down_after` is marked unreachable in the store (its entities read as
// UNREACHABLE), and marked reachable again, with its replication restarted
// at once, when it is heard again.
//
// A member's own word (its heartbeat, its join) sets its name and address;
// what others say about it adds members this daemon did not know, and moves
// a known one only while it does not answer at the address known here (it
// may have restarted elsewhere).
//
// Thread-safe. Links are created and replaced under mu_, stopped outside it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/member_link.h"
#include "service/daemon_channels.h"
#include "store/store.h"
#include "tocl/directory/v1/cluster.pb.h"

namespace tocl::daemon::cluster {

namespace pb = ::tocl::directory::v1;

struct MembershipTiming {
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds down_after{3000};
  // A replication stream with nothing on it for this long is reconnected:
  // three of the origin's keepalive periods.
  std::chrono::milliseconds replication_silence{3000};
};

// At most this many members are kept (each costs two threads); a heartbeat
// listing more is read only this far.
inline constexpr int kMaxMembers = 1024;
inline constexpr size_t kMaxMemberAddressBytes = 256;

class Membership {
 public:
  // `channels`: how links reach the members (mutual TLS with credentials).
  Membership(directory::Store& store, directory::MemberRow self, MembershipTiming timing,
             directory::DaemonChannels channels);
  ~Membership();  // Stop()
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Links to every member of `members` but this daemon, and starts the
  // down detector.
  void Start(const std::vector<directory::MemberRow>& members);
  // Stops every link and the detector; nothing is linked afterwards.
  void Stop();

  // `member` said so itself: it is heard, and its name and address are
  // recorded (a new member is linked, a moved one relinked). False (and
  // nothing done) when it claims this daemon's own host id.
  bool HeardFrom(const pb::Member& member);
  // Something from `host` arrived (a heartbeat answer, a replication batch).
  void Heard(Gid host);
  // Members `sender` knows: those this one does not know are recorded and
  // linked; a known one's address is taken only while it is unreachable
  // here. The sender's own entry is skipped (call HeardFrom for it).
  void Learn(const google::protobuf::RepeatedPtrField<pb::Member>& members, Gid sender = Gid());

  pb::Member self() const;
  // Every member known here, this daemon included, in host order.
  void FillMembers(google::protobuf::RepeatedPtrField<pb::Member>* out) const;

 private:
  struct Peer {
    directory::MemberRow row;
    std::unique_ptr<MemberLink> link;
    std::chrono::steady_clock::time_point heard;     // time_point{} = never
    bool reachable = true;                           // as last written to the store
    std::chrono::steady_clock::time_point moved_at;  // its address last changed
  };

  // Adds or updates a member under mu_; returns whether the store must
  // record it, and the link it replaced (to stop outside the lock).
  bool UpsertLocked(const directory::MemberRow& row, bool first_hand,
                    std::unique_ptr<MemberLink>& replaced);
  void Record(const std::vector<directory::MemberRow>& rows);
  void Monitor();

  directory::Store& store_;
  const directory::MemberRow self_;
  const MembershipTiming timing_;
  const directory::DaemonChannels channels_;

  mutable std::mutex mu_;
  std::condition_variable wake_;  // signalled by Stop
  bool started_ = false;          // guarded by mu_
  bool stopping_ = false;         // guarded by mu_
  std::map<Gid, Peer> peers_;     // guarded by mu_; never this daemon
  // Links replaced by a member's move, stopped by the monitor thread: a
  // link's own thread that learns of a move must not join another link's
  // threads (two links learning of each other's moves would wait for each
  // other for ever).
  std::vector<std::unique_ptr<MemberLink>> retired_;  // guarded by mu_

  std::thread monitor_;
};

}  // namespace tocl::daemon::cluster
