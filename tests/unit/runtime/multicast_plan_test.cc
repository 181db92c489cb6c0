// Where a multicast goes: receivers grouped by host with a relay each, and
// the binomial tree the relays pass the message on along.
#include "runtime/multicast_plan.h"

#include <catch2/catch.hpp>
#include <vector>

namespace tocl::runtime {
namespace {

std::vector<MulticastGroup> Groups(size_t n) {
  std::vector<MulticastGroup> groups;
  for (uint32_t host = 1; host <= n; ++host) {
    groups.push_back(MulticastGroup{Gid::Process(host, 1), {{Gid::Thread(host, 1, 1), host}}});
  }
  return groups;
}

TEST_CASE("receivers are grouped by host, each group's relay the process of its lowest receiver",
          "[multicast]") {
  const std::vector<MulticastGroup> groups = GroupByHost({
      {Gid::Thread(3, 9, 1), 10},
      {Gid::Thread(2, 5, 2), 11},
      {Gid::Thread(3, 4, 7), 12},
      {Gid::Thread(2, 5, 1), 13},
      {Gid::Thread(3, 9, 2), 14},
  });
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].relay == Gid::Process(2, 5));
  CHECK(groups[0].receivers ==
        std::vector<NumberedReceiver>{{Gid::Thread(2, 5, 1), 13}, {Gid::Thread(2, 5, 2), 11}});
  CHECK(groups[1].relay == Gid::Process(3, 4));
  CHECK(groups[1].receivers == std::vector<NumberedReceiver>{{Gid::Thread(3, 4, 7), 12},
                                                             {Gid::Thread(3, 9, 1), 10},
                                                             {Gid::Thread(3, 9, 2), 14}});
  CHECK(GroupByHost({}).empty());
}

TEST_CASE("a node sends ceil(log2(n + 1)) copies, halving what is left each time", "[multicast]") {
  const std::vector<size_t> copies{0, 1, 2, 2, 3, 3, 3, 3, 4};
  for (size_t n = 0; n < copies.size(); ++n) {
    INFO(n << " groups");
    const auto groups = Groups(n);
    const auto subtrees = SplitBinomial(groups);
    CHECK(subtrees.size() == copies[n]);
    size_t covered = 0;
    for (auto subtree : subtrees) {
      CHECK(subtree.data() == groups.data() + covered);  // contiguous, in order
      covered += subtree.size();
    }
    CHECK(covered == n);
  }
  const auto seven = Groups(7);
  const auto subtrees = SplitBinomial(seven);
  REQUIRE(subtrees.size() == 3);
  CHECK(subtrees[0].size() == 4);
  CHECK(subtrees[1].size() == 2);
  CHECK(subtrees[2].size() == 1);
}

TEST_CASE("every group's subtree is known to the sender, so a failed relay's is sent to directly",
          "[multicast]") {
  // 7 groups: 0 takes {0..3} (it passes on to 1 with {1,2} and 3 with {3});
  // 4 takes {4,5} (5 below it); 6 alone.
  CHECK(SubtreeSizes(Groups(7)) == std::vector<size_t>{4, 2, 1, 1, 2, 1, 1});
  CHECK(SubtreeSizes(Groups(1)) == std::vector<size_t>{1});
  CHECK(SubtreeSizes(Groups(2)) == std::vector<size_t>{1, 1});
  CHECK(SubtreeSizes(Groups(3)) == std::vector<size_t>{2, 1, 1});
  // Each relay's own split of its subtree (without itself) is what the
  // sizes say: group 0 passes {1,2} and {3} on.
  const auto seven = Groups(7);
  const auto below = SplitBinomial(std::span<const MulticastGroup>(seven).subspan(1, 3));
  REQUIRE(below.size() == 2);
  CHECK(below[0].size() == 2);
  CHECK(below[1].size() == 1);
}

TEST_CASE("an answer counts only from its group's relay, or as an error from one above it",
          "[multicast]") {
  // 7 groups: 0 holds {0..3} (1 holds {1,2}; 3 alone), 4 holds {4,5}, 6.
  const auto groups = Groups(7);
  const std::vector<size_t> sizes = SubtreeSizes(groups);
  auto relay = [&](size_t g) { return groups[g].relay; };
  // Its own relay: ok or not.
  CHECK(AnsweredGroup(groups, sizes, relay(2), relay(2), true) == size_t{2});
  CHECK(AnsweredGroup(groups, sizes, relay(2), relay(2), false) == size_t{2});
  // An ancestor (0 and 1 are above 2): only an error.
  CHECK(AnsweredGroup(groups, sizes, relay(1), relay(2), false) == size_t{2});
  CHECK(AnsweredGroup(groups, sizes, relay(0), relay(2), false) == size_t{2});
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(1), relay(2), true));
  // Not above it: a sibling, one below it, one of another subtree.
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(3), relay(2), false));
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(2), relay(1), false));
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(4), relay(5), true));
  CHECK(AnsweredGroup(groups, sizes, relay(4), relay(5), false) == size_t{5});
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(4), relay(6), false));
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(0), relay(4), false));
  // A group not in the call, or a process not in the tree.
  CHECK_FALSE(AnsweredGroup(groups, sizes, relay(0), Gid::Process(99, 1), false));
  CHECK_FALSE(AnsweredGroup(groups, sizes, Gid::Process(99, 1), relay(2), false));
}

}  // namespace
}  // namespace tocl::runtime
