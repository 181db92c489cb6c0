#include "temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace tocl::testing {

TempDir::TempDir(std::string_view prefix) {
  Result<TempDir> made = Make(prefix);
  if (!made.ok()) throw std::runtime_error(made.status().message());
  path_ = std::move(made->path_);
  made->path_.clear();
}

Result<TempDir> TempDir::Make(std::string_view prefix) {
  std::string pattern = "/tmp/" + std::string(prefix) + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Internal("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  return TempDir(Adopt{}, std::move(pattern));
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::File(std::string_view name) const {
  return (std::filesystem::path(path_) / name).string();
}

}  // namespace tocl::testing
