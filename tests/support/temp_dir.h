// A fresh directory under /tmp for one test, removed with everything in it.
// Shared by the unit and integration tests (target tocl_test_support).
#pragma once

#include <string>
#include <string_view>

namespace tocl::testing {

class TempDir {
 public:
  // `prefix` becomes /tmp/<prefix>XXXXXX. Fails the current test if the
  // directory cannot be made.
  explicit TempDir(std::string_view prefix = "tocl-test-");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory.
  std::string File(std::string_view name) const;

 private:
  std::string path_;  // empty when moved from
};

}  // namespace tocl::testing
