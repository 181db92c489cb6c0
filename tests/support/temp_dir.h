// A fresh directory under /tmp for one test, removed with everything in it.
// Shared by the unit and integration tests, the netns harness and tocl-bench
// (target tocl_test_support; no Catch2).
#pragma once

#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::testing {

class TempDir {
 public:
  // `prefix` becomes /tmp/<prefix>XXXXXX. Throws std::runtime_error (which
  // fails the current test) if the directory cannot be made; Make() is the
  // form that returns the error.
  explicit TempDir(std::string_view prefix = "tocl-test-");
  static Result<TempDir> Make(std::string_view prefix);
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory.
  std::string File(std::string_view name) const;

 private:
  struct Adopt {};
  TempDir(Adopt, std::string path) : path_(std::move(path)) {}

  std::string path_;  // empty when moved from
};

}  // namespace tocl::testing
