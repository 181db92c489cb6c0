#include "command_suggestion.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tocl::cli {
namespace {

// Levenshtein distance, with a swap of two neighbours counted as one edit
// (optimal string alignment): "hsots" is one edit from "hosts".
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string_view> CommandWord(std::span<const char* const> args,
                                            std::span<const std::string_view> options_with_values) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") return std::nullopt;
    if (!arg.starts_with('-')) return arg;
    // "--daemon ADDR" takes the next word; "--daemon=ADDR" does not.
    if (std::find(options_with_values.begin(), options_with_values.end(), arg) !=
        options_with_values.end()) {
      ++i;
    }
  }
  return std::nullopt;
}

std::optional<std::string> NearestCommand(std::string_view word,
                                          std::span<const std::string> commands) {
  // A command cut short ("spawn-t"), when only one command starts so.
  std::optional<std::string> nearest;
  if (word.size() >= 2) {
    size_t starting = 0;
    for (const std::string& command : commands) {
      if (command.starts_with(word)) {
        nearest = command;
        ++starting;
      }
    }
    if (starting == 1) return nearest;
    nearest.reset();
  }
  // A typo: the nearest command by edit distance, if near enough.
  const size_t allowed = std::max<size_t>(1, word.size() / 3);
  size_t best = allowed + 1;
  for (const std::string& command : commands) {
    const size_t distance = EditDistance(word, command);
    if (distance < best) {
      best = distance;
      nearest = command;
    }
  }
  return nearest;
}

}  // namespace tocl::cli
