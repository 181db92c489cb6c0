// Multicast (PVM's pvm_mcast, an Ibis send port connected to many receive
// ports): one message from one thread to a list of threads, or to every
// thread a directory query matches when it is sent (Runtime::Multicast).
//
//   std::vector<tocl::Gid> workers = ...;
//   auto sent = runtime->Multicast(me, workers, /*tag=*/7, table);
//   if (!sent.ok()) return fail(sent.status());        // bad use: nothing sent
//   for (const tocl::MulticastOutcome& r : sent->receivers)
//     if (!r.status.ok()) fmt::print("{}: {}\n", r.receiver.ToString(), r.status.ToString());
//
// Each receiver gets an ordinary message (Recv, handlers, requests see it
// as if `from` had sent it with Send), in its place among `from`'s other
// messages to that receiver: a Send to R before the Multicast is received
// before it, one after it is received after it (the runtime's pair order:
// the sender posts a small marker into each (from, receiver) pair when it
// is called, which takes the message's number there and names the process
// that will carry it; whichever process carries it, the receiver delivers
// it where the marker stands).
//
// Identity: only the sender's own process speaks for `from`. A receiver
// takes the message only from the process the marker (which came from the
// sender's process) names, or from the sender's process itself, and only
// with the marker's tag, size and nonce (a random number each call draws
// for each relay, known to the sender and the relays above that relay).
// Whatever does not fit is dropped with a log line, whoever carried it,
// and never blamed on its carrier: its connection stays and its own
// messages still pass (a relayed long-message fragment of no message being
// received is dropped too).
//
// A relay carries only what the sender's process announced to it: a
// request from that process itself, or one a relay above passed on for
// which the sender's process sent it a ticket (each ticket once, and only
// for a request with its id, source, nonce, tag, size and secret: a second
// random number per relay that only requests, tickets and the relay's
// answers carry, never frames to receivers, so that another receiver
// process of the relay's group, which learns the nonce, cannot make a
// request that fits). What a third
// process with the cluster secret can still do: keep a relay busy for as
// long as it sends it long requests of its own multicasts, one after
// another (a relay serves one request at a time; senders then send the
// message themselves after MulticastOptions::timeout); crowd a relay's
// bounded tables of tickets and of requests waiting for their ticket, so
// that some senders' requests are refused or forgotten and those senders
// send the message themselves (later, not lost: at worst after
// MulticastOptions::timeout, for every call through that relay); have a
// relay carry fills of its own multicasts ahead of markers that never
// come, taking room in that relay's fill budget at a receiver (the
// receiver's per-process cap in all per relay; they age out after
// partial_timeout): when that budget is full, the newest fills of the
// sources holding the most of it are dropped to make room (max-min
// sharing), so another source's fill gets in unless it would make its
// source's share the largest; with n source processes that send no
// markers (cheap to start), a source is sure only of 1/(n+1) of that
// budget, and past that its newest fills are lost (reported Ok). By
// having many of its fills dropped there it also flushes that relay's
// notes of other sources' dropped fills at that receiver (1024 per
// receive lane, the relay with the most giving its oldest): a number whose
// note is flushed is not given up, so that sender's pair with the
// receiver waits behind the live relay until the frames held behind it
// pass the receiver's per-process cap and the sender's pairs there are
// dropped as broken. When it is itself a
// relay in this call's tree (it has receivers in it), it can: give its
// own group's receivers and those of the relays below it other bytes of
// the same size in `from`'s name (a ticket does not cover the payload);
// pass on its subtree's receivers and numbers rewritten (the ticket does
// not cover them either); give its own group nothing while answering Ok
// (lost, and worse: each of those receivers' pairs with `from` stalls at
// that number while the relay lives, later messages held behind it until
// they pass the receiver's per-process cap and `from`'s pairs there are
// dropped; the relays below it that hear nothing are sent to by the
// sender); and send fills for later numbers with this call's nonce, which
// stall those receivers the same way or take the relay's one slot per
// number ahead of a later call's marker. It cannot have a relay it is not
// above carry anything in `from`'s name, make a chosen multicast through
// such a relay be lost, nor cut a relay off from its receivers.
//
// How it travels: the payload leaves the sender's host once per other host
// that has receivers, not once per receiver. Receivers are grouped by host;
// each group's relay is the process of its lowest receiver. The sender
// sends the message, with the list of receivers and their numbers, to the
// relays of a binomial tree over the groups (ceil(log2(groups + 1))
// copies: 1 for one other host, 2 for two or three, 3 for up to seven);
// each relay passes it on to the relays of its subtree the same way,
// delivers it to its own receivers and sends it to the other receiving
// processes of its host (over shm), each in the receiver's pair order and,
// for long messages, by the long-message protocol the relay carries in the
// sender's place (the payload is in the relay's memory once). Receivers in
// the sender's own process get it as Send gives it; those of other
// processes on the sender's host get it from the sender directly (one shm
// copy each: nothing crosses a link), unless MulticastOptions::relay_local
// asks for a relay there too.
//
// Outcomes: Multicast returns once every relay has answered for its
// receivers (or failed), with one outcome per receiver, in the order of the
// list (a query's: Gid order). Ok means what Send's Ok means for a message
// of that size (short: queued toward the receiver by its relay; nobody
// tells the sender what becomes of it after that; long: the receiver holds
// all of it). An
// outcome is an error when that receiver could not be given the message:
// NotFound (no such thread), FailedPrecondition (it has exited),
// Unavailable (its process or host cannot be reached) and Send's other
// errors; the other receivers still get it. A relay that dies or does not
// answer within MulticastOptions::timeout: the sender sends its receivers
// the message itself, in the places their markers hold (a receiver that
// had it from the relay drops the second copy; a long message a relay was
// still carrying is taken over by the sender's copy, keeping what arrived);
// the receivers of a relay's subtree that never heard from it, and every
// receiver a relay reports an error for other than NotFound or
// FailedPrecondition, are treated the same way. So a receiver is reported
// failed only when the sender itself could not reach it either (the losses
// below aside); the receiver is then told that the message
// will not come, and its later messages from `from` are not held up. (A
// long message the receiver had whole from its relay before the sender's
// second try can be reported Unavailable by that try, after the
// receiver's partial_timeout: as with Send, a failure means "not known to
// have arrived".) Losses not covered, each reported Ok here: a relay that
// crashes after it answered, with a short message still in its own send
// queue, loses that message (the sender does not send it again); a relay
// whose fills reach a receiver far ahead of their markers, beyond its
// budget for fills there (the receiver's per-process cap, half its
// unexpected_cap, in all per relay, shared max-min: when that is full the
// newest fills of the source processes holding the most of it go, so a
// source is sure only of cap/(n+1) with n others filling it), loses
// those; a dropped fill whose note at the receiver another source's drops
// through the same relay flushed (see above) stalls that pair until the
// sender is dropped as broken there; a fill
// that waits at a receiver for its marker while the sender's messages to
// that receiver make no progress for more than the receiver's
// partial_timeout (the receiver congested, so its intake of the sender's
// frames stalls while fills keep coming by another network; or a slow or
// reconnecting link from the sender; or a gap before the marker) is
// dropped, and that number given up (the wait counts from the later of
// the fill's arrival and the pair's last progress, so a slow but moving
// sender loses nothing); and what a relay of the call's own tree can do
// (see above). The
// receiver does not wait for a lost one for ever: once
// `from`'s next message to it is there (and, when the relay died, once
// both the relay's exit and that wait are the receiver's partial_timeout
// old, so that the sender's own copy is still taken in place if it comes
// later than that next message), its place is given up with a warning in
// the receiver's log, and the messages behind it are delivered; a long
// copy that comes after that is refused (its sender's try fails), never
// reported whole.
//
// Errors of the call itself (nothing is sent): InvalidArgument for a
// sender that is not an enrolled thread of this process, kAnyTag, an empty
// list, a receiver that is not a thread id (or is one of the runtime's
// own), the same receiver twice, the sender among the receivers, a payload
// over kMaxMessageBytes, a query that does not parse; NotFound "multicast:
// the query ... matches no thread" when a query matches no thread (besides
// the sender, which a query's result never includes); Unavailable once the
// runtime is shutting down.
//
// Threading: any thread, several at once (each call waits for its own
// relays' answers). `payload` may be reused once Multicast returns.
// Memory: the sender holds one copy of the payload per relay it sends to
// while the request is on its way (as a Send of a copy would), and a relay
// holds the payload once while it passes it on. A relay also holds the
// requests that came before their tickets: up to 64 of them and 64 MiB
// (or one larger, up to reassembly_cap), each for at most the sender's
// timeout, capped at 60 s; and up to 4096 tickets. Each receiver on another
// host costs the sender a 64-byte marker on its link besides.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl {

struct MulticastOptions {
  // How long the sender waits for a relay's answer before it sends that
  // relay's receivers the message itself. A relay answers once each of its
  // sends returned (a long one: once its receiver holds the message).
  std::chrono::milliseconds timeout{10000};
  // Receivers in other processes of the sender's host get the message
  // through a relay there too (one copy from the sender, the relay copying
  // for the others) instead of one shm copy each from the sender. Off by
  // default: on one host the sender's copies cross no link.
  bool relay_local = false;
};

// What became of the message for one receiver.
struct MulticastOutcome {
  Gid receiver;
  Status status;  // ok: given to the receiver, as Send's Ok means
  // The process that carried the message to it: a relay, or this process
  // (the sender sent it itself: its own host, or a relay failed).
  Gid carried_by;
};

struct MulticastResult {
  std::vector<MulticastOutcome> receivers;
  // The copies of the payload this process sent: to relays, and to
  // receivers it sent to itself.
  size_t copies_sent = 0;

  size_t delivered() const {
    size_t n = 0;
    for (const MulticastOutcome& outcome : receivers) n += outcome.status.ok() ? 1 : 0;
    return n;
  }
  bool all_delivered() const { return delivered() == receivers.size(); }
};

}  // namespace tocl
