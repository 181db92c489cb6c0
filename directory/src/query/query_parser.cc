#include "query/query_parser.h"

#include <fmt/format.h>

#include <charconv>
#include <utility>
#include <vector>

namespace tocl::directory::query {
namespace {

Status ErrorAt(size_t position, std::string_view what) {
  return InvalidArgument(fmt::format("query: at position {}: {}", position, what));
}

// ASCII only: the grammar is defined on bytes, and <cctype> depends on the
// locale.
bool IsLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsFieldStart(char c) {
  return IsLetter(c) || c == '_';
}
bool IsFieldChar(char c) {
  return IsLetter(c) || IsDigit(c) || c == '_' || c == '.' || c == '-';
}
// Field characters are a subset, so one kind of word token serves both.
bool IsBareValueChar(char c) {
  return IsFieldChar(c) || c == ':' || c == '/' || c == '*' || c == '?' || c == '@' || c == '+' ||
         c == '[' || c == ']';
}

// A byte as it can be shown inside quotes in a message.
std::string Printable(char c) {
  if (c >= 0x20 && c < 0x7f) return std::string(1, c);
  return fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
}

enum class TokenType : uint8_t {
  kWord,
  kQuoted,
  kLeftParen,
  kRightParen,
  kEqual,
  kNotEqual,
  kGlob,
  kNotGlob,
  kEnd,
  kError,  // the lexer's error, reported when the parser reaches it
};

struct Token {
  TokenType type = TokenType::kEnd;
  size_t position = 0;
  std::string text;  // kWord: the word; kQuoted: the unescaped value; kError: what is wrong
};

Token LexQuoted(std::string_view text, size_t& i) {
  const size_t start = i;
  const char quote = text[i++];
  std::string value;
  while (i < text.size()) {
    const char c = text[i];
    if (c == quote) {
      ++i;
      return {TokenType::kQuoted, start, std::move(value)};
    }
    if (c == '\\') {
      if (i + 1 == text.size()) break;
      const char escaped = text[i + 1];
      if (escaped != '"' && escaped != '\'' && escaped != '\\') {
        return {TokenType::kError, i,
                fmt::format("bad escape '\\{}' in quoted value (use \\\", \\' or \\\\)",
                            Printable(escaped))};
      }
      value += escaped;
      i += 2;
      continue;
    }
    value += c;
    ++i;
  }
  return {TokenType::kError, start, "unterminated quoted value"};
}

// The whole text as tokens, ending with kEnd or at the first kError. Errors
// become tokens rather than failing here so that the parser reports the
// leftmost problem: a syntax error before a bad character wins.
std::vector<Token> Tokenize(std::string_view text) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (true) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    if (i == text.size()) {
      tokens.push_back({TokenType::kEnd, i, {}});
      return tokens;
    }
    const size_t start = i;
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '(' || c == ')' || c == '=' || c == '~') {
      const TokenType type = c == '('   ? TokenType::kLeftParen
                             : c == ')' ? TokenType::kRightParen
                             : c == '=' ? TokenType::kEqual
                                        : TokenType::kGlob;
      tokens.push_back({type, start, {}});
      ++i;
    } else if (c == '!' && (next == '=' || next == '~')) {
      tokens.push_back({next == '=' ? TokenType::kNotEqual : TokenType::kNotGlob, start, {}});
      i += 2;
    } else if (c == '"' || c == '\'') {
      tokens.push_back(LexQuoted(text, i));
      if (tokens.back().type == TokenType::kError) return tokens;
    } else if (IsBareValueChar(c)) {
      while (i < text.size() && IsBareValueChar(text[i])) ++i;
      tokens.push_back({TokenType::kWord, start, std::string(text.substr(start, i - start))});
    } else {
      std::string what =
          c == '!' ? std::string("unexpected '!' (use '!=' or '!~')")
                   : fmt::format("unexpected character '{}' (quote values with other characters)",
                                 Printable(c));
      tokens.push_back({TokenType::kError, start, std::move(what)});
      return tokens;
    }
  }
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool IsKeyword(const Token& token, std::string_view keyword) {
  return token.type == TokenType::kWord && EqualsIgnoringCase(token.text, keyword);
}

bool IsAnyKeyword(const Token& token) {
  return IsKeyword(token, "and") || IsKeyword(token, "or") || IsKeyword(token, "not");
}

bool IsOperator(const Token& token) {
  return token.type == TokenType::kEqual || token.type == TokenType::kNotEqual ||
         token.type == TokenType::kGlob || token.type == TokenType::kNotGlob;
}

