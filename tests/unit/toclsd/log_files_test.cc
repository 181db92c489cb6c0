// Spawned processes' log files (toclsd/spawn/log_files.h): the size cap
// that drops the oldest output while a program writes on, reading around
// what was dropped, removal, and listing.
#include "spawn/log_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.h"

namespace tocl::daemon::spawn {
namespace {

using tocl::testing::TempDir;

constexpr Gid kProcess = Gid::Process(1, 5);

LogFiles OpenLogs(const TempDir& dir) {
  Result<LogFiles> logs = LogFiles::Open(dir.path() + "/logs");
  REQUIRE(logs.status().message() == "");
  return std::move(logs).value();
}

// Output a program writes: byte i of the file is Pattern(i), so any slice
// can be checked against where it claims to start.
char Pattern(uint64_t i) {
  return static_cast<char>('a' + i % 23);
}

void WriteOutput(const Fd& file, uint64_t from, uint64_t bytes) {
  std::string text(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) text[i] = Pattern(from + i);
  REQUIRE(::write(file.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
}

struct stat Stat(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info;
}

void CheckPattern(const LogFiles::Chunk& chunk) {
  for (uint64_t i = 0; i < chunk.data.size(); ++i) {
    if (chunk.data[i] != Pattern(chunk.offset + i)) {
      FAIL("byte " << chunk.offset + i << " is not what was written there");
    }
  }
}

TEST_CASE("a capped log keeps its newest bytes, frees the rest and keeps its offsets",
          "[spawn][logs]") {
  TempDir dir("log-files-");
  LogFiles logs = OpenLogs(dir);
  auto files = logs.Create(kProcess, ::getuid());
  REQUIRE(files.ok());
  constexpr uint64_t kWritten = 600 << 10, kCap = 64 << 10;
  WriteOutput(files->first, 0, kWritten);
  REQUIRE(::fsync(files->first.get()) == 0);  // blocks allocated, as after a while of running

  REQUIRE(logs.Cap(kProcess, kCap).message() == "");
  const std::string path = logs.PathOf(kProcess, pb::LOG_STREAM_STDOUT);
  const struct stat capped = Stat(path);
  CHECK(static_cast<uint64_t>(capped.st_size) == kWritten);  // every byte ever written
  const uint64_t block = static_cast<uint64_t>(capped.st_blksize);
  CHECK(static_cast<uint64_t>(capped.st_blocks) * 512 <= kCap + 2 * block);

  // A reader from the start gets the oldest byte kept, and where it is.
  auto chunk = logs.Read(kProcess, pb::LOG_STREAM_STDOUT, 0, 1 << 20);
  REQUIRE(chunk.ok());
  CHECK(chunk->size == kWritten);
  CHECK(chunk->offset >= kWritten - kCap - block);
  CHECK(chunk->offset <= kWritten - kCap);
  CHECK(chunk->offset + chunk->data.size() == kWritten);
  CheckPattern(*chunk);

  // A reader that follows the file goes on where it was: the child appends.
  WriteOutput(files->first, kWritten, 1000);
  auto next = logs.Read(kProcess, pb::LOG_STREAM_STDOUT, kWritten, 1 << 20);
  REQUIRE(next.ok());
  CHECK(next->offset == kWritten);
  CHECK(next->data.size() == 1000);
  CheckPattern(*next);

  // Capping again without new output past the cap changes nothing.
  REQUIRE(logs.Cap(kProcess, kCap).message() == "");
  CHECK(logs.Read(kProcess, pb::LOG_STREAM_STDOUT, 0, 1 << 20).value().offset == chunk->offset);
}

TEST_CASE("a log under its cap is left whole", "[spawn][logs]") {
  TempDir dir("log-files-");
  LogFiles logs = OpenLogs(dir);
  auto files = logs.Create(kProcess, ::getuid());
  REQUIRE(files.ok());
  WriteOutput(files->second, 0, 10'000);
  REQUIRE(logs.Cap(kProcess, 64 << 10).message() == "");
  auto chunk = logs.Read(kProcess, pb::LOG_STREAM_STDERR, 0, 1 << 20);
  REQUIRE(chunk.ok());
  CHECK(chunk->offset == 0);
  CHECK(chunk->data.size() == 10'000);
  CheckPattern(*chunk);
  // Past the end: nothing, at the end.
  auto after = logs.Read(kProcess, pb::LOG_STREAM_STDERR, 20'000, 100);
  REQUIRE(after.ok());
  CHECK(after->data.empty());
  CHECK(after->size == 10'000);
}

TEST_CASE("removed logs are gone, and removing them again or capping them is fine",
          "[spawn][logs]") {
  TempDir dir("log-files-");
  LogFiles logs = OpenLogs(dir);
  REQUIRE(logs.Create(kProcess, ::getuid()).ok());
  REQUIRE(logs.Create(Gid::Process(1, 6), ::getuid()).ok());
  REQUIRE(logs.Remove(kProcess).message() == "");
  CHECK_FALSE(std::filesystem::exists(logs.PathOf(kProcess, pb::LOG_STREAM_STDOUT)));
  CHECK_FALSE(std::filesystem::exists(logs.PathOf(kProcess, pb::LOG_STREAM_STDERR)));
  CHECK(logs.Read(kProcess, pb::LOG_STREAM_STDOUT, 0, 100).status().code() ==
        StatusCode::kNotFound);
  CHECK(logs.Remove(kProcess).message() == "");
  CHECK(logs.Cap(kProcess, 64 << 10).message() == "");
  CHECK(std::filesystem::exists(logs.PathOf(Gid::Process(1, 6), pb::LOG_STREAM_STDOUT)));
}

TEST_CASE("the logs listed are this host's processes', other files ignored", "[spawn][logs]") {
  TempDir dir("log-files-");
  LogFiles logs = OpenLogs(dir);
  REQUIRE(logs.Create(Gid::Process(1, 5), ::getuid()).ok());
  REQUIRE(logs.Create(Gid::Process(1, 12), ::getuid()).ok());
  REQUIRE(logs.Create(Gid::Process(2, 7), ::getuid()).ok());
  std::ofstream(logs.dir() + "/notes.txt") << "x";
  std::ofstream(logs.dir() + "/h1.out") << "x";
  std::ofstream(logs.dir() + "/garbage.err") << "x";
  auto listed = logs.List(Gid::Host(1));
  REQUIRE(listed.ok());
  CHECK(*listed == std::vector<Gid>{Gid::Process(1, 5), Gid::Process(1, 12)});
}

}  // namespace
}  // namespace tocl::daemon::spawn
