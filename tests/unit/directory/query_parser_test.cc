#include "query/query_parser.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

namespace tocl::directory::query {
namespace {

// The canonical form of a query that must parse.
std::string Canonical(std::string_view text) {
  Result<Expr> expr = Parse(text);
  INFO("query: " << text);
  REQUIRE(expr.status().message() == "");
  return ToString(*expr);
}

// The single comparison a query must parse to.
Comparison Single(std::string_view text) {
  Result<Expr> expr = Parse(text);
  INFO("query: " << text);
  REQUIRE(expr.ok());
  REQUIRE(expr->type == Expr::Type::kComparison);
  return expr->comparison;
}

// The error message of a query that must not parse.
std::string Error(std::string_view text) {
  Result<Expr> expr = Parse(text);
  INFO("query: " << text);
  REQUIRE_FALSE(expr.ok());
  CHECK(expr.status().code() == StatusCode::kInvalidArgument);
  return expr.status().message();
}

TEST_CASE("the examples of the language description parse", "[query]") {
  CHECK(Canonical("kind=thread and role=merger and host=h4") ==
        R"((kind="thread" and role="merger" and host="h4"))");
  CHECK(Canonical("name~indexer-*") == R"(name~"indexer-*")");
  CHECK(Canonical("pid=4711") == R"(pid="4711")");
  CHECK(Canonical("state=exited") == R"(state="exited")");
  CHECK(Canonical(R"((role=a or role=b) and not name~"tmp *")") ==
        R"(((role="a" or role="b") and not name~"tmp *"))");
  CHECK(Canonical(R"(role="x' OR 1=1 --")") == R"(role="x' OR 1=1 --")");
}

TEST_CASE("values are resolved to what they mean for their field", "[query]") {
  CHECK(Single("kind=thread").kind == EntityKind::kThread);
  CHECK(Single("kind=process").kind == EntityKind::kProcess);
  CHECK(Single("kind=host").kind == EntityKind::kHost);
  CHECK(Single("state=exited").state == EntityState::kExited);
  CHECK(Single("state=running").state == EntityState::kRunning);
  CHECK(Single("pid=4711").pid == 4711);
  CHECK(Single("gid=h3.p17.t5").gid == Gid::Thread(3, 17, 5));
  CHECK(Single("process=h1.p2").gid == Gid::Process(1, 2));
  CHECK(Single("host=h4").gid == Gid::Host(4));
  CHECK(Single("host=h40000").gid == Gid::Host(40000));

  const Comparison by_name = Single("host=alpha");
  CHECK(by_name.field == Field::kHost);
  CHECK(by_name.gid.is_null());
  CHECK(by_name.value == "alpha");
  // Only a host id reads as an id; any other text is a host name.
  CHECK(Single("host=h1.p2").gid.is_null());

  const Comparison attribute = Single("role~merge*");
  CHECK(attribute.field == Field::kAttribute);
  CHECK(attribute.key == "role");
  CHECK(attribute.op == Op::kGlob);
  CHECK(attribute.value == "merge*");
  CHECK(attribute.position == 0);
}

TEST_CASE("each operator is accepted exactly on the fields that allow it", "[query]") {
  struct Case {
    const char* field;
    const char* value;
    Field parsed;
    bool allows_glob;
  };
  const Case cases[] = {
      {"kind", "thread", Field::kKind, false},      {"name", "x", Field::kName, true},
      {"state", "running", Field::kState, false},   {"host", "h1", Field::kHost, false},
      {"process", "h1.p1", Field::kProcess, false}, {"pid", "1", Field::kPid, false},
      {"gid", "h1.p1.t1", Field::kGid, false},      {"role", "x", Field::kAttribute, true},
  };
  const std::pair<const char*, Op> ops[] = {
      {"=", Op::kEqual}, {"!=", Op::kNotEqual}, {"~", Op::kGlob}, {"!~", Op::kNotGlob}};
  for (const Case& c : cases) {
    for (const auto& [op_text, op] : ops) {
      const std::string text = std::string(c.field) + op_text + c.value;
      INFO("query: " << text);
      const bool glob = op == Op::kGlob || op == Op::kNotGlob;
      if (glob && !c.allows_glob) {
        CHECK(Error(text) == "query: at position " +
                                 std::to_string(std::string_view(c.field).size()) + ": '" +
                                 op_text + "' is not allowed on " + c.field);
      } else {
        const Comparison comparison = Single(text);
        CHECK(comparison.field == c.parsed);
        CHECK(comparison.op == op);
        CHECK(comparison.value == c.value);
      }
    }
  }
}

TEST_CASE("and binds tighter than or, and not tighter than and", "[query]") {
  CHECK(Canonical("a=1 or b=2 and c=3") == R"((a="1" or (b="2" and c="3")))");
  CHECK(Canonical("a=1 and b=2 or c=3") == R"(((a="1" and b="2") or c="3"))");
  CHECK(Canonical("not a=1 and b=2") == R"((not a="1" and b="2"))");
  CHECK(Canonical("not a=1 or not b=2") == R"((not a="1" or not b="2"))");
  CHECK(Canonical("not not a=1") == R"(not not a="1")");
}

TEST_CASE("parentheses group, and chains of one operator stay flat", "[query]") {
  CHECK(Canonical("(a=1 or b=2) and c=3") == R"(((a="1" or b="2") and c="3"))");
  CHECK(Canonical("not (a=1 or b=2)") == R"(not (a="1" or b="2"))");
  CHECK(Canonical("a=1 and (b=2 and c=3)") == R"((a="1" and b="2" and c="3"))");
  CHECK(Canonical("((a=1))") == R"(a="1")");
  CHECK(Canonical("(a=1 or (b=2 or c=3)) or d=4") == R"((a="1" or b="2" or c="3" or d="4"))");
}

TEST_CASE("keywords are case-insensitive but field names are not", "[query]") {
  CHECK(Canonical("a=1 AND b=2 Or NOT c=3") == R"(((a="1" and b="2") or not c="3"))");
  const Comparison upper = Single("Kind=thread");
  CHECK(upper.field == Field::kAttribute);
  CHECK(upper.key == "Kind");
}

TEST_CASE("whitespace between tokens is free", "[query]") {
  CHECK(Canonical("  kind = thread\tand\nrole  =merger ") ==
        R"((kind="thread" and role="merger"))");
  CHECK(Canonical("(a=1)and(b=2)") == R"((a="1" and b="2"))");
  CHECK(Canonical("a != 1") == R"(a!="1")");
}

TEST_CASE("quoted values keep any text and unescape backslash escapes", "[query]") {
  CHECK(Single(R"(name="say \"hi\"")").value == R"(say "hi")");
  CHECK(Single(R"(name='it\'s')").value == "it's");
  CHECK(Single(R"(name="back\\slash")").value == R"(back\slash)");
  CHECK(Single(R"(name='a "b"')").value == R"(a "b")");
  CHECK(Single(R"(name="a 'b'")").value == "a 'b'");
  CHECK(Single(R"(name="")").value == "");
  CHECK(Single(R"(name="and")").value == "and");
  CHECK(Single(R"(name="(x) = y; z")").value == "(x) = y; z");
  CHECK(Single("name=\"caf\xc3\xa9\"").value == "caf\xc3\xa9");
}

TEST_CASE("bare values take the documented characters", "[query]") {
  CHECK(Single("path=/usr/bin:x@y+z").value == "/usr/bin:x@y+z");
  CHECK(Single("name~[ab]?*").value == "[ab]?*");
  CHECK(Single("a.b-c_d=-5").key == "a.b-c_d");
}

TEST_CASE("the canonical form parses back to itself", "[query]") {
  for (const char* text :
       {"kind=thread and role=merger and host=h4", R"((role=a or role=b) and not name~"tmp *")",
        R"(note="a \"quoted\" \\ value" or not (x!~y* and pid!=3))"}) {
    const std::string canonical = Canonical(text);
    CHECK(Canonical(canonical) == canonical);
  }
}

TEST_CASE("malformed queries report what is wrong and where", "[query]") {
  CHECK(Error("role=") == "query: at position 5: expected a value after '='");
  CHECK(Error("name!~") == "query: at position 6: expected a value after '!~'");
  CHECK(Error("role") == "query: at position 4: expected an operator after 'role'");
  CHECK(Error("role x") == "query: at position 5: expected an operator after 'role'");
  CHECK(Error(R"(name="abc)") == "query: at position 5: unterminated quoted value");
  CHECK(Error(R"(name='abc\')") == "query: at position 5: unterminated quoted value");
  CHECK(Error(")") == "query: at position 0: unexpected ')'");
  CHECK(Error("role=a)") == "query: at position 6: unexpected ')'");
  CHECK(Error("role=a and ()") == "query: at position 12: unexpected ')'");
  CHECK(Error("kind=foo") == "query: at position 5: unknown kind 'foo' (host, process, thread)");
  CHECK(Error("state=sleeping") ==
        "query: at position 6: unknown state 'sleeping' (running, exited)");
  CHECK(Error("process=h1") ==
        "query: at position 8: bad process id 'h1': not a process id (e.g. h1.p2)");
  CHECK(Error("process=h1.x") ==
        "query: at position 8: bad process id 'h1.x': bad id 'h1.x': expected 'p' at position 3");
  CHECK(Error("gid=h0") ==
        "query: at position 4: bad gid 'h0': bad id 'h0': host number 0 is reserved (1..65535)");
  CHECK(Error("pid=12x") == "query: at position 4: bad pid '12x' (expected a decimal number)");
  CHECK(Error("pid=-1") == "query: at position 4: bad pid '-1' (expected a decimal number)");
  CHECK(Error("pid=99999999999999999999") ==
        "query: at position 4: bad pid '99999999999999999999' (expected a decimal number)");
  CHECK(Error("kind~thread") == "query: at position 4: '~' is not allowed on kind");
  CHECK(Error("host !~ h1") == "query: at position 5: '!~' is not allowed on host");
  CHECK(Error("(role=a") == "query: at position 7: missing ')' for the '(' at position 0");
  CHECK(Error("role=a and") ==
        "query: at position 10: unexpected end of query, expected a comparison");
  CHECK(Error("not") == "query: at position 3: unexpected end of query, expected a comparison");
  CHECK(Error("role=a or or b=1") ==
        "query: at position 10: unexpected 'or', expected a comparison");
  CHECK(Error("role=a; b=1") ==
        "query: at position 6: unexpected character ';' (quote values with other characters)");
  CHECK(Error("a=1 b=2") ==
        "query: at position 4: expected 'and', 'or' or end of query, found 'b'");
  CHECK(Error("role=a and (b=1 c=2)") ==
        "query: at position 16: expected 'and', 'or' or ')', found 'c'");
  CHECK(Error(R"(name="a\nb")") ==
        R"(query: at position 7: bad escape '\n' in quoted value (use \", \' or \\))");
  CHECK(Error("role=and") ==
        "query: at position 5: expected a value after '=' (quote 'and' to use it as a value)");
  CHECK(Error(R"("role"=x)") ==
        "query: at position 0: expected a field name, found a quoted value");
  CHECK(Error("=x") == "query: at position 0: expected a field name before '='");
  CHECK(Error("a ! b") == "query: at position 2: unexpected '!' (use '!=' or '!~')");
  CHECK(Error("1role=x") ==
        "query: at position 0: bad field name '1role' (letters, digits, '_', '.', '-', starting "
        "with a letter or '_')");
  CHECK(
      Error("name=a\x01") ==
      R"(query: at position 6: unexpected character '\x01' (quote values with other characters))");
}

TEST_CASE("the leftmost error is the one reported", "[query]") {
  CHECK(Error(R"() name="abc)") == "query: at position 0: unexpected ')'");
  CHECK(Error(R"(kind=foo and name="abc)") ==
        "query: at position 5: unknown kind 'foo' (host, process, thread)");
  CHECK(Error(R"(a=1 and name="abc)") == "query: at position 13: unterminated quoted value");
}

TEST_CASE("an empty query is an error at its end", "[query]") {
  CHECK(Error("") == "query: at position 0: empty query");
  CHECK(Error("   ") == "query: at position 3: empty query");
}

TEST_CASE("a query longer than 4096 bytes is refused", "[query]") {
  const std::string longest = "name=" + std::string(kMaxQueryBytes - 5, 'x');
  REQUIRE(longest.size() == 4096);
  CHECK(Single(longest).value.size() == 4091);
  CHECK(Error(longest + "x") == "query: at position 4096: query is longer than 4096 bytes");
}

TEST_CASE("a query with more than 64 comparisons is refused", "[query]") {
  std::string text = "a=1";
  for (int i = 1; i < kMaxComparisons; ++i) text += " or a=1";
  CHECK(Parse(text).ok());
  // Each further comparison starts 7 bytes after the previous one.
  text += " or a=1";
  CHECK(Error(text) == "query: at position 448: more than 64 comparisons");
}

TEST_CASE("nesting deeper than 32 is refused", "[query]") {
  const auto parenthesized = [](int depth) {
    return std::string(depth, '(') + "a=1" + std::string(depth, ')');
  };
  CHECK(Parse(parenthesized(kMaxNesting)).ok());
  CHECK(Error(parenthesized(kMaxNesting + 1)) == "query: at position 32: nesting deeper than 32");

  std::string nots;
  for (int i = 0; i < kMaxNesting; ++i) nots += "not ";
  CHECK(Parse(nots + "a=1").ok());
  CHECK(Error(nots + "not a=1") == "query: at position 128: nesting deeper than 32");

  // 'not' and '(' count together.
  std::string mixed;
  for (int i = 0; i < kMaxNesting / 2; ++i) mixed += "not (";
  CHECK(Parse(mixed + "a=1" + std::string(kMaxNesting / 2, ')')).ok());
  CHECK(Error(mixed + "(a=1)" + std::string(kMaxNesting / 2, ')')) ==
        "query: at position 80: nesting deeper than 32");
}

TEST_CASE("and/or groups count toward the nesting limit, as the canonical form writes them",
          "[query]") {
  // Each "a=1 or b=1 and (" opens an or and an and inside it: two levels.
  const auto groups = [](int parentheses) {
    std::string text;
    for (int i = 0; i < parentheses; ++i) text += "a=1 or b=1 and (";
    return text + "c=1" + std::string(parentheses, ')');
  };
  const std::string deepest = groups(kMaxNesting / 2);
  REQUIRE(Parse(deepest).ok());
  // The canonical form of an accepted query stays within the limit.
  CHECK(Parse(Canonical(deepest)).ok());
  const std::string text = "x=1 and (" + deepest + ")";
  CHECK(Error(text) == "query: at position " + std::to_string(text.rfind("b=1")) +
                           ": nesting deeper than 32 (each 'not' and each group of 'and' or 'or' "
                           "around a comparison counts)");

  // 32 nots under an or: the or is the 33rd level.
  std::string nots = "x=1 or ";
  for (int i = 0; i < kMaxNesting; ++i) nots += "not ";
  CHECK(Error(nots + "y=1").starts_with("query: at position 135: nesting deeper than 32 ("));
}

}  // namespace
}  // namespace tocl::directory::query