std::string_view OpText(Op op) {
  switch (op) {
    case Op::kEqual:
      return "=";
    case Op::kNotEqual:
      return "!=";
    case Op::kGlob:
      return "~";
    case Op::kNotGlob:
      return "!~";
  }
  return "?";
}

Op ToOp(TokenType type) {
  switch (type) {
    case TokenType::kNotEqual:
      return Op::kNotEqual;
    case TokenType::kGlob:
      return Op::kGlob;
    case TokenType::kNotGlob:
      return Op::kNotGlob;
    default:
      return Op::kEqual;
  }
}

// How a token is named in "found ..." messages.
std::string Describe(const Token& token) {
  switch (token.type) {
    case TokenType::kWord:
      return fmt::format("'{}'", token.text);
    case TokenType::kQuoted:
      return "a quoted value";
    case TokenType::kLeftParen:
      return "'('";
    case TokenType::kRightParen:
      return "')'";
    case TokenType::kEqual:
      return "'='";
    case TokenType::kNotEqual:
      return "'!='";
    case TokenType::kGlob:
      return "'~'";
    case TokenType::kNotGlob:
      return "'!~'";
    case TokenType::kEnd:
      return "end of query";
    case TokenType::kError:
      return "an error";
  }
  return "?";
}

bool IsFieldName(std::string_view word) {
  if (word.empty() || !IsFieldStart(word.front())) return false;
  for (char c : word) {
    if (!IsFieldChar(c)) return false;
  }
  return true;
}

std::string_view FieldName(Field field) {
  switch (field) {
    case Field::kKind:
      return "kind";
    case Field::kName:
      return "name";
    case Field::kState:
      return "state";
    case Field::kHost:
      return "host";
    case Field::kProcess:
      return "process";
    case Field::kPid:
      return "pid";
    case Field::kGid:
      return "gid";
    case Field::kAttribute:
      return "attribute";
  }
  return "?";
}

// Built-in names are case-sensitive like attribute keys: "Kind" is an
// attribute, so no attribute key is made unreachable by the language.
Field FieldOf(std::string_view name) {
  for (Field field : {Field::kKind, Field::kName, Field::kState, Field::kHost, Field::kProcess,
                      Field::kPid, Field::kGid}) {
    if (name == FieldName(field)) return field;
  }
  return Field::kAttribute;
}

Expr Node(Expr::Type type) {
  Expr expr;
  expr.type = type;
  return expr;
}

class Parser {
 public:
  Parser(std::string_view text, std::vector<Token> tokens)
      : text_(text), tokens_(std::move(tokens)) {}

  Result<Expr> ParseQuery() {
    if (Peek().type == TokenType::kEnd) return ErrorAt(text_.size(), "empty query");
    TOCL_ASSIGN_OR_RETURN(Expr expr, ParseOr(0));
    const Token& token = Peek();
    if (token.type == TokenType::kEnd) {
      if (const Comparison* deep = TooDeep(expr, 0)) {
        return ErrorAt(deep->position,
                       fmt::format("nesting deeper than {} (each 'not' and each group of 'and' "
                                   "or 'or' around a comparison counts)",
                                   kMaxNesting));
      }
      return expr;
    }
    if (token.type == TokenType::kRightParen) return Unexpected(token, "unexpected ')'");
    return Unexpected(
        token, fmt::format("expected 'and', 'or' or end of query, found {}", Describe(token)));
  }

 private:
  // The token list always ends with kEnd or kError, and the parser never
  // advances over either, so Peek() stays in bounds.
  const Token& Peek() const { return tokens_[next_]; }
  void Advance() { ++next_; }

  // An error about `token`; a lexer error at that point is the real cause.
  static Status Unexpected(const Token& token, std::string_view what) {
    if (token.type == TokenType::kError) return ErrorAt(token.position, token.text);
    return ErrorAt(token.position, what);
  }

  // The leftmost comparison under more than kMaxNesting nots and and/or
  // groups. Parentheses alone do not bound that: "a=1 or b=1 and (c=1 or
  // ...)" nests two groups per parenthesis. The compiled SQL nests as deep
  // (and SQLite's parser has a fixed stack), and so does ToString, whose
  // output must parse again.
  static const Comparison* TooDeep(const Expr& expr, int depth) {
    if (expr.type == Expr::Type::kComparison) {
      return depth > kMaxNesting ? &expr.comparison : nullptr;
    }
    for (const Expr& operand : expr.operands) {
      if (const Comparison* deep = TooDeep(operand, depth + 1)) return deep;
    }
    return nullptr;
  }

