// Parses the directory's query language (grammar and semantics in README.md
// next to this file).
//
//   Result<Expr> expr = Parse("kind=thread and role=merger and host=h4");
//   if (!expr.ok()) return expr.status();  // "query: at position 12: ..."
//
// Errors are InvalidArgument with the message "query: at position N: <what>",
// N the 0-based byte offset where the offending token starts (the end of the
// text when the text ends too early). They are the user's mistakes, not the
// directory's, so the parser does not log them; the service returns them.
// Pure functions: safe to call from any thread.
#pragma once

#include <string>
#include <string_view>

#include "query/query_ast.h"
#include "tocl/status.h"

namespace tocl::directory::query {

// Parses `text`, checks every value against its field and enforces the
// limits in query_ast.h.
Result<Expr> Parse(std::string_view text);

// A canonical text form for logs and tests: every and/or in parentheses,
// every value double-quoted. Parse(ToString(e)) means the same as e, with
// one exception: the canonical form is longer than the query it came from
// (quotes, spaces, parentheses, escapes), so for a query near kMaxQueryBytes
// it can be over that limit, and Parse refuses it for its length.
//   ToString(*Parse("a=1 or b=2 and not c~x*")) == "(a=\"1\" or (b=\"2\" and not c~\"x*\"))"
std::string ToString(const Expr& expr);

}  // namespace tocl::directory::query
