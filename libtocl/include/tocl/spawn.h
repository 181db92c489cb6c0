// Spawning processes on the hosts of a cluster, and what a spawn returns:
// the option and result types of DirectoryClient::SpawnProcess, Kill and
// ReadLog (and Runtime::SpawnProcess).
//
//   tocl::SpawnOptions spawn;
//   spawn.executable = "/usr/bin/worker";
//   spawn.args = {"--shard", "3"};
//   spawn.where = "gpu=1";                         // or spawn.host = h2
//   auto child = client->SpawnProcess(spawn);      // once it has enrolled
//   auto log = client->ReadLog(child->gid, tocl::LogStream::kStdout);
//
// Plain value types: copy them freely.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tocl/entity.h"
#include "tocl/export.h"
#include "tocl/gid.h"

namespace tocl {

// Every member has a default (designated initializers stay warning-free).
struct SpawnOptions {
  // A path, or a file name looked up in the target daemon's PATH.
  std::string executable = {};
  std::vector<std::string> args = {};  // argv[1..]
  // "KEY=VALUE" entries added to (or replacing in) the daemon's environment.
  std::vector<std::string> env = {};
  // The process's name (empty: the name the program gives Runtime::Start,
  // else the executable's file name) and attributes. The program's own
  // RuntimeOptions name and attributes are kept too: its attributes are
  // added to these, and where both set a key, or both a name, the spawn's
  // wins (the spawner decides what this instance is; the program's are its
  // defaults). Too many together (over kMaxAttributesPerEntity) fail the
  // program's Start with InvalidArgument.
  Attributes attributes = {};
  std::string name = {};
  // Placement, at most one of the two: a host, or a query over hosts
  // ("gpu=1", "host=h2 or host=h3") of whose reachable matches the one with
  // the fewest running processes is chosen. Neither: the daemon asked.
  Gid host = {};
  std::string where = {};
  // How long the process has to enroll before it is killed and the spawn
  // fails with DeadlineExceeded. 0: the daemon's default (10 s).
  std::chrono::milliseconds enroll_timeout{0};
  // The spawning thread (the child reads it as Runtime::parent()); null for
  // none. Runtime::SpawnProcess sets it.
  Gid parent = {};
  std::string working_directory = {};  // empty: the daemon's state directory
};

struct SpawnedProcess {
  Gid gid;  // the process, enrolled
  int64_t os_pid = 0;
  // Its stdout and stderr, files on the host it runs on (ReadLog reads them
  // from anywhere in the cluster).
  std::string stdout_path;
  std::string stderr_path;
};

enum class LogStream { kStdout, kStderr };
TOCL_EXPORT std::string_view LogStreamName(LogStream stream);  // "stdout", "stderr"

struct LogChunk {
  std::string data;             // the bytes from `offset`
  uint64_t size = 0;            // the file's size now: every byte ever written
  bool process_exited = false;  // nothing more will be written
  // Where `data` starts: the offset asked for, or later when the output
  // before it was dropped (a running program's log keeps its newest
  // `log_max_bytes`, toclsd's [spawn] setting). Read on from offset + data.size().
  uint64_t offset = 0;
};

}  // namespace tocl
