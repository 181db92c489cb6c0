// The entries of a separated list: a network list ("shm, tcp:eth0"), the
// peer daemons ("2=10.0.0.2:7390, 3=..."), a search path ("/bin:/usr/bin").
#pragma once

#include <string_view>
#include <vector>

namespace tocl {

// Whether the spaces around each entry are part of it.
enum class ListSpaces { kTrim, kKeep };

// The non-empty entries of `text` between `separator`s, in order; with
// ListSpaces::kTrim the spaces around each are cut first (an entry of
// spaces is then empty). The views point into `text`.
//
//   SplitList("shm, ,tcp") == {"shm", "tcp"}
//   SplitList("/bin::/usr/bin", ':', ListSpaces::kKeep) == {"/bin", "/usr/bin"}
std::vector<std::string_view> SplitList(std::string_view text, char separator = ',',
                                        ListSpaces spaces = ListSpaces::kTrim);

}  // namespace tocl
