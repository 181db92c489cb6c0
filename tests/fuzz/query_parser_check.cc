// The directory's query language (directory/src/query): Parse refuses bad
// text with "query: at position N: ...", and an accepted query's canonical
// form (ToString) parses back to the same query; both compile to the same
// SQL, which SQLite prepares against the real schema and runs; and a query
// and its negation split every table of a small directory between them.
#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "check_support.h"
#include "fuzz_checks.h"
#include "query/query_compiler.h"
#include "query/query_parser.h"
#include "store/schema.h"
#include "store/sqlite.h"

namespace tocl::fuzz {
namespace {

using directory::query::Comparison;
using directory::query::Compile;
using directory::query::Expr;
using directory::query::Param;
using directory::query::Parse;
using directory::query::Table;
using directory::query::TableName;
using directory::query::TableQuery;
using directory::query::ToString;

// A query error is "query: at position N: <what>" with N inside the text.
Status CheckError(std::string_view text, const Status& error) {
  TOCL_FUZZ_EXPECT(error.code() == StatusCode::kInvalidArgument, "'{}': {}", Escaped(text),
                   error.ToString());
  constexpr std::string_view kPrefix = "query: at position ";
  const std::string& message = error.message();
  TOCL_FUZZ_EXPECT(message.starts_with(kPrefix), "'{}': {}", Escaped(text), Escaped(message));
  size_t position = 0;
  const char* digits = message.data() + kPrefix.size();
  const char* end = message.data() + message.size();
  const auto [after, ec] = std::from_chars(digits, end, position);
  TOCL_FUZZ_EXPECT(
      ec == std::errc() && std::string_view(after, end).starts_with(": ") && after + 2 < end,
      "'{}': {}", Escaped(text), Escaped(message));
  TOCL_FUZZ_EXPECT(position <= text.size(), "'{}' ({} bytes): {}", Escaped(text), text.size(),
                   Escaped(message));
  return Status::Ok();
}

void CollectComparisons(const Expr& expr, std::vector<const Comparison*>& out) {
  if (expr.type == Expr::Type::kComparison) {
    out.push_back(&expr.comparison);
    return;
  }
  for (const Expr& operand : expr.operands) CollectComparisons(operand, out);
}

// How deeply a comparison is nested: the nots and and/or groups around it,
// as ToString writes them.
int CanonicalDepth(const Expr& expr) {
  int deepest = 0;
  for (const Expr& operand : expr.operands) deepest = std::max(deepest, CanonicalDepth(operand));
  return expr.type == Expr::Type::kComparison ? 0 : deepest + 1;
}

// A small directory with the real schema: hosts >= 32768 (negative when
// stored), a host named like an id, empty names and values, names that
// are glob characters.
class SampleDirectory {
 public:
  // Built once, for the life of the process.
  static Result<SampleDirectory*> Get() {
    static Result<std::unique_ptr<SampleDirectory>> instance = Create();
    if (!instance.ok()) return instance.status();
    return instance->get();
  }

  // The gids `query` returns, in the order it returns them.
  Result<std::vector<int64_t>> Run(const TableQuery& query) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_.get(), query.sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
      return Internal(fmt::format("SQLite refuses the compiled SQL: {}: {}",
                                  sqlite3_errmsg(db_.get()), query.sql));
    }
    std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> statement(raw, sqlite3_finalize);
    // Every parameter the SQL uses is bound, and nothing else.
    const int expected = directory::query::kFirstParam - 1 + static_cast<int>(query.params.size());
    if (sqlite3_bind_parameter_count(raw) != expected) {
      return Internal(fmt::format("the SQL has {} parameters, the compiler binds {}: {}",
                                  sqlite3_bind_parameter_count(raw), expected, query.sql));
    }
    std::vector<Param> params = {std::numeric_limits<int64_t>::min(), int64_t{-1}};
    params.insert(params.end(), query.params.begin(), query.params.end());
    for (size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      if (const int64_t* number = std::get_if<int64_t>(&params[i])) {
        sqlite3_bind_int64(raw, index, *number);
      } else {
        const std::string& text = std::get<std::string>(params[i]);
        sqlite3_bind_text(raw, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
      }
    }
    return Rows(raw, query.sql);
  }

  Result<std::vector<int64_t>> All(Table table) {
    const std::string sql = fmt::format("SELECT gid FROM {} ORDER BY gid", TableName(table));
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
      return Internal(fmt::format("{}: {}", sqlite3_errmsg(db_.get()), sql));
    }
    std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> statement(raw, sqlite3_finalize);
    return Rows(raw, sql);
  }

 private:
  explicit SampleDirectory(directory::Database db) : db_(std::move(db)) {}

