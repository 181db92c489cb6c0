// A relay's tickets (multicast_relay.h): a relay carries a request passed
// on to it only when the sender's own process announced that request to
// it first, with a ticket (multicast_protocol.h). Only that process's
// frames carry its process id, so a third process that can reach the relay
// cannot have it carry anything in a sender's name: it can only ask, and
// the request waits for a ticket that never comes.
//
// The book holds the tickets (each erased when used) and the requests that came
// before their ticket (a relay above can pass a request on faster than the
// sender's ticket travels), both bounded and expiring: a ticket or a
// waiting request lives at most its "wait" (the sender's timeout, capped
// at Limits::max_wait); over a bound (a count, and the bytes the waiting
// requests hold) the one nearest its end (tickets) or the oldest
// (requests) goes. A request is settled as soon as its fate is
// known: carried (its ticket fits: same request id, source thread, nonce,
// tag and payload length; the ticket goes), or refused (it does not fit
// its ticket: InvalidArgument, the ticket stays for the real request; or
// it waited too long or was pushed out: Unavailable, which the relay
// answers, so that its sender, if it is a real one, sends its receivers
// the message itself). A request that comes again after it was carried
// (only a relay above can pass it on twice, and a tree member can do
// worse) finds no ticket and waits like any other: refused when its wait
// is over, its answer ignored (the sender took the first). A ticket that
// fits no request it was for is dropped at its end. Tickets are kept in
// the order of their ends too, so the next deadline and the expired
// tickets cost O(log n); the waiting requests (at most `waiting`) are
// scanned.
//
// The bounds are the relay's, not per process: a process that fills the
// tickets with its own (legal) ones, or the waiting requests with
// requests no ticket comes for, pushes out other senders' entries, whose
// requests are then refused (answered: the sender falls back) or, a ticket
// pushed out, wait in vain; at worst such a sender sends to the group
// itself after its full timeout, for every call through this relay. (A
// share per process, each evicting only its own, is the mend not made
// yet.)
//
// Pure: no runtime, no clock of its own (the caller passes `now`), unit-
// tested alone. `Held` is what the relay keeps of a waiting request (a
// Buffer; anything movable in tests). Threading: one thread (the relay's).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "runtime/multicast_protocol.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::runtime {

