#include "service/proc_files.h"

#include <algorithm>

#include "core/parse_number.h"

namespace tocl::directory {
namespace {

// The text after "<key>:" on its line of `status`; nullopt without it.
std::optional<std::string_view> StatusLine(std::string_view status, std::string_view key) {
  size_t start = 0;
  while (start < status.size()) {
    size_t end = status.find('\n', start);
    if (end == std::string_view::npos) end = status.size();
    const std::string_view line = status.substr(start, end - start);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':') {
      return line.substr(key.size() + 1);
    }
    start = end + 1;
  }
  return std::nullopt;
}

// The whitespace-separated numbers of `text`; nullopt if any is not one.
template <typename Number>
std::optional<std::vector<Number>> Numbers(std::string_view text) {
  std::vector<Number> numbers;
  size_t i = text.find_first_not_of(" \t");
  while (i != std::string_view::npos) {
    const size_t end = std::min(text.find_first_of(" \t", i), text.size());
    const std::optional<Number> value = ParseNumber<Number>(text.substr(i, end - i));
    if (!value) return std::nullopt;
    numbers.push_back(*value);
    i = text.find_first_not_of(" \t", end);
  }
  return numbers;
}

}  // namespace

std::optional<ProcessUids> ParseUids(std::string_view status) {
  const std::optional<std::string_view> line = StatusLine(status, "Uid");
  if (!line) return std::nullopt;
  const std::optional<std::vector<uid_t>> ids = Numbers<uid_t>(*line);
  if (!ids || ids->size() < 3) return std::nullopt;
  return ProcessUids{.real = (*ids)[0], .effective = (*ids)[1], .saved = (*ids)[2]};
}

std::optional<std::vector<pid_t>> ParseNamespacePids(std::string_view status) {
  const std::optional<std::string_view> line = StatusLine(status, "NSpid");
  if (!line) return std::nullopt;
  std::optional<std::vector<pid_t>> pids = Numbers<pid_t>(*line);
  if (!pids || pids->empty()) return std::nullopt;
  for (pid_t pid : *pids) {
    if (pid <= 0) return std::nullopt;
  }
  return pids;
}

}  // namespace tocl::directory
