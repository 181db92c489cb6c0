// Cryptographic randomness for keys and nonces.
#pragma once

#include <cstddef>
#include <span>

#include "tocl/status.h"

namespace tocl::security {

// Fills `out` from getrandom(2) (the kernel's CSPRNG).
Status FillRandom(std::span<std::byte> out);

}  // namespace tocl::security
