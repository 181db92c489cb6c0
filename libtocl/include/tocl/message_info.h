// What Runtime::Probe and TryProbe report about a waiting message. A
// header of its own so that the library's lower layers (the mailboxes) can
// take it without the whole Runtime.
#pragma once

#include <cstddef>

#include "tocl/buffer.h"
#include "tocl/gid.h"

namespace tocl {

struct MessageInfo {
  Gid source;
  Tag tag = 0;
  size_t size = 0;
};

}  // namespace tocl
