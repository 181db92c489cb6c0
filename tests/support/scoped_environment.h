// Environment variables set or unset for one test, put back as they were
// when it ends (also when an assertion ends it early): tests of what reads
// $TOCL_* do not depend on the shell that runs them. setenv is not
// thread-safe: only while no other thread of the test reads the environment.
// (Target tocl_test_support; no Catch2.)
//
//   ScopedEnvironment environment;
//   environment.Unset("TOCL_NETWORKS");
//   environment.Set("TOCL_VIA_MAX_VIS", "7");
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tocl::testing {

class ScopedEnvironment {
 public:
  ScopedEnvironment() = default;
  ~ScopedEnvironment();  // puts every variable back, the last changed first
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

  void Set(const std::string& name, const std::string& value);
  void Unset(const std::string& name);

 private:
  void Save(const std::string& name);

  // Each variable as it was before its first change here; nullopt: unset.
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace tocl::testing
