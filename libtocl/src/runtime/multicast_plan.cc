#include "runtime/multicast_plan.h"

#include <algorithm>

namespace tocl::runtime {

std::vector<MulticastGroup> GroupByHost(std::vector<NumberedReceiver> receivers) {
  std::sort(
      receivers.begin(), receivers.end(),
      [](const NumberedReceiver& a, const NumberedReceiver& b) { return a.thread < b.thread; });
  std::vector<MulticastGroup> groups;
  for (const NumberedReceiver& receiver : receivers) {
    if (groups.empty() || groups.back().relay.host() != receiver.thread.host()) {
      groups.push_back(MulticastGroup{receiver.thread.process(), {}});
    }
    groups.back().receivers.push_back(receiver);
  }
  return groups;
}

std::vector<std::span<const MulticastGroup>> SplitBinomial(std::span<const MulticastGroup> groups) {
  std::vector<std::span<const MulticastGroup>> subtrees;
  while (!groups.empty()) {
    const size_t take = (groups.size() + 1) / 2;
    subtrees.push_back(groups.first(take));
    groups = groups.subspan(take);
  }
  return subtrees;
}

namespace {

void MeasureSubtrees(std::span<const MulticastGroup> groups, size_t first,
                     std::vector<size_t>& sizes) {
  size_t at = first;
  for (std::span<const MulticastGroup> subtree : SplitBinomial(groups)) {
    sizes[at] = subtree.size();
    MeasureSubtrees(subtree.subspan(1), at + 1, sizes);
    at += subtree.size();
  }
}

}  // namespace

std::vector<size_t> SubtreeSizes(std::span<const MulticastGroup> groups) {
  std::vector<size_t> sizes(groups.size(), 0);
  MeasureSubtrees(groups, 0, sizes);
  return sizes;
}

std::optional<size_t> AnsweredGroup(std::span<const MulticastGroup> groups,
                                    std::span<const size_t> subtree_sizes, Gid answerer,
                                    Gid for_relay, bool ok) {
  const auto group = std::find_if(groups.begin(), groups.end(),
                                  [&](const MulticastGroup& g) { return g.relay == for_relay; });
  if (group == groups.end()) return std::nullopt;
  const size_t g = static_cast<size_t>(group - groups.begin());
  if (answerer == group->relay) return g;
  if (ok) return std::nullopt;
  for (size_t a = 0; a < g && a < subtree_sizes.size(); ++a) {
    if (a + subtree_sizes[a] > g && answerer == groups[a].relay) return g;
  }
  return std::nullopt;
}

}  // namespace tocl::runtime
