#include "tocl/version.h"

namespace tocl {

std::string_view LibraryVersion() {
  return TOCL_VERSION_STRING;
}

}  // namespace tocl
