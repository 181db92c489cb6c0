#include "spawn/run_as.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cerrno>

#include "core/posix.h"

namespace tocl::daemon::spawn {
namespace {

constexpr size_t kMaxLookupBuffer = size_t{1} << 20;

Status CheckName(std::string_view name, std::string_view what) {
  if (name.empty()) return InvalidArgument(fmt::format("{} is empty", what));
  if (name.find('\0') != std::string_view::npos) {
    return InvalidArgument(fmt::format("{} contains a NUL byte", what));
  }
  return Status::Ok();
}

// getpwnam_r / getgrnam_r with a buffer that grows while they say ERANGE
// (it must hold the whole entry); 0 or the errno. `entry`'s strings point
// into `buffer`.
template <typename Entry, typename Lookup>
int LookUpByName(Lookup lookup, const std::string& name, Entry& entry, Entry*& found,
                 std::vector<char>& buffer) {
  buffer.resize(4096);
  int error = 0;
  while ((error = lookup(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE &&
         buffer.size() < kMaxLookupBuffer) {
    buffer.resize(buffer.size() * 2);
  }
  return error;
}

}  // namespace

std::string RunAs::Describe() const {
  return fmt::format("{} (uid {}, gid {}, groups {})", user, uid, gid, fmt::join(groups, ","));
}

Result<RunAs> ResolveRunAs(std::string_view user, std::string_view group) {
  TOCL_RETURN_IF_ERROR(CheckName(user, "spawn run_as"));
  const std::string name(user);
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer;
  const int error = LookUpByName(::getpwnam_r, name, entry, found, buffer);
  if (error != 0) return ErrnoStatus(fmt::format("look up user '{}'", name), error);
  if (found == nullptr) {
    return NotFound(fmt::format("spawn run_as: no user '{}' on this host", name));
  }
  RunAs identity;
  identity.user = name;
  identity.uid = entry.pw_uid;
  identity.gid = entry.pw_gid;
  if (!group.empty()) {
    TOCL_ASSIGN_OR_RETURN(identity.gid, ResolveGroup(group, "spawn run_as_group"));
  }
  // What initgroups(3) would set: the groups listing the user, and `gid`.
  int count = 32;
  std::vector<gid_t> groups;
  for (;;) {
    groups.resize(static_cast<size_t>(count));
    int capacity = count;
    if (::getgrouplist(name.c_str(), identity.gid, groups.data(), &count) >= 0) {
      groups.resize(static_cast<size_t>(count));
      break;
    }
    // count now says how many there are.
    if (count <= capacity) count = capacity * 2;
    if (count > 65536) {
      return FailedPrecondition(fmt::format("user '{}' is in too many groups", name));
    }
  }
  identity.groups = std::move(groups);
  return identity;
}

Result<gid_t> ResolveGroup(std::string_view group, std::string_view what) {
  TOCL_RETURN_IF_ERROR(CheckName(group, what));
  const std::string name(group);
  ::group entry{};
  ::group* found = nullptr;
  std::vector<char> buffer;
  const int error = LookUpByName(::getgrnam_r, name, entry, found, buffer);
  if (error != 0) return ErrnoStatus(fmt::format("look up group '{}'", name), error);
  if (found == nullptr) return NotFound(fmt::format("{}: no group '{}' on this host", what, name));
  return entry.gr_gid;
}

bool InGroup(const RunAs& identity, gid_t gid) {
  return identity.gid == gid ||
         std::find(identity.groups.begin(), identity.groups.end(), gid) != identity.groups.end();
}

}  // namespace tocl::daemon::spawn
