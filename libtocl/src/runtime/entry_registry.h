// The process-wide registry behind tocl::register_entry: entry functions by
// name, for the spawn service of every runtime of the process.
//
// Threading: safe from any thread (one mutex; lookups copy the function).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tocl/entry.h"

namespace tocl::runtime {

std::optional<Entry> FindEntry(std::string_view name);
// "a, b, c" (sorted; "none" when empty), cut to about `max_bytes`.
std::string EntryNames(size_t max_bytes);

}  // namespace tocl::runtime
