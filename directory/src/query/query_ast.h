// The syntax tree of a directory query ("kind=thread and role=merger").
//
// Parse() (query_parser.h) builds it from text and resolves every value to
// what it means for its field, so an Expr from Parse() is always valid;
// Compile() (query_compiler.h) turns it into SQL. Plain value types: copy
// them freely, share them read-only between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tocl/gid.h"

namespace tocl::directory::query {

// Limits on one query. They bound the parser's recursion and the size of the
// SQL handed to SQLite; beyond them Parse() fails with InvalidArgument.
inline constexpr size_t kMaxQueryBytes = 4096;
inline constexpr int kMaxComparisons = 64;
// '(' and 'not' around a comparison as written, and nots and and/or groups
// around it as parsed ("a=1 or b=1 and (c=1 ...)": two groups per '(').
inline constexpr int kMaxNesting = 32;

// Built-in fields; any other field name is an attribute key.
enum class Field : uint8_t {
  kKind,       // host | process | thread
  kName,       // the entity's name
  kState,      // running | exited
  kHost,       // the entity lies under this host (by id or by name)
  kProcess,    // the process itself and its threads
  kPid,        // a process's OS pid; hosts and threads have none
  kGid,        // the entity's own id
  kAttribute,  // an attribute key=value
};

enum class Op : uint8_t {
  kEqual,     // =
  kNotEqual,  // !=  always "not (=)"
  kGlob,      // ~   SQLite GLOB: * ? [abc], case-sensitive
  kNotGlob,   // !~  always "not (~)"
};

enum class EntityKind : uint8_t { kHost, kProcess, kThread };

// The integers stored in the state columns.
enum class EntityState : uint8_t { kRunning, kExited };

// One "field op value". Which of the resolved members is meaningful depends
// on `field`; the others keep their defaults.
struct Comparison {
  Field field = Field::kAttribute;
  Op op = Op::kEqual;
  std::string key;                            // kAttribute: the attribute key
  std::string value;                          // the value as written, unquoted and unescaped
  EntityKind kind = EntityKind::kHost;        // kKind
  EntityState state = EntityState::kRunning;  // kState
  int64_t pid = 0;                            // kPid
  // kGid and kProcess: the id. kHost: the host's id, or null when `value`
  // is a host name.
  Gid gid;
  size_t position = 0;  // byte offset of the field in the query text
};

struct Expr {
  enum class Type : uint8_t { kComparison, kAnd, kOr, kNot };

  Type type = Type::kComparison;
  Comparison comparison;       // kComparison
  std::vector<Expr> operands;  // kAnd, kOr: two or more; kNot: exactly one
};

}  // namespace tocl::directory::query