  // Keeps and/or chains flat: "a and (b and c)" is one and of three.
  static void Append(Expr& parent, Expr child) {
    if (child.type == parent.type) {
      for (Expr& grandchild : child.operands) parent.operands.push_back(std::move(grandchild));
    } else {
      parent.operands.push_back(std::move(child));
    }
  }

  Result<Expr> ParseOr(int depth) {
    TOCL_ASSIGN_OR_RETURN(Expr first, ParseAnd(depth));
    if (!IsKeyword(Peek(), "or")) return first;
    Expr result = Node(Expr::Type::kOr);
    Append(result, std::move(first));
    while (IsKeyword(Peek(), "or")) {
      Advance();
      TOCL_ASSIGN_OR_RETURN(Expr next, ParseAnd(depth));
      Append(result, std::move(next));
    }
    return result;
  }

  Result<Expr> ParseAnd(int depth) {
    TOCL_ASSIGN_OR_RETURN(Expr first, ParseUnary(depth));
    if (!IsKeyword(Peek(), "and")) return first;
    Expr result = Node(Expr::Type::kAnd);
    Append(result, std::move(first));
    while (IsKeyword(Peek(), "and")) {
      Advance();
      TOCL_ASSIGN_OR_RETURN(Expr next, ParseUnary(depth));
      Append(result, std::move(next));
    }
    return result;
  }

  Result<Expr> ParseUnary(int depth) {
    const Token& token = Peek();
    const size_t position = token.position;
    const bool is_not = IsKeyword(token, "not");
    if (!is_not && token.type != TokenType::kLeftParen) return ParseComparison();
    if (depth + 1 > kMaxNesting) {
      return ErrorAt(position, fmt::format("nesting deeper than {}", kMaxNesting));
    }
    Advance();
    if (is_not) {
      TOCL_ASSIGN_OR_RETURN(Expr operand, ParseUnary(depth + 1));
      Expr result = Node(Expr::Type::kNot);
      result.operands.push_back(std::move(operand));
      return result;
    }
    TOCL_ASSIGN_OR_RETURN(Expr inner, ParseOr(depth + 1));
    const Token& close = Peek();
    if (close.type == TokenType::kRightParen) {
      Advance();
      return inner;
    }
    if (close.type == TokenType::kEnd) {
      return ErrorAt(close.position,
                     fmt::format("missing ')' for the '(' at position {}", position));
    }
    return Unexpected(close, fmt::format("expected 'and', 'or' or ')', found {}", Describe(close)));
  }

  Result<Expr> ParseComparison() {
    const Token field = Peek();
    if (field.type != TokenType::kWord || IsAnyKeyword(field)) return NotAComparison(field);
    if (++comparisons_ > kMaxComparisons) {
      return ErrorAt(field.position, fmt::format("more than {} comparisons", kMaxComparisons));
    }
    if (!IsFieldName(field.text)) {
      return ErrorAt(field.position,
                     fmt::format("bad field name '{}' (letters, digits, '_', '.', '-', starting "
                                 "with a letter or '_')",
                                 field.text));
    }
    Advance();
    const Token op = Peek();
    if (!IsOperator(op)) {
      return Unexpected(op, fmt::format("expected an operator after '{}'", field.text));
    }
    Advance();
    const Token value = Peek();
    const bool is_value = value.type == TokenType::kQuoted ||
                          (value.type == TokenType::kWord && !IsAnyKeyword(value));
    if (!is_value) {
      std::string what = fmt::format("expected a value after '{}'", OpText(ToOp(op.type)));
      if (value.type == TokenType::kWord) {
        what += fmt::format(" (quote '{}' to use it as a value)", value.text);
      }
      return Unexpected(value, what);
    }
    Advance();
    Comparison comparison;
    comparison.field = FieldOf(field.text);
    comparison.op = ToOp(op.type);
    comparison.value = value.text;
    comparison.position = field.position;
    if (comparison.field == Field::kAttribute) comparison.key = field.text;
    TOCL_RETURN_IF_ERROR(Resolve(comparison, op.position, value.position));
    Expr expr = Node(Expr::Type::kComparison);
    expr.comparison = std::move(comparison);
    return expr;
  }

  // Why `token` cannot start a comparison.
  static Status NotAComparison(const Token& token) {
    switch (token.type) {
      case TokenType::kRightParen:
        return ErrorAt(token.position, "unexpected ')'");
      case TokenType::kEnd:
        return ErrorAt(token.position, "unexpected end of query, expected a comparison");
      case TokenType::kQuoted:
        return ErrorAt(token.position, "expected a field name, found a quoted value");
      case TokenType::kWord:  // and/or
        return ErrorAt(token.position,
                       fmt::format("unexpected '{}', expected a comparison", token.text));
      default:
        if (IsOperator(token)) {
          return ErrorAt(token.position,
                         fmt::format("expected a field name before {}", Describe(token)));
        }
        return Unexpected(token, fmt::format("unexpected {}", Describe(token)));
    }
  }

