// The scopes of the Gid hierarchy: a host holds its processes and their
// threads, a process its threads, a thread only itself. The ids inside a
// scope are one range of raw values, from the scope's own to ScopeEnd, so
// a container ordered by Gid (or its raw value) finds them with one
// lower_bound (the notifier's watches of a host that went down, a
// membership watch's members on it).
#pragma once

#include <cstdint>

#include "tocl/gid.h"

namespace tocl {

// The last raw id inside `scope` (a valid id).
constexpr uint64_t ScopeEnd(Gid scope) {
  if (scope.is_thread()) return scope.raw();
  if (scope.is_process()) return scope.raw() | Gid::kMaxThread;
  return scope.raw() | ((uint64_t{1} << (Gid::kProcessBits + Gid::kThreadBits)) - 1);
}

// Whether `gid` is `scope`, a thread of it (a process) or on it (a host).
constexpr bool WithinScope(Gid gid, Gid scope) {
  return gid.raw() >= scope.raw() && gid.raw() <= ScopeEnd(scope);
}

}  // namespace tocl
