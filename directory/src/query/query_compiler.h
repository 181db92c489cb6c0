// Compiles a parsed query into one SQLite statement per table it can match.
//
// Every value from the query is a bound parameter; the SQL text holds only
// fixed fragments and parameter numbers, so no value can change the
// statement. Each statement has one of two shapes:
//
//   SELECT e.gid FROM <table> e WHERE e.gid > ?1 AND (<where>)
//     ORDER BY e.gid LIMIT ?2
//
// or, when the top-level and-chain holds an attribute equality key=value
// (the "driver", the first one written), a walk over just the slice of the
// attributes_by_value index (key, value, kind, entity) that holds that
// key/value for the table's kind, in entity order, so that dense and sparse
// matches among a million threads are both fast, and a value a million
// threads share costs nothing when processes are queried:
//
//   SELECT e.gid FROM attributes d CROSS JOIN <table> e ON e.gid = d.entity
//     WHERE d.key = ?3 AND d.value = ?4 AND d.kind = <1|2|3>
//       AND d.entity > ?1 AND (<where>) ORDER BY d.entity LIMIT ?2
//
// The caller binds ?1 (return gids after this one, as the signed int64 the
// tables store: std::bit_cast<int64_t>(gid.raw())) and ?2 (the row limit),
// then params[i] to ?(i + 3). Gids come back as that same signed int64.
//
//   TOCL_ASSIGN_OR_RETURN(Expr expr, Parse(text));
//   TOCL_ASSIGN_OR_RETURN(std::vector<TableQuery> queries, Compile(expr));
//   for (const TableQuery& q : queries) { prepare q.sql, bind, step... }
//
// A pure function: safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "query/query_ast.h"
#include "tocl/status.h"

namespace tocl::directory::query {

enum class Table : uint8_t { kHosts, kProcesses, kThreads };

// "hosts", "processes", "threads": the SQL table name.
std::string_view TableName(Table table);

// The number of the first parameter Compile() binds; ?1 and ?2 are the
// caller's.
inline constexpr int kFirstParam = 3;

using Param = std::variant<int64_t, std::string>;

struct TableQuery {
  Table table = Table::kHosts;
  std::string sql;
  std::vector<Param> params;  // params[i] binds ?(i + kFirstParam)
};

// One TableQuery per table whose rows the query can match, in the order
// hosts, processes, threads. A table is left out when the query is false for
// every row of it once its kind is known ("kind=thread", "pid=7" on hosts);
// an empty vector means the query matches nothing.
// Expects an Expr from Parse(); a hand-built Expr that breaks the AST's
// shape (operand counts, '~' on a field without it) is InvalidArgument.
Result<std::vector<TableQuery>> Compile(const Expr& expr);

}  // namespace tocl::directory::query
