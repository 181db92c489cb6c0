// `tocl keygen DIR --host NAME[=EXTRA,...]... [--days N]`: a cluster's
// credentials (security/keygen.h), with what to do next. Needs no daemon.
#pragma once

#include <string>
#include <vector>

namespace tocl::cli {

struct KeygenCommand {
  std::string directory;
  // "NAME" or "NAME=EXTRA,EXTRA": a host and more names (DNS names or IP
  // literals) its certificate lists.
  std::vector<std::string> hosts;
  int days = 3650;
};

// Writes the files, prints each path and the next steps; exit 0, 2 for
// usage errors (a bad host or name, a host that has credentials already),
// 3 when the files cannot be written.
int RunKeygen(const KeygenCommand& command);

}  // namespace tocl::cli
