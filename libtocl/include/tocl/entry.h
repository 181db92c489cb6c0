// Entry points other processes may start threads on (Runtime::SpawnThread,
// `tocl spawn-thread`): functions registered by name, process-wide.
//
//   // once, before (or after) Runtime::Start
//   tocl::register_entry("echo", [](tocl::ThreadContext& context) {
//     (void)context.runtime.Send(context.self, context.spawner, /*tag=*/1, context.payload);
//     auto message = context.runtime.Recv(context.self);  // Cancelled at Shutdown
//   });
//
// The function runs on a new thread of the target process, enrolled before
// the spawner hears its Gid (it can receive from the start); when it
// returns, the thread leaves (LeaveThread) and ends. Runtime::Shutdown wakes
// entry threads blocked in Recv (which then returns Cancelled "the runtime
// is shutting down"; Send returns Unavailable) and waits for every entry
// function to return: an entry must return once the runtime says it is
// shutting down, and must not call Shutdown itself. An exception that
// escapes an entry is logged and ends the thread, not the process.
//
// Threading: register_entry may be called from any thread, at any time.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/export.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl {

class Runtime;

struct ThreadContext {
  Runtime& runtime;
  Gid self;                        // the new thread, enrolled
  Gid spawner;                     // the thread that called SpawnThread
  std::vector<std::byte> payload;  // as the spawner gave it
};

using Entry = std::function<void(ThreadContext&)>;

// Entry names are 1..kMaxEntryNameBytes of [A-Za-z0-9_.:-], starting with a
// letter or '_'.
inline constexpr size_t kMaxEntryNameBytes = 128;
TOCL_EXPORT Status ValidateEntryName(std::string_view name);

// Registers `fn` under `name` for every runtime of this process.
// AlreadyExists when the name is taken; InvalidArgument for a bad name or an
// empty function.
TOCL_EXPORT Status register_entry(std::string name, Entry fn);  // NOLINT: the paper's spelling

}  // namespace tocl
