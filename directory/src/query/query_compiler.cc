#include "query/query_compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <utility>

#include "store/schema.h"

namespace tocl::directory::query {
namespace {

int64_t StoredState(EntityState state) {
  return state == EntityState::kExited ? kStateExited : kStateRunning;
}

// The gids of one host or process form one contiguous range, and both ends
// have the same sign once stored as int64, so BETWEEN works on the stored
// values even for hosts >= 32768 (which are negative).
constexpr uint64_t kHostSpan = (uint64_t{1} << (Gid::kProcessBits + Gid::kThreadBits)) - 1;
constexpr uint64_t kProcessSpan = Gid::kMaxThread;

int64_t Stored(uint64_t raw) {
  return std::bit_cast<int64_t>(raw);
}

EntityKind KindOf(Table table) {
  switch (table) {
    case Table::kHosts:
      return EntityKind::kHost;
    case Table::kProcesses:
      return EntityKind::kProcess;
    case Table::kThreads:
      return EntityKind::kThread;
  }
  return EntityKind::kHost;
}

bool HasKind(Gid gid, EntityKind kind) {
  switch (kind) {
    case EntityKind::kHost:
      return gid.is_host();
    case EntityKind::kProcess:
      return gid.is_process();
    case EntityKind::kThread:
      return gid.is_thread();
  }
  return false;
}

// Only a hand-built Expr gets these: Parse() never builds one.
Status Malformed(std::string_view what) {
  return InvalidArgument(fmt::format("query: malformed expression: {}", what));
}

// The query with one table's kind substituted in: comparisons that are
// constant for that table are folded away, the rest stay predicates.
struct Condition {
  enum class Type : uint8_t { kTrue, kFalse, kPredicate, kAnd, kOr, kNot };

