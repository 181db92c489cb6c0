// Sets of message sequence numbers written as ranges ("0-1839,1845,1850-9999",
// "-" when empty): how tocl-stream-ledger reports which messages of a thread
// pair its sender saw sent or failed and its receiver got, and how the kill
// test and the soak (tests/soak/) compare the two.
//
//   SeqRanges sent;
//   for (uint64_t seq : {0, 1, 2, 5}) sent.Add(seq);      // ascending
//   sent.ToString();                                      // "0-2,5"
//   SeqRanges got = *SeqRanges::Parse("0-2");
//   sent.Minus(got).Count();                              // 1: message 5
//   got.Contains(1);                                      // true
//
// Header-only: helper programs and test binaries include it.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tocl::testing {

class SeqRanges {
 public:
  // Adds `seq`, which must be larger than every seq added before.
  void Add(uint64_t seq) {
    if (!ranges_.empty() && ranges_.back().second + 1 == seq) {
      ranges_.back().second = seq;
    } else {
      ranges_.emplace_back(seq, seq);
    }
  }

  uint64_t Count() const {
    uint64_t count = 0;
    for (const auto& [first, last] : ranges_) count += last - first + 1;
    return count;
  }
  bool empty() const { return ranges_.empty(); }
  bool Contains(uint64_t seq) const {
    // The first range that ends at or after `seq`.
    auto range = std::lower_bound(
        ranges_.begin(), ranges_.end(), seq,
        [](const std::pair<uint64_t, uint64_t>& r, uint64_t value) { return r.second < value; });
    return range != ranges_.end() && range->first <= seq;
  }
  // The smallest seq in the set larger than or equal to `seq`.
  std::optional<uint64_t> FirstFrom(uint64_t seq) const {
    for (const auto& [first, last] : ranges_) {
      if (last >= seq) return std::max(first, seq);
    }
    return std::nullopt;
  }

  // The seqs of this set that `other` lacks / also has.
  SeqRanges Minus(const SeqRanges& other) const { return Combine(other, false); }
  SeqRanges Intersect(const SeqRanges& other) const { return Combine(other, true); }

  std::string ToString() const {
    if (ranges_.empty()) return "-";
    std::string text;
    for (const auto& [first, last] : ranges_) {
      if (!text.empty()) text += ',';
      text += std::to_string(first);
      if (last != first) text += '-' + std::to_string(last);
    }
    return text;
  }

  // The inverse of ToString; nullopt for anything else (ranges out of order
  // or overlapping included).
  static std::optional<SeqRanges> Parse(std::string_view text) {
    SeqRanges set;
    if (text == "-") return set;
    while (!text.empty()) {
      const size_t comma = std::min(text.find(','), text.size());
      std::string_view part = text.substr(0, comma);
      text.remove_prefix(std::min(comma + 1, text.size()));
      const size_t dash = part.find('-');
      auto first = Number(part.substr(0, dash));
      auto last = dash == std::string_view::npos ? first : Number(part.substr(dash + 1));
      if (!first || !last || *last < *first) return std::nullopt;
      if (!set.ranges_.empty() && set.ranges_.back().second >= *first) return std::nullopt;
      set.ranges_.emplace_back(*first, *last);
    }
    return set;
  }

 private:
  static std::optional<uint64_t> Number(std::string_view text) {
    uint64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
      return std::nullopt;
    }
    return value;
  }

  // Walks both sorted range lists once, keeping the parts of this set's
  // ranges that `other` covers (intersect) or does not.
  SeqRanges Combine(const SeqRanges& other, bool intersect) const {
    SeqRanges result;
    auto keep = [&](uint64_t first, uint64_t last) {
      if (first <= last) result.ranges_.emplace_back(first, last);
    };
    size_t j = 0;
    for (auto [first, last] : ranges_) {
      while (j < other.ranges_.size() && other.ranges_[j].second < first) ++j;
      uint64_t at = first;
      for (size_t k = j; k < other.ranges_.size() && other.ranges_[k].first <= last; ++k) {
        const auto [o_first, o_last] = other.ranges_[k];
        if (!intersect && o_first > at) keep(at, o_first - 1);
        if (intersect) keep(std::max(at, o_first), std::min(last, o_last));
        if (o_last >= last) {
          at = last + 1;
          break;
        }
        at = std::max(at, o_last + 1);
      }
      if (!intersect && at <= last) keep(at, last);
    }
    return result;
  }

  std::vector<std::pair<uint64_t, uint64_t>> ranges_;  // disjoint, ascending
};

}  // namespace tocl::testing
