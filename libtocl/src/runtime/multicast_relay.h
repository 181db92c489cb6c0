// The multicast relay every runtime runs (tocl/multicast.h,
// multicast_service.h): a thread serving the internal mailbox at
// kRelayThread. For each request (multicast_protocol.h: from a sender's
// reply mailbox, or from a relay above it passing it on) it passes the
// request on to the relays of its subtree, carries the message to its own
// group's receivers in the sender's place (each a fill for the receiver's
// number with the group's nonce: wire/frame.h) and answers the sender.
//
// What it carries: a request from the sender's own process (its relay
// thread can only be asked by that process's frames), and a request
// passed on by a relay above it only with the ticket the sender's process
// sent it for that request (multicast_tickets.h: each ticket erased when
// used, the request fitting it; a request may wait for its ticket, bounded, until
// the sender's timeout). So a third process that can reach it cannot have
// it carry anything in a sender's name.
//
// What it refuses (answered with the reason, echoing the group's secret,
// so that a real sender sends to the group itself; a request that does
// not decode, or is answered to another process than its source's, is
// not answered): a request not from and to the runtime's mailboxes, or for
// another relay's group, or from a sender's mailbox for a thread of
// another process, or of or to one of a runtime's internal threads, or
// with a tag no Send may use, or passed on without a ticket (answered
// when its wait for one is over, or it is pushed out of the waiting
// ones; a request passed on again after it was carried finds no ticket
// and is answered so too, an answer its sender ignores). A passed-on
// request that does not fit its ticket is refused unanswered: no real
// sender's request does that, and the answer would tell the sender of a
// call we may still carry that we refused it.
//
// It carries long messages one receiver after the other, and one request
// after the other (tried and not kept: nothing yet; a relay thread per
// request is the next step if relays queue).
//
// Threading: Open, Start and Stop from Runtime::Start and
// Runtime::Impl::Shutdown; the rest on its own thread.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/mailbox.h"
#include "runtime/multicast_hooks.h"
#include "runtime/multicast_protocol.h"
#include "runtime/multicast_tickets.h"
#include "runtime/receive_side.h"
#include "tocl/gid.h"
#include "tocl/runtime.h"

namespace tocl::runtime {

class MulticastRelay {
 public:
  // `receive`, `shutting_down` and `hooks` must outlive this.
  MulticastRelay(ReceiveSide& receive, const std::atomic<bool>& shutting_down,
                 const MulticastHooks& hooks)
      : receive_(receive), shutting_down_(shutting_down), hooks_(hooks) {}
  ~MulticastRelay();
  MulticastRelay(const MulticastRelay&) = delete;
  MulticastRelay& operator=(const MulticastRelay&) = delete;

  // Creates the relay mailbox of `process`: requests that arrive before
  // Start wait in it. Before the endpoints are published.
  void Open(Gid process);
  void Start();
  // The relay thread ends (the runtime is shutting down and has woken the
  // mailboxes).
  void Stop();

 private:
  using Book = TicketBook<Buffer>;

  // Waits for requests and tickets, and for the book's next deadline.
  void Serve();
  // A request or a ticket: what it settles goes to `settled`; a request
  // from the sender's own process is carried at once.
  void Handle(Buffer message, std::vector<Book::Settled>& settled);
  // Carries a request its ticket admitted, or answers one refused.
  void Settle(Book::Settled& request);
  // Passes `request` on, carries it to its group and answers its sender.
  void Carry(const MulticastRequest& request);
  void PassOn(const MulticastRequest& request);
  void Answer(Gid reply_to, const MulticastReply& reply);

  ReceiveSide& receive_;
  const std::atomic<bool>& shutting_down_;
  const MulticastHooks& hooks_;
  Gid process_;               // set by Open
  Mailbox* relay_ = nullptr;  // owned by the thread table
  Book book_;                 // the relay thread's
  std::thread server_;
};

}  // namespace tocl::runtime
