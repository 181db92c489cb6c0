#include "core/environment.h"

#include <cstdlib>
#include <utility>

namespace tocl {

std::string FromEnvironment(const char* name, std::string fallback) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? std::string(env) : std::move(fallback);
}

std::string ValueOrEnvironment(const std::string& value, const char* name, std::string fallback) {
  if (!value.empty()) return value;
  return FromEnvironment(name, std::move(fallback));
}

}  // namespace tocl
