// Who can reach the daemon through its unix socket: file permissions.
// Anyone who can connect can enroll processes and (with a [spawn] allow
// list) start programs, so the socket is 0600 (0660 and owned by
// `socket_group` when that is set) in a directory only the daemon's user
// can change:
// - the state directory (the default place) is made 0700, or 0710 and
//   owned by socket_group: the group may traverse it to the socket but not
//   list it, and the files in it are not readable by the group (the
//   database is made 0600: it holds every process's session token);
// - any other directory (--socket elsewhere) is checked, not changed: it
//   must belong to the daemon's user or root and be writable by nobody
//   else, or the daemon refuses to start (someone who can write there can
//   replace the socket with their own). With socket_group, a directory the
//   group cannot traverse is logged as a warning.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "tocl/status.h"

namespace tocl::daemon {

// Before the socket is bound: sets up or checks its directory as above.
Status PrepareSocketDirectory(const std::string& socket_path, const std::string& state_dir,
                              std::optional<gid_t> socket_group);

// After it is bound: the socket file 0600, or 0660 owned by `socket_group`.
Status RestrictSocketFile(const std::string& socket_path, std::optional<gid_t> socket_group);

// The database and its -wal and -shm files 0600 (SQLite creates them 0644
// less the umask, and gives new -wal and -shm files the database's mode).
Status RestrictDatabaseFiles(const std::string& database_path);

// Sets the process umask for its lifetime (the socket is bound with mode
// 0777 less the umask). The umask is process-wide: while one is held, files
// other threads create get at most the same bits, never more.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask);
  ~ScopedUmask();
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  mode_t previous_;
};

}  // namespace tocl::daemon
