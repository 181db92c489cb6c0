// toclsd on a file system that fills up: writes are refused with
// ResourceExhausted, reads keep working, every write acknowledged before
// the disk filled stays, a refused batch leaves nothing behind, and writes
// are accepted again once space is freed. Needs root (mount(2) of a small
// tmpfs); without it the test warns that it was skipped and passes.
#include <sys/mount.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "daemon_harness.h"
#include "database_file.h"
#include "status_assertions.h"

namespace tocl::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kTmpfsSize = "size=4m";
constexpr size_t kBallastBytes = 1 << 20;
constexpr uint32_t kBatchThreads = 500;
constexpr int kMaxBatches = 10'000;

// A tmpfs mounted on a directory for the guard's life. Unmounts in the
// destructor, lazily (umount -l) when the file system is still busy.
class TmpfsMount {
 public:
  // errno of mount(2), 0 on success.
  TmpfsMount(std::string path, const char* options) : path_(std::move(path)) {
    if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options) == 0) {
      mounted_ = true;
    } else {
      error_ = errno;
    }
  }
  ~TmpfsMount() {
    if (!mounted_) return;
    if (::umount2(path_.c_str(), 0) != 0) (void)::umount2(path_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  bool mounted() const { return mounted_; }
  int error() const { return error_; }

 private:
  std::string path_;
  bool mounted_ = false;
  int error_ = 0;
};

int64_t Stored(Gid gid) {
  return std::bit_cast<int64_t>(gid.raw());
}

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Batch `number` of `process`: threads number * kBatchThreads + 1 ... with
// two attributes each, one of them padding so that the disk fills quickly.
std::vector<ThreadInfo> MakeBatch(Gid process, int number) {
  std::vector<ThreadInfo> batch(kBatchThreads);
  for (uint32_t i = 0; i < kBatchThreads; ++i) {
    const uint32_t index = static_cast<uint32_t>(number) * kBatchThreads + i + 1;
    batch[i].gid = Gid::Thread(process, index);
    batch[i].name = "filler-" + std::to_string(index);
    batch[i].attributes = {{"batch", "b" + std::to_string(number)},
                           {"pad", std::string(32, static_cast<char>('a' + index % 26))}};
  }
  return batch;
}

// The first and the last thread of every batch are there, with their name.
void CheckSampled(DirectoryClient& client, const std::vector<std::vector<ThreadInfo>>& batches) {
  for (const std::vector<ThreadInfo>& batch : batches) {
    for (const ThreadInfo* thread : {&batch.front(), &batch.back()}) {
      Result<Entity> found = client.Lookup(thread->gid);
      INFO("lookup " << thread->gid.ToString() << " -> " << found.status().ToString());
      REQUIRE(found.ok());
      CHECK(found->kind == EntityKind::kThread);
      CHECK(found->name == thread->name);
    }
  }
}

TEST_CASE(
    "a full disk refuses writes with RESOURCE_EXHAUSTED, keeps serving reads, and accepts "
    "writes again once space is freed (skipped with a warning without mount permission)",
    "[integration][disk]") {
  TempDir mount_point("toclsd-disk-full-");
  TmpfsMount tmpfs(mount_point.path(), kTmpfsSize);
  if (!tmpfs.mounted()) {
    if (tmpfs.error() == EPERM) {
      WARN("skipped: mounting a tmpfs needs root (CAP_SYS_ADMIN): " << std::strerror(EPERM));
      return;
    }
    FAIL("mount -t tmpfs -o " << kTmpfsSize << " tmpfs " << mount_point.path() << ": "
                              << std::strerror(tmpfs.error()));
  }
  const std::string ballast = mount_point.path() + "/ballast";
  {
    std::ofstream file(ballast, std::ios::binary);
    const std::string zeroes(kBallastBytes, '\0');
    file.write(zeroes.data(), static_cast<std::streamsize>(zeroes.size()));
    file.flush();
    REQUIRE(file.good());
  }
  const std::string state_dir = mount_point.path() + "/state";

  DaemonOptions options;
  options.state_dir = state_dir;
  Daemon daemon(options);  // after the mount: stopped before it is unmounted
  REQUIRE_OK(daemon.Start());
  auto client = REQUIRE_VALUE(daemon.Connect());
  auto session = REQUIRE_VALUE(client->Enroll(ProcessNamed("disk-filler")));
  const Gid process = session->gid();

  // Fill the disk, one atomic batch at a time.
  std::vector<std::vector<ThreadInfo>> acknowledged;
  std::vector<ThreadInfo> refused;
  Status refusal;
  for (int number = 0; number < kMaxBatches; ++number) {
    std::vector<ThreadInfo> batch = MakeBatch(process, number);
    Status status = session->RegisterThreads(batch);
    if (!status.ok()) {
      refusal = status;
      refused = std::move(batch);
      break;
    }
    acknowledged.push_back(std::move(batch));
  }
  INFO("acknowledged batches: " << acknowledged.size() << ", refusal: " << refusal.ToString());
  REQUIRE_FALSE(refusal.ok());
  REQUIRE_FALSE(acknowledged.empty());
  CHECK(refusal.code() == StatusCode::kResourceExhausted);
  CHECK(Lower(refusal.message()).find("full") != std::string::npos);

  // Reads still work, on the connection that saw the refusal and a new one.
  REQUIRE(daemon.running());
  CHECK_OK(client->Ping());
  CHECK_OK(client->CheckHealth());
  auto reader = REQUIRE_VALUE(daemon.Connect());
  CHECK_OK(reader->Ping());
  CheckSampled(*reader, acknowledged);
  {
    auto first_batch = REQUIRE_VALUE(reader->QueryAll("kind=thread and batch=b0"));
    CHECK(first_batch.size() == kBatchThreads);
  }
  // The refused batch left nothing behind.
  int refused_present = 0;
  for (const ThreadInfo& thread : refused) {
    Result<Entity> found = reader->Lookup(thread.gid);
    if (found.ok()) {
      ++refused_present;
    } else {
      INFO("lookup " << thread.gid.ToString() << " -> " << found.status().ToString());
      CHECK(found.status().code() == StatusCode::kNotFound);
    }
  }
  CHECK(refused_present == 0);

  // Free space: the same batch (it left nothing) is accepted again.
  REQUIRE(std::filesystem::remove(ballast));
  Status last_attempt;
  int attempts = 0;
  const bool accepted = WaitUntil(
      [&] {
        ++attempts;
        last_attempt = session->RegisterThreads(refused);
        return last_attempt.ok();
      },
      seconds(10), milliseconds(50));
  INFO("attempts after freeing space: " << attempts << ", last: " << last_attempt.ToString());
  REQUIRE(accepted);
  acknowledged.push_back(refused);
  CheckSampled(*reader, {refused});

  // A clean stop, a restart on the same files: sound, and nothing lost.
  CHECK_OK(session->Close("disk test done"));
  session.reset();
  client.reset();
  reader.reset();
  REQUIRE(daemon.Stop().value_or(-1) == 0);
  {
    auto db = REQUIRE_VALUE(DatabaseFile::Open(daemon.db_path()));
    CHECK(REQUIRE_VALUE(db.IntegrityCheck()) == "ok");
    const std::unordered_set<int64_t> stored = REQUIRE_VALUE(db.ThreadGids());
    size_t missing = 0;
    Gid first_missing;
    for (const std::vector<ThreadInfo>& batch : acknowledged) {
      for (const ThreadInfo& thread : batch) {
        if (!stored.contains(Stored(thread.gid)) && missing++ == 0) first_missing = thread.gid;
      }
    }
    INFO("first missing: " << first_missing.ToString());
    CHECK(missing == 0);
    CHECK(stored.size() == acknowledged.size() * kBatchThreads);
  }
  REQUIRE_OK(daemon.Restart());
  auto restarted = REQUIRE_VALUE(daemon.Connect());
  CheckSampled(*restarted, acknowledged);
  restarted.reset();
  REQUIRE(daemon.Stop().value_or(-1) == 0);
}

}  // namespace
}  // namespace tocl::testing