  static Result<std::unique_ptr<SampleDirectory>> Create() {
    TOCL_ASSIGN_OR_RETURN(directory::Database db,
                          directory::Database::Open(":memory:", directory::OpenMode::kReadWrite));
    TOCL_RETURN_IF_ERROR(directory::Migrate(db));
    std::string sql;
    const auto id = [](const char* text) { return directory::StoredGid(*Gid::Parse(text)); };
    for (const auto& [gid, name, state] : {std::tuple{"h1", "alpha", 1},
                                           {"h4", "a", 1},
                                           {"h40000", "big", 2},
                                           {"h65535", "h1", 1}}) {
      sql +=
          fmt::format("INSERT INTO hosts(gid, name, state, started_at_us) VALUES({}, '{}', {}, 0);",
                      id(gid), name, state);
    }
    for (const auto& [gid, name, pid, state] : {std::tuple{"h1.p1", "indexer-1", 4711, 1},
                                                {"h1.p2", "a", 1, 2},
                                                {"h4.p1", "main", 7, 1},
                                                {"h40000.p1", "x", 99, 2},
                                                {"h65535.p7", "", 0, 1}}) {
      sql += fmt::format(
          "INSERT INTO processes(gid, name, os_pid, state, started_at_us) "
          "VALUES({}, '{}', {}, {}, 0);",
          id(gid), name, pid, state);
    }
    for (const auto& [gid, name, state] : {std::tuple{"h1.p1.t1", "main", 1},
                                           {"h1.p1.t2", "tmp 1", 1},
                                           {"h1.p2.t1", "a", 2},
                                           {"h4.p1.t1", "1", 1},
                                           {"h40000.p1.t1", "*", 2},
                                           {"h65535.p7.t3", "[x]", 1}}) {
      sql += fmt::format(
          "INSERT INTO threads(gid, name, state, started_at_us) VALUES({}, '{}', {}, 0);", id(gid),
          name, state);
    }
    for (const auto& [gid, key, value] : {std::tuple{"h1", "rack", "r1"},
                                          {"h4", "a", "1"},
                                          {"h65535", "a", ""},
                                          {"h1.p1", "role", "merger"},
                                          {"h4.p1", "a", "b"},
                                          {"h1.p1.t1", "role", "merger"},
                                          {"h1.p1.t1", "a", "1"},
                                          {"h4.p1.t1", "role", "a"},
                                          {"h40000.p1.t1", "a", "1"},
                                          {"h65535.p7.t3", "x", "*"}}) {
      sql += fmt::format(
          "INSERT INTO attributes(entity, key, value, kind) VALUES({}, '{}', '{}', {});", id(gid),
          key, value, directory::KindOf(*Gid::Parse(gid)));
    }
    TOCL_RETURN_IF_ERROR(db.Exec(sql));
    return std::unique_ptr<SampleDirectory>(new SampleDirectory(std::move(db)));
  }

  Result<std::vector<int64_t>> Rows(sqlite3_stmt* statement, std::string_view sql) {
    std::vector<int64_t> rows;
    int rc = SQLITE_OK;
    while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
      rows.push_back(sqlite3_column_int64(statement, 0));
    }
    if (rc != SQLITE_DONE) {
      return Internal(
          fmt::format("running the SQL failed: {}: {}", sqlite3_errmsg(db_.get()), sql));
    }
    return rows;
  }

  directory::Database db_;
};

// Whether two compilations are the same SQL with the same parameters.
bool SameQueries(const std::vector<TableQuery>& a, const std::vector<TableQuery>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const TableQuery& x, const TableQuery& y) {
                      return x.table == y.table && x.sql == y.sql && x.params == y.params;
                    });
}

