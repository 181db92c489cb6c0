#include "scoped_environment.h"

#include <cstdlib>

namespace tocl::testing {

ScopedEnvironment::~ScopedEnvironment() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      ::unsetenv(it->first.c_str());
    }
  }
}

void ScopedEnvironment::Set(const std::string& name, const std::string& value) {
  Save(name);
  ::setenv(name.c_str(), value.c_str(), 1);
}

void ScopedEnvironment::Unset(const std::string& name) {
  Save(name);
  ::unsetenv(name.c_str());
}

void ScopedEnvironment::Save(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  saved_.emplace_back(name, value != nullptr ? std::optional<std::string>(value) : std::nullopt);
}

}  // namespace tocl::testing
