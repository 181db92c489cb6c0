// The private reply mailboxes of a process (internal_threads.h): a
// runtime-internal call to other processes (SpawnThread, a multicast's
// relays) sends its requests from one and waits there for the replies.
// The processes a call waits on are recorded with it, so that a process
// that exits, or a host that goes down, fails the calls waiting on it at
// once (FailPending, from the directory's change stream) instead of at
// their timeouts.
//
// Threading: every method from any thread (one lock).
#pragma once

#include <cstdint>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/mailbox.h"
#include "runtime/receive_side.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::runtime {

class ReplyMailboxes {
 public:
  // `receive` (where the mailboxes live) must outlive this.
  explicit ReplyMailboxes(ReceiveSide& receive) : receive_(receive) {}
  ReplyMailboxes(const ReplyMailboxes&) = delete;
  ReplyMailboxes& operator=(const ReplyMailboxes&) = delete;

  // A free mailbox for a call waiting on `peers` (processes).
  // ResourceExhausted, naming `what` calls, when every one is taken.
  Result<Mailbox*> Acquire(std::vector<Gid> peers, std::string_view what);
  // The call is over: a late reply still in the mailbox is dropped.
  void Release(Mailbox* mailbox);

  // The peers of `mailbox`'s call that failed so far, with why (in the
  // order they failed).
  std::vector<std::pair<Gid, Status>> Failures(Mailbox* mailbox);
  // How many of them (a waiter's cheap look: no copy).
  size_t FailureCount(Mailbox* mailbox);
  // The first failure of `mailbox`'s call (ok while none).
  Status FirstFailure(Mailbox* mailbox);
  // Calls waiting on a process of `scope` (a process, or a host: every
  // process of it) learn that it failed with `why`, and wake.
  void FailPending(Gid scope, const Status& why);

  // Acquire and Release around a scope.
  class Lease {
   public:
    Lease(ReplyMailboxes& owner, Mailbox* mailbox) : owner_(owner), mailbox_(mailbox) {}
    ~Lease() { owner_.Release(mailbox_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Mailbox& operator*() const { return *mailbox_; }
    Mailbox* get() const { return mailbox_; }

   private:
    ReplyMailboxes& owner_;
    Mailbox* mailbox_;
  };

 private:
  struct Call {
    std::vector<Gid> peers;
    std::vector<std::pair<Gid, Status>> failures;
  };

  ReceiveSide& receive_;
  std::mutex mu_;
  std::vector<Mailbox*> free_;                  // guarded by mu_
  uint32_t made_ = 0;                           // guarded by mu_
  std::unordered_map<Mailbox*, Call> pending_;  // guarded by mu_
};

}  // namespace tocl::runtime
