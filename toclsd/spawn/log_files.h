// The stdout and stderr files of spawned processes: <dir>/<gid>.out and
// <gid>.err (e.g. /var/lib/tocl/logs/h2.p5.out), created when the process is
// spawned, kept after it exits (`tocl logs h2.p5`) and removed with its
// directory rows (retention). Process ids are never reused while the
// directory database lives, so a name is never reused either; a file left by
// an older database is truncated.
//
// The size cap (Cap) keeps a file's newest bytes without touching the
// child's descriptor: the head of the file becomes a hole
// (FALLOC_FL_PUNCH_HOLE), so offsets stay what they were (a reader that
// follows the file goes on where it was) while the blocks are freed.
//
// The files belong to the uid the process was spawned for (a root daemon
// chowns them; any other daemon cannot give files away, so they stay its
// own): that record outlives the daemon, and says who may read the logs
// and signal the process after a restart (directory/src/service/caller.h).
//
// Thread-safe (no state besides the directory's path).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/posix.h"
#include "tocl/directory/v1/directory.pb.h"
#include "tocl/gid.h"
#include "tocl/status.h"

namespace tocl::daemon::spawn {

namespace pb = ::tocl::directory::v1;

class LogFiles {
 public:
  // Creates `dir` (0750) if needed.
  static Result<LogFiles> Open(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string PathOf(Gid process, pb::LogStream stream) const;

  // Creates (0640, truncated, append-only) both files of `process`: stdout
  // and stderr, close-on-exec (the spawner dup2s them into the child),
  // owned by `spawned_for` when this daemon is root.
  Result<std::pair<Fd, Fd>> Create(Gid process, uid_t spawned_for) const;
  // The owner of `process`'s stdout file; nullopt when it has none.
  std::optional<uid_t> OwnerOf(Gid process) const;

  // Up to `max_bytes` of the file from `offset` (nothing past the end), and
  // the file's size. Data dropped by Cap is skipped: the chunk starts at
  // the first byte kept at or after `offset`. NotFound when `process` has
  // no such file.
  struct Chunk {
    std::string data;
    uint64_t size = 0;
    uint64_t offset = 0;  // where `data` starts
  };
  Result<Chunk> Read(Gid process, pb::LogStream stream, uint64_t offset, size_t max_bytes) const;

  // Frees the head of both files of `process` so that about their last
  // `max_bytes` stay (whole blocks: up to one block more). Ok when they do
  // not exist; Unimplemented when the file system cannot punch holes.
  Status Cap(Gid process, uint64_t max_bytes) const;

  // Deletes both files of `process`; ok when they do not exist.
  Status Remove(Gid process) const;

  // The processes of `host` that have a file here (parsed from the names;
  // other files are ignored).
  Result<std::vector<Gid>> List(Gid host) const;

 private:
  explicit LogFiles(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace tocl::daemon::spawn