  Type type = Type::kTrue;
  const Comparison* comparison = nullptr;  // kPredicate: its positive (= or ~) form
  std::vector<Condition> operands;
};

Condition Node(Condition::Type type, const Comparison* comparison = nullptr) {
  Condition condition;
  condition.type = type;
  condition.comparison = comparison;
  return condition;
}

Condition Constant(bool value) {
  return Node(value ? Condition::Type::kTrue : Condition::Type::kFalse);
}

Condition Negate(Condition condition) {
  switch (condition.type) {
    case Condition::Type::kTrue:
      return Constant(false);
    case Condition::Type::kFalse:
      return Constant(true);
    case Condition::Type::kNot:
      return std::move(condition.operands.front());
    default: {
      Condition result = Node(Condition::Type::kNot);
      result.operands.push_back(std::move(condition));
      return result;
    }
  }
}

Result<Condition> FoldComparison(const Comparison& comparison, Table table) {
  const bool is_glob = comparison.op == Op::kGlob || comparison.op == Op::kNotGlob;
  if (is_glob && comparison.field != Field::kName && comparison.field != Field::kAttribute) {
    return Malformed("'~' is only allowed on name and attributes");
  }
  const Condition predicate = Node(Condition::Type::kPredicate, &comparison);
  Condition positive;
  switch (comparison.field) {
    case Field::kKind:
      positive = Constant(KindOf(table) == comparison.kind);
      break;
    case Field::kProcess:
      // A host is never inside a process's range.
      positive = table == Table::kHosts ? Constant(false) : predicate;
      break;
    case Field::kPid:
      positive = table == Table::kProcesses ? predicate : Constant(false);
      break;
    case Field::kGid:
      positive = HasKind(comparison.gid, KindOf(table)) ? predicate : Constant(false);
      break;
    case Field::kName:
    case Field::kState:
    case Field::kHost:
    case Field::kAttribute:
      positive = predicate;
      break;
  }
  // "!=" and "!~" are "not (=)" and "not (~)" on every field, so an entity
  // without the value (a thread's pid, a missing attribute) matches them.
  const bool negated = comparison.op == Op::kNotEqual || comparison.op == Op::kNotGlob;
  return negated ? Negate(std::move(positive)) : positive;
}

// `driver` is already enforced by the join, so it folds to true here.
Result<Condition> Fold(const Expr& expr, Table table, const Comparison* driver) {
  switch (expr.type) {
    case Expr::Type::kComparison:
      if (&expr.comparison == driver) return Constant(true);
      return FoldComparison(expr.comparison, table);
    case Expr::Type::kNot: {
      if (expr.operands.size() != 1) return Malformed("'not' needs exactly one operand");
      TOCL_ASSIGN_OR_RETURN(Condition operand, Fold(expr.operands.front(), table, driver));
      return Negate(std::move(operand));
    }
    case Expr::Type::kAnd:
    case Expr::Type::kOr: {
      if (expr.operands.empty()) return Malformed("'and'/'or' needs operands");
      const bool is_and = expr.type == Expr::Type::kAnd;
      // In an and, false decides and true drops out; in an or, the reverse.
      const Condition::Type decides = is_and ? Condition::Type::kFalse : Condition::Type::kTrue;
      const Condition::Type neutral = is_and ? Condition::Type::kTrue : Condition::Type::kFalse;
      Condition result = Node(is_and ? Condition::Type::kAnd : Condition::Type::kOr);
      for (const Expr& operand_expr : expr.operands) {
        TOCL_ASSIGN_OR_RETURN(Condition operand, Fold(operand_expr, table, driver));
        if (operand.type == decides) return operand;
        if (operand.type == neutral) continue;
        result.operands.push_back(std::move(operand));
      }
      if (result.operands.empty()) return Node(neutral);
      if (result.operands.size() == 1) return std::move(result.operands.front());
      return result;
    }
  }
  return Malformed("unknown expression type");
}

// Adds a parameter and returns its "?N".
std::string Bind(std::vector<Param>& params, Param value) {
  params.push_back(std::move(value));
  return fmt::format("?{}", kFirstParam + static_cast<int>(params.size()) - 1);
}

std::string RenderPredicate(const Comparison& c, std::vector<Param>& params) {
  const bool glob = c.op == Op::kGlob || c.op == Op::kNotGlob;
  const std::string_view match = glob ? "GLOB" : "=";
  switch (c.field) {
    case Field::kName:
      return fmt::format("e.name {} {}", match, Bind(params, c.value));
    case Field::kState:
      return fmt::format("e.state = {}", Bind(params, StoredState(c.state)));
    case Field::kPid:
      return fmt::format("e.os_pid = {}", Bind(params, c.pid));
    case Field::kGid:
      return fmt::format("e.gid = {}", Bind(params, Stored(c.gid.raw())));
    case Field::kHost:
      if (c.gid.is_null()) {
        // By name: compare host indexes. ">>" is arithmetic on the negative
        // ids of hosts >= 32768, hence the mask on both sides.
        return fmt::format(
            "((e.gid >> 48) & 65535) IN (SELECT (h.gid >> 48) & 65535 FROM hosts h WHERE "
            "h.name = {})",
            Bind(params, c.value));
      } else {
        const uint64_t first = c.gid.host().raw();
        std::string low = Bind(params, Stored(first));
        return fmt::format("e.gid BETWEEN {} AND {}", low, Bind(params, Stored(first | kHostSpan)));
      }
    case Field::kProcess: {
      const uint64_t first = c.gid.raw();
      std::string low = Bind(params, Stored(first));
      return fmt::format("e.gid BETWEEN {} AND {}", low,
                         Bind(params, Stored(first | kProcessSpan)));
    }
    case Field::kAttribute: {
      std::string key = Bind(params, c.key);
      return fmt::format(
          "EXISTS (SELECT 1 FROM attributes a WHERE a.entity = e.gid AND a.key = {} AND a.value {} "
          "{})",
          key, match, Bind(params, c.value));
    }
    case Field::kKind:
      break;  // always folded
  }
  return "0";
}

// How many NOTs and and/or groups Render() nests inside each other.
int Depth(const Condition& condition) {
  int deepest = 0;
  for (const Condition& operand : condition.operands) deepest = std::max(deepest, Depth(operand));
  return condition.operands.empty() ? 0 : deepest + 1;
}

std::string Render(const Condition& condition, std::vector<Param>& params) {
  switch (condition.type) {
    case Condition::Type::kTrue:
      return "1";
    case Condition::Type::kFalse:
      return "0";
    case Condition::Type::kPredicate:
      return RenderPredicate(*condition.comparison, params);
    case Condition::Type::kNot:
      return "NOT (" + Render(condition.operands.front(), params) + ")";
    case Condition::Type::kAnd:
    case Condition::Type::kOr: {
      // The deepest operand first: SQLite's parser keeps what lies left of
      // an open parenthesis on a stack of 100 entries, about three per level
      // when the nesting comes last ("(a OR (b AND (c OR ..." overflows at
      // some 26 levels) but one when it comes first, so the 32 levels
      // Parse() allows fit. AND and OR do not care about the order.
      std::vector<const Condition*> operands;
      for (const Condition& operand : condition.operands) operands.push_back(&operand);
      std::stable_sort(
          operands.begin(), operands.end(),
          [](const Condition* a, const Condition* b) { return Depth(*a) > Depth(*b); });
      const std::string_view separator = condition.type == Condition::Type::kAnd ? " AND " : " OR ";
      std::string sql = "(";
      for (size_t i = 0; i < operands.size(); ++i) {
        if (i > 0) sql += separator;
        sql += Render(*operands[i], params);
      }
      return sql + ")";
    }
  }
  return "0";
}

// The first attribute equality reachable from the root through and-nodes
// only: every match of the query has that attribute, so the query can walk
// that attribute's index range instead of the whole table.
const Comparison* FindDriver(const Expr& expr) {
  if (expr.type == Expr::Type::kComparison) {
    const Comparison& c = expr.comparison;
    return c.field == Field::kAttribute && c.op == Op::kEqual ? &c : nullptr;
  }
  if (expr.type != Expr::Type::kAnd) return nullptr;
  for (const Expr& operand : expr.operands) {
    if (const Comparison* driver = FindDriver(operand)) return driver;
  }
  return nullptr;
}

}  // namespace

std::string_view TableName(Table table) {
  switch (table) {
    case Table::kHosts:
      return "hosts";
    case Table::kProcesses:
      return "processes";
    case Table::kThreads:
      return "threads";
  }
  return "?";
}

// The entity kind stored in attributes.kind for a table's rows (a fixed
// number in the SQL text, like the table name: not a user value).
int64_t KindNumber(Table table) {
  switch (table) {
    case Table::kHosts:
      return kKindHost;
    case Table::kProcesses:
      return kKindProcess;
    case Table::kThreads:
      return kKindThread;
  }
  return 0;
}

Result<std::vector<TableQuery>> Compile(const Expr& expr) {
  const Comparison* const expr_driver = FindDriver(expr);
  std::vector<TableQuery> queries;
  for (Table table : {Table::kHosts, Table::kProcesses, Table::kThreads}) {
    // The driver walks only this table's kind in the index (the kind column
    // of attributes_by_value), so a role a million threads share costs
    // nothing when the processes or hosts are queried.
    const Comparison* const driver = expr_driver;
    TOCL_ASSIGN_OR_RETURN(Condition condition, Fold(expr, table, driver));
    if (condition.type == Condition::Type::kFalse) continue;
    TableQuery query;
    query.table = table;
    if (driver != nullptr) {
      // Bound first so that the key and value are ?3 and ?4.
      const std::string key = Bind(query.params, driver->key);
      const std::string value = Bind(query.params, driver->value);
      const std::string where = Render(condition, query.params);
      query.sql = fmt::format(
          "SELECT e.gid FROM attributes d CROSS JOIN {} e ON e.gid = d.entity WHERE d.key = {} AND "
          "d.value = {} AND d.kind = {} AND d.entity > ?1 AND ({}) ORDER BY d.entity LIMIT ?2",
          TableName(table), key, value, KindNumber(table), where);
    } else {
      const std::string where = Render(condition, query.params);
      query.sql =
          fmt::format("SELECT e.gid FROM {} e WHERE e.gid > ?1 AND ({}) ORDER BY e.gid LIMIT ?2",
                      TableName(table), where);
    }
    queries.push_back(std::move(query));
  }
  return queries;
}

}  // namespace tocl::directory::query