template <typename Held>
class TicketBook {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    size_t tickets = 4096;                    // tickets kept, used ones included
    size_t waiting = 64;                      // requests waiting for their ticket
    size_t waiting_bytes = size_t{64} << 20;  // their bytes (or the one that waits)
    std::chrono::milliseconds max_wait{60000};
  };

  // A request's fate: carry it (status Ok) or answer it with `status`.
  struct Settled {
    Held held;
    MulticastTicket terms;
    Status status;
  };

  explicit TicketBook(Limits limits = {}) : limits_(limits) {}

  // A ticket that came from process `from`. InvalidArgument (nothing kept)
  // when it is for a thread of another process or repeats a ticket held;
  // else kept, and a waiting request it was for is settled.
  Status AddTicket(Gid from, const MulticastTicket& ticket, Clock::time_point now,
                   std::vector<Settled>& settled) {
    if (ticket.source.process() != from.process()) {
      return InvalidArgument(fmt::format("a multicast ticket from {} for a message of {}",
                                         from.ToString(), ticket.source.ToString()));
    }
    const Key key{ticket.source.raw(), ticket.id};
    if (tickets_.contains(key)) {
      return InvalidArgument(fmt::format("a second multicast ticket for request {} of {}",
                                         ticket.id, ticket.source.ToString()));
    }
    while (!tickets_.empty() && tickets_.size() >= limits_.tickets) {
      EraseTicket(tickets_.find(ends_.begin()->second));  // the one nearest its end
    }
    const Clock::time_point end = now + Wait(ticket.wait_ms);
    tickets_.emplace(key, Ticket{ticket, end});
    ends_.emplace(end, key);
    // The requests that came first: each judged against it, in order,
    // until one fits (the ticket goes with it).
    for (auto it = waiting_.begin(); it != waiting_.end() && tickets_.contains(key);) {
      if (Key{it->terms.source.raw(), it->terms.id} != key) {
        ++it;
        continue;
      }
      Status fate = Judge(tickets_.find(key), it->terms);
      settled.push_back(Settled{std::move(it->held), it->terms, std::move(fate)});
      waiting_bytes_ -= it->bytes;
      it = waiting_.erase(it);
    }
    return Status::Ok();
  }

  // A request of `bytes` passed on to this relay (`terms`: TicketOf it).
  // Settled at once when its ticket is here (carried or refused); else it
  // waits, the oldest waiting ones refused while there are too many.
  void AddRequest(Held held, const MulticastTicket& terms, size_t bytes, Clock::time_point now,
                  std::vector<Settled>& settled) {
    const auto ticket = tickets_.find(Key{terms.source.raw(), terms.id});
    if (ticket != tickets_.end()) {
      Status fate = Judge(ticket, terms);
      settled.push_back(Settled{std::move(held), terms, std::move(fate)});
      return;
    }
    while (!waiting_.empty() &&
           (waiting_.size() >= limits_.waiting || waiting_bytes_ + bytes > limits_.waiting_bytes)) {
      Refuse(waiting_.front(), settled,
             fmt::format("more than {} multicast requests ({} bytes) wait for their tickets",
                         limits_.waiting, limits_.waiting_bytes));
      waiting_bytes_ -= waiting_.front().bytes;
      waiting_.pop_front();
    }
    waiting_bytes_ += bytes;
    waiting_.push_back(Waiting{std::move(held), terms, bytes, now + Wait(terms.wait_ms)});
  }

  // Drops the tickets past their end and refuses the requests that waited
  // for theirs too long.
  void Expire(Clock::time_point now, std::vector<Settled>& settled) {
    while (!ends_.empty() && ends_.begin()->first <= now) {
      EraseTicket(tickets_.find(ends_.begin()->second));
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->end > now) {
        ++it;
        continue;
      }
      Refuse(*it, settled, "its sender announced no such multicast to this relay (no ticket)");
      waiting_bytes_ -= it->bytes;
      it = waiting_.erase(it);
    }
  }

  // When Expire has something to do next (max: nothing).
  Clock::time_point NextDeadline() const {
    Clock::time_point next = ends_.empty() ? Clock::time_point::max() : ends_.begin()->first;
    for (const Waiting& request : waiting_) next = std::min(next, request.end);
    return next;
  }

  size_t tickets() const { return tickets_.size(); }
  size_t waiting() const { return waiting_.size(); }
  size_t waiting_bytes() const { return waiting_bytes_; }

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // source thread's raw gid, request id
  struct Ticket {
    MulticastTicket terms;
    Clock::time_point end;
  };
  using Tickets = std::map<Key, Ticket>;
  struct Waiting {
    Held held;
    MulticastTicket terms;
    size_t bytes = 0;
    Clock::time_point end;
  };

  Clock::duration Wait(uint32_t wait_ms) const {
    return std::min<Clock::duration>(std::chrono::milliseconds(wait_ms), limits_.max_wait);
  }

  // Ok (and the ticket erased: used) when `terms` fit `ticket`.
  Status Judge(typename Tickets::iterator ticket, const MulticastTicket& terms) {
    const MulticastTicket& want = ticket->second.terms;
    if (terms.nonce != want.nonce || terms.secret != want.secret || terms.tag != want.tag ||
        terms.payload_bytes != want.payload_bytes) {
      return InvalidArgument(fmt::format(
          "multicast request {} of {} does not fit its ticket (nonce, secret, tag or size)",
          terms.id, terms.source.ToString()));
    }
    EraseTicket(ticket);
    return Status::Ok();
  }

  void EraseTicket(typename Tickets::iterator ticket) {
    ends_.erase({ticket->second.end, ticket->first});
    tickets_.erase(ticket);
  }

  static void Refuse(Waiting& request, std::vector<Settled>& settled, const std::string& why) {
    settled.push_back(
        Settled{std::move(request.held), request.terms,
                Unavailable(fmt::format("multicast request {} of {} not carried: {}",
                                        request.terms.id, request.terms.source.ToString(), why))});
  }

  const Limits limits_;
  Tickets tickets_;
  std::set<std::pair<Clock::time_point, Key>> ends_;  // tickets_ by end
  std::deque<Waiting> waiting_;
  size_t waiting_bytes_ = 0;
};

}  // namespace tocl::runtime