// The compiled query against the sample directory: rows in id order, and a
// query and its negation split each table between them (the language is
// two-valued: "!=" is "not =", a missing attribute is simply not equal).
Status CheckCompiled(std::string_view text, const Expr& expr,
                     const std::vector<TableQuery>& queries) {
  for (size_t i = 1; i < queries.size(); ++i) {
    TOCL_FUZZ_EXPECT(queries[i - 1].table < queries[i].table, "'{}'", Escaped(text));
  }
  Expr negated;
  negated.type = Expr::Type::kNot;
  negated.operands.push_back(expr);
  Result<std::vector<TableQuery>> negated_queries = Compile(negated);
  TOCL_FUZZ_EXPECT(negated_queries.ok(), "'{}': {}", Escaped(text),
                   negated_queries.status().ToString());

  TOCL_ASSIGN_OR_RETURN(SampleDirectory * directory, SampleDirectory::Get());
  for (Table table : {Table::kHosts, Table::kProcesses, Table::kThreads}) {
    // The rows of `table` that one compilation returns (none when the
    // compiler left the table out).
    const auto rows_of =
        [&](const std::vector<TableQuery>& compiled) -> Result<std::vector<int64_t>> {
      for (const TableQuery& query : compiled) {
        if (query.table != table) continue;
        TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> rows, directory->Run(query));
        TOCL_FUZZ_EXPECT(std::is_sorted(rows.begin(), rows.end()) &&
                             std::adjacent_find(rows.begin(), rows.end()) == rows.end(),
                         "'{}': rows out of order: {}", Escaped(text), query.sql);
        return rows;
      }
      return std::vector<int64_t>{};
    };
    Result<std::vector<int64_t>> matched = rows_of(queries);
    TOCL_FUZZ_EXPECT(matched.ok(), "'{}': {}", Escaped(text), matched.status().message());
    Result<std::vector<int64_t>> unmatched = rows_of(*negated_queries);
    TOCL_FUZZ_EXPECT(unmatched.ok(), "not '{}': {}", Escaped(text), unmatched.status().message());
    TOCL_ASSIGN_OR_RETURN(std::vector<int64_t> all, directory->All(table));
    std::vector<int64_t> both;
    std::merge(matched->begin(), matched->end(), unmatched->begin(), unmatched->end(),
               std::back_inserter(both));
    TOCL_FUZZ_EXPECT(both == all,
                     "'{}' and its negation do not split the {} ({} + {} rows of {}): {}",
                     Escaped(text), TableName(table), matched->size(), unmatched->size(),
                     all.size(), ToString(expr));
  }
  return Status::Ok();
}

}  // namespace

Result<Verdict> CheckQueryParser(std::span<const std::byte> input) {
  const std::string_view text = AsText(input);
  Result<Expr> parsed = Parse(text);
  if (!parsed.ok()) {
    TOCL_RETURN_IF_ERROR(CheckError(text, parsed.status()));
    return Verdict::kRejected;
  }
  const Expr& expr = *parsed;

  std::vector<const Comparison*> comparisons;
  CollectComparisons(expr, comparisons);
  TOCL_FUZZ_EXPECT(
      !comparisons.empty() && comparisons.size() <= size_t{directory::query::kMaxComparisons},
      "'{}': {} comparisons", Escaped(text), comparisons.size());
  // The nesting limit holds for the query as built, not only as written.
  TOCL_FUZZ_EXPECT(CanonicalDepth(expr) <= directory::query::kMaxNesting, "'{}': depth {}",
                   Escaped(text), CanonicalDepth(expr));
  // Each comparison remembers where its field starts.
  for (const Comparison* comparison : comparisons) {
    Expr alone;
    alone.comparison = *comparison;
    const std::string written = ToString(alone);
    const std::string_view field =
        std::string_view(written).substr(0, written.find_first_of("=!~"));
    TOCL_FUZZ_EXPECT(std::string_view(text).substr(comparison->position).starts_with(field),
                     "'{}': '{}' is not at position {}", Escaped(text), Escaped(field),
                     comparison->position);
  }

  Result<std::vector<TableQuery>> compiled = Compile(expr);
  TOCL_FUZZ_EXPECT(compiled.ok(), "'{}': {}", Escaped(text), compiled.status().ToString());

  // The canonical form means the same: it parses to a query with the same
  // canonical form, which compiles to the same SQL. It is longer than the
  // query (quotes, spaces, parentheses), so it may cross the length limit
  // the query stayed within (query_parser.h): then that is the error, and
  // the limit must really have been crossed.
  const std::string canonical = ToString(expr);
  Result<Expr> reparsed = Parse(canonical);
  if (!reparsed.ok()) {
    const std::string why = reparsed.status().message();
    TOCL_FUZZ_EXPECT(why.ends_with(fmt::format("query is longer than {} bytes",
                                               directory::query::kMaxQueryBytes)) &&
                         canonical.size() > directory::query::kMaxQueryBytes,
                     "'{}' -> '{}' ({} bytes): {}", Escaped(text), Escaped(canonical),
                     canonical.size(), Escaped(why));
  } else {
    const std::string again = ToString(*reparsed);
    TOCL_FUZZ_EXPECT(again == canonical, "'{}' -> '{}' -> '{}'", Escaped(text), Escaped(canonical),
                     Escaped(again));
    Result<std::vector<TableQuery>> recompiled = Compile(*reparsed);
    TOCL_FUZZ_EXPECT(recompiled.ok() && SameQueries(*compiled, *recompiled), "'{}' -> '{}'",
                     Escaped(text), Escaped(canonical));
  }
  TOCL_RETURN_IF_ERROR(CheckCompiled(text, expr, *compiled));
  return Verdict::kAccepted;
}

}  // namespace tocl::fuzz
