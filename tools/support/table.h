// An aligned text table for the terminal, as `tocl ps` prints it:
//
//   GID    NAME       PID    STATE
//   h1.p2  indexer-0  41873  running
//
// A header row, then one line per row; every column but the last is padded
// to its widest cell (header included) and columns are separated by two
// spaces, so no line ends in blanks. Widths count UTF-8 code points (wide
// East Asian characters count as one). Control characters in cells are
// escaped ("\n", "\x1b") so that a row is always one line.
//
// A value type, not thread-safe: build it, then Render() or Print() it.
#pragma once

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tocl::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header);

  // Adds one row. Missing cells are empty; cells past the header's width are
  // a programming error (asserted in debug builds) and are dropped.
  void AddRow(std::vector<std::string> cells);

  size_t column_count() const { return header_.size(); }
  size_t row_count() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }

  // The header and every row, each line ending in '\n'.
  std::string Render() const;
  // Writes Render() to `out`.
  void Print(std::FILE* out = stdout) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;  // escaped, padded to column_count()
};

// One line (with '\n') for output that streams and so cannot know the widest
// cell in advance (`tocl watch`): column i is padded to widths[i]; a wider
// cell pushes the rest of its line right. The last column is never padded.
std::string FormatRow(std::span<const std::string> cells, std::span<const size_t> widths);

// The columns `text` takes on a terminal: its UTF-8 code points.
size_t DisplayWidth(std::string_view text);

// `text` with control characters escaped, so that it stays on one line.
std::string EscapeCell(std::string_view text);

}  // namespace tocl::cli
