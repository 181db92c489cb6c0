// The inputs kept from fuzzing, run through the same checks as the libFuzzer
// targets (tests/fuzz/fuzz_checks.h), with g++ and in every `make test`:
//   tests/fuzz/regressions/<target>/  inputs that once broke a property or
//                                     crashed (fixed since), and tricky ones
//   tests/fuzz/seeds/<target>/        the fuzzers' starting corpus: valid
//                                     inputs, which must stay accepted
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "fuzz_checks.h"

#ifndef TOCL_FUZZ_INPUTS_DIR
#error "TOCL_FUZZ_INPUTS_DIR is the source tree's tests/fuzz"
#endif

namespace tocl::fuzz {
namespace {

namespace fs = std::filesystem;

using Check = Result<Verdict> (*)(std::span<const std::byte>);

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    // README.md explains a directory's inputs; it is not one.
    if (entry.is_regular_file() && entry.path().filename() != "README.md") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string Contents(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  REQUIRE(file);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// Runs every file of tests/fuzz/<kind>/<target>/ through `check`: every
// property must hold and, for seeds, the input must be accepted.
void RunAll(std::string_view kind, std::string_view target, Check check) {
  const fs::path dir = fs::path(TOCL_FUZZ_INPUTS_DIR) / kind / target;
  const std::vector<fs::path> files = FilesIn(dir);
  INFO("directory: " << dir.string());
  REQUIRE_FALSE(files.empty());
  for (const fs::path& path : files) {
    const std::string bytes = Contents(path);
    INFO("input: " << path.filename().string());
    const Result<Verdict> verdict =
        check(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
    CHECK(verdict.status().message() == "");
    if (verdict.ok() && kind == "seeds") CHECK(*verdict == Verdict::kAccepted);
  }
}

void RunTarget(std::string_view target, Check check) {
  RunAll("regressions", target, check);
  RunAll("seeds", target, check);
}

TEST_CASE("kept frame decoder inputs pass the fuzz target's checks", "[fuzz][wire]") {
  RunTarget("frame_decoder", CheckFrameDecoder);
}

TEST_CASE("kept query parser inputs pass the fuzz target's checks", "[fuzz][query]") {
  RunTarget("query_parser", CheckQueryParser);
}

TEST_CASE("kept gid parser inputs pass the fuzz target's checks", "[fuzz][gid]") {
  RunTarget("gid_parser", CheckGidParser);
}

TEST_CASE("kept config loader inputs pass the fuzz target's checks", "[fuzz][config]") {
  RunTarget("config_loader", CheckConfigLoader);
}

}  // namespace
}  // namespace tocl::fuzz
