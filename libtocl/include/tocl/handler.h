// Message handlers (upcalls: Ibis IPL's upcall receive ports, PVM's
// pvm_addmhf): Runtime::RegisterHandler makes every message for a thread
// that matches a source and a tag selector run a function on a thread the
// runtime manages, instead of waiting for a Recv.
//
//   auto registration = runtime->RegisterHandler(
//       tocl::Gid(), /*source=*/tocl::Gid(), kRequest,
//       [&](tocl::HandlerContext& call) {
//         // call.message is the request; answer its sender.
//         runtime->Send(call.self, call.info.source, kReply, Answer(call.message));
//       },
//       {.ordered = false, .thread_name = "server"});
//   // registration->thread: the Gid clients send requests to.
//   ...
//   runtime->CancelHandler(registration->id);  // no call runs once it returns
//
// Which messages: a handler stands on a thread of this process (one that
// EnrollThread gave, or a new one the runtime enrolls for it when `thread`
// is Gid(); the Gid is in the HandlerRegistration). It is a receive posted
// on that thread that never completes (tocl/request.h's rules): it takes
// every message matching its selector that no receive posted before it
// takes, from the messages already waiting on the thread at registration
// on. Receives posted after it (Recv, Irecv, a later handler) see only the
// messages it does not match. Each message runs the function once.
//
// Order and concurrency: calls start in the order the messages arrived
// (per sender, the order they were sent). An unordered handler (default)
// runs up to `max_concurrent_calls` calls at once, so they may finish in
// any order; an ordered one (Ibis' "ordered" property) runs one call at a
// time, each after the previous returned, in arrival order.
//
// Threads: calls run on a pool the runtime owns, shared by every handler of
// the process. It starts with one thread when the first handler is
// registered and grows by one whenever a thread leaves for a call and no
// other idle thread is left (so a message that comes meanwhile finds one),
// up to kMaxHandlerThreads; threads stay until Shutdown. Threads are
// started by the pool's own threads, not on the path that delivers
// messages. An idle pool thread waits as a blocked Recv does (it polls the
// networks itself while messages keep coming, then sleeps), so a handler's
// message reaches it about as fast as it would reach a Recv (dispatch
// latency against a blocking Recv loop: measured in `tocl-bench msg
// --cases handlers`).
//
// A slow or blocked call holds up only its own handler (an ordered one
// waits; an unordered one has its other calls): the others, and every
// receiver of the process, keep going, within two limits. Threads: fewer
// than kMaxHandlerThreads calls blocked at once. Memory: the messages
// waiting for a handler (claimed, not yet taken by a call) count as
// unreceived messages, as those waiting for a Recv do, against the
// process's RuntimeOptions::unexpected_cap (short messages; long ones
// count against reassembly_cap). Until that cap is reached, other
// handlers and receivers are unaffected. Beyond it the process is
// congested, as with any unread backlog: it stops taking short messages
// from its networks (no buffers given to shm peers, tcp connections not
// read) until the backlog falls below the cap again, so every thread and
// handler of the process waits and its senders are slowed. A blocked
// handler whose sender keeps streaming to it gets there; cancel it (its
// backlog stays receivable) or receive the backlog to recover.
//
// Cost with a backlog: a handler's messages stay queued on its thread
// until a call takes them, so on that thread a Recv or Probe walks past
// them (O(backlog) per receive), a call's take walks past the messages
// queued before its own (another handler's, or unreceived ones), and each
// long message that completes there offers the whole queue again. A
// message arriving costs no walk, unless a long message to that thread is
// still arriving.
//
// What a call may do: any Runtime method (Send, Recv on any thread,
// requests, RegisterHandler, CancelHandler) but its own runtime's Shutdown
// (refused with FailedPrecondition) and its destruction: destroying the
// Runtime from one of its own handler calls logs why and aborts the process
// (the destructor would wait for that call forever; like a std::thread
// joining itself, it has no way to report the error). A call is its
// runtime's only: another Runtime of the process sees it as any other
// thread (its Shutdown is allowed, its CancelHandler waits for its own
// running calls). The message is the call's: move it out of
// HandlerContext::message to keep it after the call.
//
// Errors in a call: a function that throws has its exception caught and
// logged (the library's logger, stderr: "tocl: handler 3 on h1.p2.t5
// threw on a message from h1.p4.t1 (tag 7): ..."); the message counts as
// handled (it is not delivered again) and the handler goes on with the next.
//
// Cancel (Runtime::CancelHandler) is synchronous: once it returns, no call
// of the handler runs or will start. Messages it had not yet started a call
// for stay on the thread, in their place, for any other receive (Recv,
// Irecv, a handler registered after it): nothing is lost, nothing is
// handled twice. From inside a call of the handler itself, CancelHandler
// cannot wait for that call: it returns without waiting for the running
// calls (this one and, for an unordered handler, the others finish on
// their own). Which messages they handle is settled when it returns: a
// call that took its message off the thread before may still enter the
// function an instant after the return; no other message is handled, the
// rest stay receivable, in order. Likewise it does not wait for calls that
// are themselves waiting, through CancelHandler, for the caller's own call
// (two handlers cancelling each other from their calls): no deadlock.
//
// Lifetime: a handler lasts until CancelHandler or Shutdown. Its thread
// stays enrolled after a cancel (the messages left there are receivable;
// LeaveThread it when done). If its thread leaves, the handler gets nothing
// more (the thread's waiting messages are dropped) until it is cancelled.
// Shutdown starts no call once it begins, wakes calls blocked in Recv or a
// request (Cancelled), waits for the running calls to return, then
// cancels every handler: a call that blocks on something only the
// application can end holds Shutdown up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "tocl/buffer.h"
#include "tocl/entity.h"
#include "tocl/gid.h"
#include "tocl/message_info.h"

namespace tocl {

using HandlerId = uint64_t;

// The most pool threads a runtime runs handler calls on.
inline constexpr size_t kMaxHandlerThreads = 64;

// One call of a handler.
struct HandlerContext {
  HandlerId handler = 0;
  // The thread the message came to (the handler's thread): send replies
  // from it.
  Gid self;
  // The message's source, tag and size.
  MessageInfo info;
  // The message itself; move it out to keep it past the call.
  Buffer message;
};

using HandlerFunction = std::function<void(HandlerContext&)>;

struct HandlerOptions {
  // One call at a time, in arrival order.
  bool ordered = false;
  // An unordered handler's most calls at once (at least 1).
  uint32_t max_concurrent_calls = 4;
  // For a thread the runtime enrolls for the handler (RegisterHandler with
  // a null thread): its name and attributes in the directory.
  std::string thread_name = "handler";
  Attributes attributes = {};
};

struct HandlerRegistration {
  HandlerId id = 0;  // for CancelHandler
  Gid thread;        // where its messages are sent to
};

}  // namespace tocl