  // Checks the operator and the value against the field, and stores what the
  // value means.
  static Status Resolve(Comparison& comparison, size_t op_position, size_t value_position) {
    const Field field = comparison.field;
    const std::string& value = comparison.value;
    const bool is_glob = comparison.op == Op::kGlob || comparison.op == Op::kNotGlob;
    if (is_glob && field != Field::kName && field != Field::kAttribute) {
      return ErrorAt(op_position, fmt::format("'{}' is not allowed on {}", OpText(comparison.op),
                                              FieldName(field)));
    }
    switch (field) {
      case Field::kKind:
        if (value == "host") {
          comparison.kind = EntityKind::kHost;
        } else if (value == "process") {
          comparison.kind = EntityKind::kProcess;
        } else if (value == "thread") {
          comparison.kind = EntityKind::kThread;
        } else {
          return ErrorAt(value_position,
                         fmt::format("unknown kind '{}' (host, process, thread)", value));
        }
        return Status::Ok();
      case Field::kState:
        if (value == "running") {
          comparison.state = EntityState::kRunning;
        } else if (value == "exited") {
          comparison.state = EntityState::kExited;
        } else {
          return ErrorAt(value_position,
                         fmt::format("unknown state '{}' (running, exited)", value));
        }
        return Status::Ok();
      case Field::kHost: {
        // A host id when the value reads as one; any other text is a name.
        Result<Gid> gid = Gid::Parse(value);
        if (gid.ok() && gid->is_host()) comparison.gid = *gid;
        return Status::Ok();
      }
      case Field::kProcess: {
        Result<Gid> gid = Gid::Parse(value);
        if (!gid.ok()) {
          return ErrorAt(value_position,
                         fmt::format("bad process id '{}': {}", value, gid.status().message()));
        }
        if (!gid->is_process()) {
          return ErrorAt(value_position,
                         fmt::format("bad process id '{}': not a process id (e.g. h1.p2)", value));
        }
        comparison.gid = *gid;
        return Status::Ok();
      }
      case Field::kPid: {
        int64_t pid = -1;
        const char* end = value.data() + value.size();
        auto [parsed_end, error] = std::from_chars(value.data(), end, pid);
        const bool only_digits = !value.empty() && IsDigit(value.front());
        if (!only_digits || error != std::errc() || parsed_end != end) {
          return ErrorAt(value_position,
                         fmt::format("bad pid '{}' (expected a decimal number)", value));
        }
        comparison.pid = pid;
        return Status::Ok();
      }
      case Field::kGid: {
        Result<Gid> gid = Gid::Parse(value);
        if (!gid.ok()) {
          return ErrorAt(value_position,
                         fmt::format("bad gid '{}': {}", value, gid.status().message()));
        }
        comparison.gid = *gid;
        return Status::Ok();
      }
      case Field::kName:
      case Field::kAttribute:
        return Status::Ok();
    }
    return Status::Ok();
  }

  std::string_view text_;
  std::vector<Token> tokens_;
  size_t next_ = 0;
  int comparisons_ = 0;
};

std::string Quote(std::string_view value) {
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

}  // namespace

Result<Expr> Parse(std::string_view text) {
  if (text.size() > kMaxQueryBytes) {
    return ErrorAt(kMaxQueryBytes, fmt::format("query is longer than {} bytes", kMaxQueryBytes));
  }
  Parser parser(text, Tokenize(text));
  return parser.ParseQuery();
}

std::string ToString(const Expr& expr) {
  switch (expr.type) {
    case Expr::Type::kComparison: {
      const Comparison& c = expr.comparison;
      const std::string_view field = c.field == Field::kAttribute ? c.key : FieldName(c.field);
      return fmt::format("{}{}{}", field, OpText(c.op), Quote(c.value));
    }
    case Expr::Type::kNot:
      return expr.operands.empty() ? "not ?" : "not " + ToString(expr.operands.front());
    case Expr::Type::kAnd:
    case Expr::Type::kOr: {
      const std::string_view separator = expr.type == Expr::Type::kAnd ? " and " : " or ";
      std::string text = "(";
      for (size_t i = 0; i < expr.operands.size(); ++i) {
        if (i > 0) text += separator;
        text += ToString(expr.operands[i]);
      }
      return text + ")";
    }
  }
  return "?";
}

}  // namespace tocl::directory::query
