#include "support/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <utility>

namespace tocl::cli {

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {
  for (std::string& cell : header_) cell = EscapeCell(cell);
}

void Table::AddRow(std::vector<std::string> cells) {
  assert(cells.size() <= header_.size() && "a row has more cells than the header");
  cells.resize(header_.size());
  for (std::string& cell : cells) cell = EscapeCell(cell);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> widths(header_.size());
  for (size_t i = 0; i < header_.size(); ++i) widths[i] = DisplayWidth(header_[i]);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  std::string out = FormatRow(header_, widths);
  for (const auto& row : rows_) out += FormatRow(row, widths);
  return out;
}

void Table::Print(std::FILE* out) const {
  const std::string text = Render();
  std::fwrite(text.data(), 1, text.size(), out);
}

std::string FormatRow(std::span<const std::string> cells, std::span<const size_t> widths) {
  std::string line;
  // Trailing empty cells would only add blanks at the end of the line.
  size_t last = cells.size();
  while (last > 0 && cells[last - 1].empty()) --last;
  for (size_t i = 0; i < last; ++i) {
    if (i > 0) line += "  ";
    line += cells[i];
    if (i + 1 < last && i < widths.size()) {
      const size_t width = DisplayWidth(cells[i]);
      if (width < widths[i]) line.append(widths[i] - width, ' ');
    }
  }
  line += '\n';
  return line;
}

size_t DisplayWidth(std::string_view text) {
  // Every byte that is not a UTF-8 continuation byte (10xxxxxx) starts a
  // code point.
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

std::string EscapeCell(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace tocl::cli
