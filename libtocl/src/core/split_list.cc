#include "core/split_list.h"

namespace tocl {

std::vector<std::string_view> SplitList(std::string_view text, char separator, ListSpaces spaces) {
  std::vector<std::string_view> entries;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view entry = text.substr(start, end - start);
    start = end + 1;
    if (spaces == ListSpaces::kTrim) {
      while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
      while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    }
    if (!entry.empty()) entries.push_back(entry);
  }
  return entries;
}

}  // namespace tocl
