#include "data/chat_template.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <utility>

namespace tt {
namespace {

// Note [chat templates]: a tree-walking interpreter of the Jinja subset above. Errors inside it are thrown as
// TemplateError (template text, its line) and become a Status at render_chat; nothing escapes it.
struct TemplateError {
  std::string what;
  int line;
};
[[noreturn]] void fail(int line, std::string what) { throw TemplateError{std::move(what), line}; }

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // in insertion order, as Python's dicts

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction } kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                 // a string; a function's name
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;    // a dict's or a namespace's items

  static Value make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
  static Value none() { return make(kNone); }
  static Value boolean(bool x) {
    Value v = make(kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(kInt);
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v = make(kFloat);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = make(kString);
    v.s = std::move(x);
    return v;
  }
  static Value of_list(List x) {
    Value v = make(kList);
    v.list = std::make_shared<List>(std::move(x));
    return v;
  }
  static Value of_dict(Dict x, Kind k = kDict) {
    Value v = make(k);
    v.dict = std::make_shared<Dict>(std::move(x));
    return v;
  }
  static Value function(std::string name) {
    Value v = make(kFunction);
    v.s = std::move(name);
    return v;
  }

  bool numeric() const { return kind == kInt || kind == kFloat || kind == kBool; }
  double as_double() const { return kind == kFloat ? f : kind == kInt ? static_cast<double>(i) : b ? 1 : 0; }
  const Value* find(const std::string& key) const {
    if (!dict) return nullptr;
    for (const auto& [k, v] : *dict)
      if (k == key) return &v;
    return nullptr;
  }
};

const char* kind_name(const Value& v) {
  static const char* names[] = {"undefined", "none", "boolean", "integer", "float",
                                "string",    "list", "dict",    "namespace", "function"};
  return names[v.kind];
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone: return false;
    case Value::kBool: return v.b;
    case Value::kInt: return v.i != 0;
    case Value::kFloat: return v.f != 0;
    case Value::kString: return !v.s.empty();
    case Value::kList: return !v.list->empty();
    case Value::kDict: return !v.dict->empty();
    default: return true;
  }
}

std::string float_text(double d) {  // Python's repr for the values templates print (1.0, 0.5, 1e-05)
  if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 1e16) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", d);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) return buf;
  }
  return std::to_string(d);
}

std::string json_text(const Value& v, int indent, int depth);

// What {{ v }} prints (Python's str()).
std::string text_of(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: return "";
    case Value::kNone: return "None";
    case Value::kBool: return v.b ? "True" : "False";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: return float_text(v.f);
    case Value::kString: return v.s;
    default: return json_text(v, -1, 0);  // lists and dicts: near enough Python's repr for templates that print them
  }
}

void json_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));  // ensure_ascii=False, as transformers' tojson
        }
    }
  }
  out->push_back('"');
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent), Python's separators.
std::string json_text(const Value& v, int indent, int depth) {
  std::string out;
  const std::string pad = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string end = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* comma = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone: return "null";
    case Value::kBool: return v.b ? "true" : "false";
    case Value::kInt: return std::to_string(v.i);
    case Value::kFloat: return float_text(v.f);
    case Value::kString: json_string(v.s, &out); return out;
    case Value::kList:
      if (v.list->empty()) return "[]";
      out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? comma : "") + pad + json_text((*v.list)[k], indent, depth + 1);
      return out + end + "]";
    case Value::kDict:
    case Value::kNamespace:
      if (v.dict->empty()) return "{}";
      out = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        out += (k ? comma : "") + pad;
        json_string((*v.dict)[k].first, &out);
        out += ": " + json_text((*v.dict)[k].second, indent, depth + 1);
      }
      return out + end + "}";
    default: return "null";
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.numeric() && b.numeric()) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kString: return a.s == b.s;
    case Value::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* w = b.find(k);
        if (w == nullptr || !equal(v, *w)) return false;
      }
      return true;
    case Value::kFunction: return a.s == b.s;
    default: return true;  // undefined, none
  }
}

// --- Expressions.

struct Expr {
  enum Kind {
    kLiteral, kName, kListLit, kDictLit, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond
  } kind;
  int line = 0;
  Value literal;
  std::string name;                             // a name, attribute, filter, test, or operator
  std::vector<std::unique_ptr<Expr>> args;      // operands; call, filter and test arguments after the first
  std::vector<std::string> kwarg_names;         // [k] the keyword of args[k], "" for a positional one
  bool negated = false;                         // `is not`, `not in`
};
using ExprP = std::unique_ptr<Expr>;

struct Tok {
  enum Kind { kName, kNumber, kString, kOp, kEnd } kind;
  std::string text;
  Value value;
};

std::vector<Tok> lex_expression(const std::string& s, int line) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::kName, s.substr(i, j - i), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool real = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == '_')) {
        if (s[j] == '.') {
          if (j + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[j + 1]))) break;
          real = true;
        }
        ++j;
      }
      std::string digits = s.substr(i, j - i);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      out.push_back({Tok::kNumber, digits,
                     real ? Value::number(std::strtod(digits.c_str(), nullptr))
                          : Value::integer(std::strtoll(digits.c_str(), nullptr, 10))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v.push_back(s[j]);
          continue;
        }
        const char e = s[++j];
        v.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == '0' ? '\0' : e);
      }
      if (j >= s.size()) fail(line, "a string that never ends: " + s.substr(i, 40));
      out.push_back({Tok::kString, s.substr(i, j + 1 - i), Value::string(v)});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      std::string op(1, c);
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) op = t;
      if (std::string("()[]{},.:|~+-*/%<>=!").find(c) == std::string::npos)
        fail(line, std::string("a character Jinja does not have here: '") + c + "'");
      out.push_back({Tok::kOp, op, {}});
      i += op.size();
    }
  }
  out.push_back({Tok::kEnd, "", {}});
  return out;
}

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, int line) : t_(std::move(toks)), line_(line) {}

  ExprP expression() { return conditional(); }
  bool at_end() const { return t_[k_].kind == Tok::kEnd; }
  bool is_name(const char* n) const { return t_[k_].kind == Tok::kName && t_[k_].text == n; }
  bool is_op(const char* o) const { return t_[k_].kind == Tok::kOp && t_[k_].text == o; }
  std::string take_name() {
    if (t_[k_].kind != Tok::kName) fail(line_, "expected a name, found '" + t_[k_].text + "'");
    return t_[k_++].text;
  }
  void expect_op(const char* o) {
    if (!is_op(o)) fail(line_, std::string("expected '") + o + "', found '" + t_[k_].text + "'");
    ++k_;
  }
  void expect_name(const char* n) {
    if (!is_name(n)) fail(line_, std::string("expected '") + n + "', found '" + t_[k_].text + "'");
    ++k_;
  }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + t_[k_].text + "'");
  }
  // A for loop's target: a name, or names separated by commas.
  std::vector<std::string> targets() {
    std::vector<std::string> names = {take_name()};
    while (is_op(",")) {
      ++k_;
      names.push_back(take_name());
    }
    return names;
  }
  // Parses an expression up to (not including) a keyword such as `if` in a for loop (no conditional there).
  ExprP or_expression() { return logical_or(); }

 private:
  ExprP make(Expr::Kind kind, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line_;
    e->name = std::move(name);
    return e;
  }
  ExprP binary(std::string op, ExprP a, ExprP b) {
    ExprP e = make(Expr::kBinary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  // Nesting past this is refused (a template is not that deep; a malformed one must not exhaust the stack).
  struct Deeper {
    ExprParser* p;
    explicit Deeper(ExprParser* parser) : p(parser) {
      if (++p->depth_ > 100) fail(p->line_, "an expression nested more than 100 deep");
    }
    ~Deeper() { --p->depth_; }
  };
  ExprP conditional() {
    const Deeper guard(this);
    ExprP a = logical_or();
    if (!is_name("if")) return a;
    ++k_;
    ExprP cond = logical_or();
    ExprP e = make(Expr::kCond);
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(a));
    if (is_name("else")) {
      ++k_;
      e->args.push_back(conditional());
    }
    return e;
  }
  ExprP logical_or() {
    ExprP a = logical_and();
    while (is_name("or")) {
      ++k_;
      a = binary("or", std::move(a), logical_and());
    }
    return a;
  }
  ExprP logical_and() {
    ExprP a = logical_not();
    while (is_name("and")) {
      ++k_;
      a = binary("and", std::move(a), logical_not());
    }
    return a;
  }
  ExprP logical_not() {
    if (!is_name("not")) return compare();
    const Deeper guard(this);
    ++k_;
    ExprP e = make(Expr::kUnary, "not");
    e->args.push_back(logical_not());
    return e;
  }
  ExprP compare() {
    ExprP a = sum();
    while (true) {
      static const char* ops[] = {"==", "!=", "<", "<=", ">", ">="};
      std::string op;
      for (const char* o : ops)
        if (is_op(o)) op = o;
      if (!op.empty()) {
        ++k_;
        a = binary(op, std::move(a), sum());
      } else if (is_name("in")) {
        ++k_;
        a = binary("in", std::move(a), sum());
      } else if (is_name("not") && t_[k_ + 1].kind == Tok::kName && t_[k_ + 1].text == "in") {
        k_ += 2;
        a = binary("in", std::move(a), sum());
        a->negated = true;
      } else {
        return a;
      }
    }
  }
  ExprP sum() {
    ExprP a = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[k_++].text;
      a = binary(op, std::move(a), concat());
    }
    return a;
  }
  ExprP concat() {
    ExprP a = product();
    while (is_op("~")) {
      ++k_;
      a = binary("~", std::move(a), product());
    }
    return a;
  }
  ExprP product() {
    ExprP a = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[k_++].text;
      a = binary(op, std::move(a), unary());
    }
    return a;
  }
  ExprP unary() {
    if (is_op("-") || is_op("+")) {
      const Deeper guard(this);
      const std::string op = t_[k_++].text;
      ExprP e = make(Expr::kUnary, op);
      e->args.push_back(unary());
      return e;
    }
    return postfix(primary());
  }
  void call_args(Expr* e) {  // after '('
    while (!is_op(")")) {
      std::string kw;
      if (t_[k_].kind == Tok::kName && t_[k_ + 1].kind == Tok::kOp && t_[k_ + 1].text == "=") {
        kw = t_[k_].text;
        k_ += 2;
      }
      e->args.push_back(expression());
      e->kwarg_names.push_back(kw);
      if (!is_op(")")) expect_op(",");
    }
    ++k_;
  }
  ExprP postfix(ExprP a) {
    while (true) {
      if (is_op(".")) {
        ++k_;
        ExprP e = make(Expr::kAttr, take_name());
        e->args.push_back(std::move(a));
        a = std::move(e);
      } else if (is_op("[")) {
        ++k_;
        ExprP e = make(Expr::kIndex);
        e->args.push_back(std::move(a));
        // a[i] or a[lo:hi(:step)], each part optional in a slice
        ExprP parts[3];
        int colons = 0;
        for (int part = 0; part < 3; ++part) {
          if (!is_op(":") && !is_op("]")) parts[part] = expression();
          if (!is_op(":")) break;
          ++k_;
          ++colons;
        }
        expect_op("]");
        if (colons > 0) {
          e->kind = Expr::kSlice;
          for (ExprP& p : parts) e->args.push_back(std::move(p));  // null where not given
        } else {
          if (!parts[0]) fail(line_, "an empty subscript []");
          e->args.push_back(std::move(parts[0]));
        }
        a = std::move(e);
      } else if (is_op("(")) {
        ++k_;
        ExprP e = make(Expr::kCall);
        e->args.push_back(std::move(a));
        e->kwarg_names.push_back("");
        call_args(e.get());
        a = std::move(e);
      } else if (is_op("|")) {
        ++k_;
        ExprP e = make(Expr::kFilter, take_name());
        e->args.push_back(std::move(a));
        e->kwarg_names.push_back("");
        if (is_op("(")) {
          ++k_;
          call_args(e.get());
        }
        a = std::move(e);
      } else if (is_name("is")) {
        ++k_;
        bool negated = false;
        if (is_name("not")) {
          ++k_;
          negated = true;
        }
        ExprP e = make(Expr::kTest, take_name());
        e->negated = negated;
        e->args.push_back(std::move(a));
        e->kwarg_names.push_back("");
        if (is_op("(")) {
          ++k_;
          call_args(e.get());
        } else if (t_[k_].kind == Tok::kString || t_[k_].kind == Tok::kNumber) {  // `is equalto 3`
          ExprP lit = make(Expr::kLiteral);
          lit->literal = t_[k_++].value;
          e->args.push_back(std::move(lit));
          e->kwarg_names.push_back("");
        }
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  ExprP primary() {
    const Tok& t = t_[k_];
    if (t.kind == Tok::kNumber || t.kind == Tok::kString) {
      ++k_;
      ExprP e = make(Expr::kLiteral);
      e->literal = t.value;
      // Adjacent strings join, as in Python.
      while (t_[k_].kind == Tok::kString) e->literal.s += t_[k_++].value.s;
      return e;
    }
    if (t.kind == Tok::kName) {
      ++k_;
      ExprP e = make(Expr::kLiteral);
      if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") e->literal = Value::none();
      else e = make(Expr::kName, t.text);
      return e;
    }
    if (t.kind == Tok::kOp && t.text == "(") {
      ++k_;
      ExprP e = expression();
      if (is_op(",")) fail(line_, "tuples are not supported");
      expect_op(")");
      return e;
    }
    if (t.kind == Tok::kOp && t.text == "[") {
      ++k_;
      ExprP e = make(Expr::kListLit);
      while (!is_op("]")) {
        e->args.push_back(expression());
        if (!is_op("]")) expect_op(",");
      }
      ++k_;
      return e;
    }
    if (t.kind == Tok::kOp && t.text == "{") {
      ++k_;
      ExprP e = make(Expr::kDictLit);
      while (!is_op("}")) {
        e->args.push_back(expression());
        expect_op(":");
        e->args.push_back(expression());
        if (!is_op("}")) expect_op(",");
      }
      ++k_;
      return e;
    }
    fail(line_, t.kind == Tok::kEnd ? "an expression ends too early" : "unexpected '" + t.text + "'");
  }

  std::vector<Tok> t_;
  size_t k_ = 0;
  int line_;
  int depth_ = 0;
};

// --- Statements.

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet } kind;
  int line = 0;
  std::string text;                                       // kText
  std::vector<ExprP> conds;                               // kIf: each branch's condition (the else: none)
  std::vector<std::vector<std::unique_ptr<Node>>> bodies; // kIf: each branch's body; kFor: body, else body
  ExprP expr;                                             // kOutput, kFor's iterable, kSet's value
  ExprP filter;                                           // kFor: `if` condition
  std::vector<std::string> targets;                       // kFor's names; kSet: name, or namespace and attribute
};
using NodeP = std::unique_ptr<Node>;

struct Piece {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
  int line;
};

// The template cut into text, {{ }} and {% %} (comments dropped), with jinja2's whitespace rules as transformers
// sets them: trim_blocks (the newline after a block tag goes), lstrip_blocks (the spaces and tabs before a block tag
// on its line go), and '-' inside a tag (all whitespace on that side goes).
std::vector<Piece> cut(const std::string& s) {
  std::vector<Piece> out;
  size_t i = 0;
  int line = 1;
  bool strip_next = false, trim_newline = false;
  while (i <= s.size()) {
    size_t open = s.find('{', i);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' && s[open + 1] != '%' &&
           s[open + 1] != '#')
      open = s.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= s.size()) open = std::string::npos;
    std::string text = s.substr(i, (open == std::string::npos ? s.size() : open) - i);
    const int text_line = line;
    line += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    const char kind = open == std::string::npos ? 0 : s[open + 1];
    const bool minus_left = kind != 0 && open + 2 < s.size() && s[open + 2] == '-';
    const bool plus_left = kind != 0 && open + 2 < s.size() && s[open + 2] == '+';
    // The tag's side first (on the text as written), then the side of the tag before it.
    if (minus_left) {
      const size_t keep = text.find_last_not_of(" \t\r\n");
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if ((kind == '%' || kind == '#') && !plus_left) {
      // lstrip_blocks: a block tag with only spaces and tabs before it since its line's start
      const size_t nl = text.find_last_of('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || i == 0) && text.find_first_not_of(" \t", from) == std::string::npos)
        text.erase(from);
    }
    if (strip_next) {
      const size_t first = text.find_first_not_of(" \t\r\n");
      text.erase(0, first == std::string::npos ? text.size() : first);
    } else if (trim_newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::kText, text, text_line});
      break;
    }
    if (!text.empty()) out.push_back({Piece::kText, text, text_line});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end = std::string::npos;  // the close outside the tag's string literals
    for (size_t k = open + 2; k + 1 < s.size(); ++k) {
      if (kind != '#' && (s[k] == '\'' || s[k] == '"')) {
        const char q = s[k];
        for (++k; k < s.size() && s[k] != q; ++k)
          if (s[k] == '\\') ++k;
        continue;
      }
      if (s.compare(k, 2, close) == 0) {
        end = k;
        break;
      }
    }
    if (end == std::string::npos) fail(line, std::string("a tag that never closes: ") + s.substr(open, 40));
    size_t body_begin = open + 2 + (minus_left || plus_left ? 1 : 0), body_end = end;
    if (body_end > body_begin && (s[body_end - 1] == '-' || s[body_end - 1] == '+')) {
      strip_next = s[body_end - 1] == '-';
      --body_end;
    }
    if (kind != '{' && !strip_next && s[end - 1] != '+') trim_newline = true;  // trim_blocks
    const std::string body = s.substr(body_begin, body_end - body_begin);
    if (kind != '#') out.push_back({kind == '{' ? Piece::kExpr : Piece::kStmt, body, line});
    line += static_cast<int>(std::count(body.begin(), body.end(), '\n'));
    i = end + 2;
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::vector<Piece> pieces) : p_(std::move(pieces)) {}

  // The nodes up to one of the `stops` statements (its first word left in *stop), or the end.
  std::vector<NodeP> block(std::initializer_list<const char*> stops, std::string* stop) {
    if (++depth_ > 100) fail(k_ < p_.size() ? p_[k_].line : 0, "blocks nested more than 100 deep");
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    std::vector<NodeP> out;
    while (k_ < p_.size()) {
      const Piece& piece = p_[k_];
      if (piece.kind == Piece::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = piece.text;
        out.push_back(std::move(n));
        ++k_;
        continue;
      }
      ExprParser ep(lex_expression(piece.text, piece.line), piece.line);
      if (piece.kind == Piece::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->line = piece.line;
        n->expr = ep.expression();
        ep.expect_end();
        out.push_back(std::move(n));
        ++k_;
        continue;
      }
      const std::string word = ep.at_end() ? std::string() : ep.take_name();
      for (const char* s : stops)
        if (word == s) {
          *stop = word;
          return out;
        }
      ++k_;
      if (word == "if") {
        out.push_back(if_node(ep, piece.line));
      } else if (word == "for") {
        out.push_back(for_node(ep, piece.line));
      } else if (word == "set") {
        auto n = std::make_unique<Node>();
        n->kind = Node::kSet;
        n->line = piece.line;
        n->targets = {ep.take_name()};
        if (ep.is_op(".")) {
          ep.expect_op(".");
          n->targets.push_back(ep.take_name());
        }
        if (!ep.is_op("=")) fail(piece.line, "{% set %} blocks are not supported (only {% set x = ... %})");
        ep.expect_op("=");
        n->expr = ep.expression();
        ep.expect_end();
        out.push_back(std::move(n));
      } else if (word == "generation" || word == "endgeneration") {
        // transformers' marks around an assistant's part: nothing to render.
      } else {
        fail(piece.line, "{% " + word + " %}: not supported (if, for, set, and their ends)");
      }
    }
    return out;
  }

  size_t at() const { return k_; }

 private:
  NodeP if_node(ExprParser& ep, int line) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kIf;
    n->line = line;
    n->conds.push_back(ep.expression());
    ep.expect_end();
    while (true) {
      std::string stop;
      n->bodies.push_back(block({"elif", "else", "endif"}, &stop));
      if (stop.empty()) fail(line, "{% if %} without {% endif %}");
      const Piece& piece = p_[k_++];
      ExprParser next(lex_expression(piece.text, piece.line), piece.line);
      next.take_name();
      if (stop == "endif") return n;
      if (stop == "elif") {
        n->conds.push_back(next.expression());
      } else {
        n->conds.push_back(nullptr);
      }
      next.expect_end();
    }
  }
  NodeP for_node(ExprParser& ep, int line) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kFor;
    n->line = line;
    n->targets = ep.targets();
    ep.expect_name("in");
    n->expr = ep.or_expression();
    if (ep.is_name("if")) {
      ep.take_name();
      n->filter = ep.or_expression();
    }
    if (ep.is_name("recursive")) fail(line, "recursive loops are not supported");
    ep.expect_end();
    std::string stop;
    n->bodies.push_back(block({"else", "endfor"}, &stop));
    if (stop.empty()) fail(line, "{% for %} without {% endfor %}");
    ++k_;
    if (stop == "else") {
      n->bodies.push_back(block({"endfor"}, &stop));
      if (stop.empty()) fail(line, "{% for %} without {% endfor %}");
      ++k_;
    }
    return n;
  }

  std::vector<Piece> p_;
  size_t k_ = 0;
  int depth_ = 0;
};

// --- Evaluation.

class Renderer {
 public:
  explicit Renderer(std::map<std::string, Value> globals) { scopes_.push_back(std::move(globals)); }

  void run(const std::vector<NodeP>& nodes, std::string* out) {
    for (const NodeP& n : nodes) {
      if (out->size() > (size_t(64) << 20)) fail(n->line, "the template's text passed 64 MiB");
      switch (n->kind) {
        case Node::kText: *out += n->text; break;
        case Node::kOutput: *out += text_of(eval(*n->expr)); break;
        case Node::kIf:
          for (size_t b = 0; b < n->bodies.size(); ++b)
            if (n->conds[b] == nullptr || truthy(eval(*n->conds[b]))) {
              run(n->bodies[b], out);
              break;
            }
          break;
        case Node::kSet: {
          Value v = eval(*n->expr);
          if (n->targets.size() == 1) {
            scopes_.back()[n->targets[0]] = std::move(v);
            break;
          }
          Value ns = lookup(n->targets[0]);
          if (ns.kind != Value::kNamespace) fail(n->line, n->targets[0] + " is not a namespace()");
          bool found = false;
          for (auto& [k, x] : *ns.dict)
            if (k == n->targets[1]) {
              x = v;
              found = true;
            }
          if (!found) ns.dict->emplace_back(n->targets[1], std::move(v));
          break;
        }
        case Node::kFor: loop(*n, out); break;
      }
    }
  }

 private:
  // Strings and lists past these sizes are refused: a template's doubling loop must not exhaust memory.
  static Value bounded(Value v, int line) {
    if (v.kind == Value::kString && v.s.size() > (size_t(64) << 20)) fail(line, "a string past 64 MiB");
    if (v.kind == Value::kList && v.list->size() > 1000000) fail(line, "a list past a million items");
    return v;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const auto f = it->find(name); f != it->end()) return f->second;
    if (name == "namespace" || name == "range" || name == "raise_exception") return Value::function(name);
    return Value{};
  }

  void loop(const Node& n, std::string* out) {
    const Value seq = eval(*n.expr);
    std::vector<Value> items;
    if (seq.kind == Value::kList) {
      items = *seq.list;
    } else if (seq.kind == Value::kDict) {
      for (const auto& [k, v] : *seq.dict) items.push_back(Value::string(k));
    } else if (seq.kind == Value::kString) {
      for (char c : seq.s) items.push_back(Value::string(std::string(1, c)));
    } else if (seq.kind != Value::kUndefined && seq.kind != Value::kNone) {
      fail(n.line, std::string("cannot loop over a ") + kind_name(seq));
    }
    // The `if` filter runs before the loop's counts (loop.length, loop.last are of the filtered items).
    scopes_.emplace_back();
    if (n.filter) {
      std::vector<Value> kept;
      for (const Value& v : items) {
        bind(n, v);
        if (truthy(eval(*n.filter))) kept.push_back(v);
      }
      items = std::move(kept);
    }
    for (size_t k = 0; k < items.size(); ++k) {
      scopes_.back().clear();
      bind(n, items[k]);
      const int64_t len = static_cast<int64_t>(items.size()), idx = static_cast<int64_t>(k);
      scopes_.back()["loop"] = Value::of_dict(
          {{"index", Value::integer(idx + 1)}, {"index0", Value::integer(idx)}, {"first", Value::boolean(k == 0)},
           {"last", Value::boolean(idx == len - 1)}, {"length", Value::integer(len)},
           {"revindex", Value::integer(len - idx)}, {"revindex0", Value::integer(len - idx - 1)},
           {"previtem", k > 0 ? items[k - 1] : Value{}}, {"nextitem", idx + 1 < len ? items[k + 1] : Value{}}});
      run(n.bodies[0], out);
    }
    scopes_.pop_back();
    if (items.empty() && n.bodies.size() > 1) run(n.bodies[1], out);
  }

  void bind(const Node& n, const Value& v) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = v;
      return;
    }
    if (v.kind != Value::kList || v.list->size() != n.targets.size())
      fail(n.line, "cannot unpack a " + std::string(kind_name(v)) + " into " + std::to_string(n.targets.size()) +
                       " names");
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = (*v.list)[k];
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: return lookup(e.name);
      case Expr::kListLit: {
        List l;
        for (const ExprP& a : e.args) l.push_back(eval(*a));
        return Value::of_list(std::move(l));
      }
      case Expr::kDictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          const Value key = eval(*e.args[k]);
          if (key.kind != Value::kString) fail(e.line, "dict keys must be strings here");
          d.emplace_back(key.s, eval(*e.args[k + 1]));
        }
        return Value::of_dict(std::move(d));
      }
      case Expr::kAttr: {
        const Value obj = eval(*e.args[0]);
        if (obj.kind == Value::kDict || obj.kind == Value::kNamespace)
          if (const Value* v = obj.find(e.name)) return *v;
        return Value{};  // undefined (a method is looked up at its call)
      }
      case Expr::kIndex: return index(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::kSlice: return slice(e);
      case Expr::kCall: return call(e);
      case Expr::kFilter: return filter(e);
      case Expr::kTest: {
        const bool r = test(e);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::kUnary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (!v.numeric()) fail(e.line, std::string("unary ") + e.name + " of a " + kind_name(v));
        if (e.name == "+") return v;
        if (v.kind == Value::kFloat) return Value::number(-v.f);
        const int64_t i = v.kind == Value::kInt ? v.i : v.b;
        if (i == INT64_MIN) fail(e.line, "an integer past 64 bits");
        return Value::integer(-i);
      }
      case Expr::kBinary: return binary(e);
      case Expr::kCond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args.size() > 2 ? eval(*e.args[2]) : Value{};
    }
    return Value{};
  }

  Value index(const Value& obj, const Value& key, int line) {
    if (obj.kind == Value::kDict || obj.kind == Value::kNamespace) {
      if (key.kind != Value::kString) return Value{};
      const Value* v = obj.find(key.s);
      return v ? *v : Value{};
    }
    if ((obj.kind == Value::kList || obj.kind == Value::kString) && key.kind == Value::kInt) {
      const int64_t n = obj.kind == Value::kList ? static_cast<int64_t>(obj.list->size())
                                                 : static_cast<int64_t>(obj.s.size());
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return Value{};
      return obj.kind == Value::kList ? (*obj.list)[static_cast<size_t>(k)]
                                      : Value::string(std::string(1, obj.s[static_cast<size_t>(k)]));
    }
    if (obj.kind == Value::kUndefined) return Value{};
    fail(line, std::string("cannot index a ") + kind_name(obj) + " with a " + kind_name(key));
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    if (obj.kind != Value::kList && obj.kind != Value::kString)
      fail(e.line, std::string("cannot slice a ") + kind_name(obj));
    const int64_t n = obj.kind == Value::kList ? static_cast<int64_t>(obj.list->size())
                                               : static_cast<int64_t>(obj.s.size());
    auto part = [&](int k, int64_t dflt) {
      if (!e.args[static_cast<size_t>(k)]) return dflt;
      const Value v = eval(*e.args[static_cast<size_t>(k)]);
      if (v.kind == Value::kNone) return dflt;
      if (v.kind != Value::kInt) fail(e.line, "a slice's bounds must be integers");
      return v.i;
    };
    const int64_t step = part(3, 1);
    if (step != 1) fail(e.line, "slices with a step are not supported");
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); };
    const int64_t lo = clamp(part(1, 0)), hi = std::max(lo, clamp(part(2, n)));
    if (obj.kind == Value::kString)
      return Value::string(obj.s.substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)));
    return Value::of_list(List(obj.list->begin() + lo, obj.list->begin() + hi));
  }

  std::vector<Value> arguments(const Expr& e, size_t first, std::map<std::string, Value>* kwargs) {
    std::vector<Value> out;
    for (size_t k = first; k < e.args.size(); ++k) {
      if (!e.kwarg_names[k].empty()) (*kwargs)[e.kwarg_names[k]] = eval(*e.args[k]);
      else out.push_back(eval(*e.args[k]));
    }
    return out;
  }

  Value call(const Expr& e) {
    std::map<std::string, Value> kw;
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::kAttr) {  // a method of a value
      const Value self = eval(*callee.args[0]);
      return method(self, callee.name, arguments(e, 1, &kw), e.line);
    }
    const Value f = eval(callee);
    const std::vector<Value> args = arguments(e, 1, &kw);
    if (f.kind != Value::kFunction) fail(e.line, "calling a " + std::string(kind_name(f)) + ", not a function");
    if (f.s == "raise_exception")
      fail(e.line, "the template raised: " + (args.empty() ? std::string() : text_of(args[0])));
    if (f.s == "namespace") {
      Dict d;
      for (auto& [k, v] : kw) d.emplace_back(k, v);
      return Value::of_dict(std::move(d), Value::kNamespace);
    }
    // range(stop) / range(start, stop)
    if (args.empty() || args.size() > 2 || args[0].kind != Value::kInt || (args.size() == 2 && args[1].kind != Value::kInt))
      fail(e.line, "range() takes one or two integers");
    const int64_t lo = args.size() == 2 ? args[0].i : 0, hi = args.size() == 2 ? args[1].i : args[0].i;
    int64_t span = 0;
    if (hi > lo && (__builtin_sub_overflow(hi, lo, &span) || span > 1000000))
      fail(e.line, "range() of more than a million numbers");
    List l;
    for (int64_t v = lo; v < hi; ++v) l.push_back(Value::integer(v));
    return Value::of_list(std::move(l));
  }

  static std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    while (left && b < e && chars.find(s[b]) != std::string::npos) ++b;
    while (right && e > b && chars.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
  }

  Value method(const Value& self, const std::string& name, const std::vector<Value>& args, int line) {
    const std::string ws = " \t\n\r\f\v";
    if (self.kind == Value::kString) {
      const std::string chars = !args.empty() && args[0].kind == Value::kString ? args[0].s : ws;
      if (name == "strip") return Value::string(strip(self.s, chars, true, true));
      if (name == "lstrip") return Value::string(strip(self.s, chars, true, false));
      if (name == "rstrip") return Value::string(strip(self.s, chars, false, true));
      if (name == "upper" || name == "lower") {
        std::string s = self.s;
        for (char& c : s) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                                : std::tolower(static_cast<unsigned char>(c)));
        return Value::string(s);
      }
      if ((name == "startswith" || name == "endswith") && args.size() == 1 && args[0].kind == Value::kString)
        return Value::boolean(name == "startswith" ? self.s.starts_with(args[0].s) : self.s.ends_with(args[0].s));
      if (name == "split") {
        List parts;
        if (args.empty()) {
          size_t i = 0;
          while (true) {
            i = self.s.find_first_not_of(ws, i);
            if (i == std::string::npos) break;
            const size_t j = std::min(self.s.find_first_of(ws, i), self.s.size());
            parts.push_back(Value::string(self.s.substr(i, j - i)));
            i = j;
          }
        } else {
          if (args[0].kind != Value::kString || args[0].s.empty()) fail(line, "split() needs a separator string");
          size_t i = 0;
          while (true) {
            const size_t j = self.s.find(args[0].s, i);
            parts.push_back(Value::string(self.s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
            if (j == std::string::npos) break;
            i = j + args[0].s.size();
          }
        }
        return Value::of_list(std::move(parts));
      }
      if (name == "replace" && args.size() == 2) return filter_replace(self, args[0], args[1], line);
    }
    if (self.kind == Value::kDict) {
      if (name == "items" || name == "keys" || name == "values") {
        List l;
        for (const auto& [k, v] : *self.dict)
          l.push_back(name == "items" ? Value::of_list({Value::string(k), v}) : name == "keys" ? Value::string(k) : v);
        return Value::of_list(std::move(l));
      }
      if (name == "get" && !args.empty() && args[0].kind == Value::kString) {
        const Value* v = self.find(args[0].s);
        return v ? *v : args.size() > 1 ? args[1] : Value::none();
      }
    }
    fail(line, std::string("no method ") + name + "() of a " + kind_name(self) + " here");
  }

  Value filter_replace(const Value& s, const Value& from, const Value& to, int line) {
    if (s.kind != Value::kString || from.kind != Value::kString || to.kind != Value::kString || from.s.empty())
      fail(line, "replace() takes strings");
    std::string out;
    for (size_t i = 0;;) {
      const size_t j = s.s.find(from.s, i);
      out += s.s.substr(i, j == std::string::npos ? std::string::npos : j - i);
      if (j == std::string::npos) break;
      out += to.s;
      i = j + from.s.size();
      if (out.size() > (size_t(64) << 20)) fail(line, "a string past 64 MiB");
    }
    return Value::string(out);
  }

  Value filter(const Expr& e) {
    std::map<std::string, Value> kw;
    const Value v = eval(*e.args[0]);
    const std::vector<Value> args = arguments(e, 1, &kw);
    const std::string& f = e.name;
    if (f == "trim") return method(v.kind == Value::kString ? v : Value::string(text_of(v)), "strip", {}, e.line);
    if (f == "length" || f == "count") {
      if (v.kind == Value::kString) return Value::integer(static_cast<int64_t>(v.s.size()));
      if (v.kind == Value::kList) return Value::integer(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::kDict) return Value::integer(static_cast<int64_t>(v.dict->size()));
      if (v.kind == Value::kUndefined) return Value::integer(0);
      fail(e.line, std::string("length of a ") + kind_name(v));
    }
    if (f == "tojson") {
      const auto it = kw.find("indent");
      const Value* given = it != kw.end() ? &it->second : !args.empty() ? &args[0] : nullptr;
      int indent = -1;
      if (given != nullptr && given->kind != Value::kNone) {
        if (given->kind != Value::kInt || given->i < 0 || given->i > 16) fail(e.line, "tojson's indent is 0 to 16 here");
        indent = static_cast<int>(given->i);
      }
      return bounded(Value::string(json_text(v, indent, 0)), e.line);
    }
    if (f == "upper" || f == "lower") return method(v, f, {}, e.line);
    if (f == "string") return Value::string(text_of(v));
    if (f == "default" || f == "d") {
      const bool boolean = (args.size() > 1 && truthy(args[1])) || (kw.count("boolean") && truthy(kw["boolean"]));
      if (v.kind == Value::kUndefined || (boolean && !truthy(v))) return args.empty() ? Value::string("") : args[0];
      return v;
    }
    if (f == "join") {
      if (v.kind != Value::kList) fail(e.line, std::string("join of a ") + kind_name(v));
      std::string out;
      const std::string sep = args.empty() ? "" : text_of(args[0]);
      for (size_t k = 0; k < v.list->size(); ++k) {
        out += (k ? sep : "") + text_of((*v.list)[k]);
        if (out.size() > (size_t(64) << 20)) fail(e.line, "a string past 64 MiB");
      }
      return Value::string(out);
    }
    if (f == "replace" && args.size() == 2) return filter_replace(v, args[0], args[1], e.line);
    if ((f == "first" || f == "last") && v.kind == Value::kList)
      return v.list->empty() ? Value{} : f == "first" ? v.list->front() : v.list->back();
    if (f == "list") {
      if (v.kind == Value::kList) return v;
      if (v.kind == Value::kString) {
        List l;
        for (char c : v.s) l.push_back(Value::string(std::string(1, c)));
        return Value::of_list(std::move(l));
      }
      if (v.kind == Value::kDict) return method(v, "keys", {}, e.line);
    }
    if (f == "int") {
      if (v.kind == Value::kInt) return v;
      if (v.numeric()) {
        const double d = v.as_double();
        if (!(d > -9.2e18 && d < 9.2e18)) fail(e.line, "int() of a number past 64 bits");
        return Value::integer(static_cast<int64_t>(d));
      }
      if (v.kind == Value::kString) return Value::integer(std::strtoll(v.s.c_str(), nullptr, 10));
    }
    if (f == "safe" || f == "e" || f == "escape") {
      if (f != "safe") fail(e.line, "the escape filter is not supported");
      return v;
    }
    fail(e.line, "the filter '" + f + "' on a " + kind_name(v) + " is not supported");
  }

  bool test(const Expr& e) {
    std::map<std::string, Value> kw;
    const Value v = eval(*e.args[0]);
    const std::vector<Value> args = arguments(e, 1, &kw);
    const std::string& t = e.name;
    if (t == "defined") return v.kind != Value::kUndefined;
    if (t == "undefined") return v.kind == Value::kUndefined;
    if (t == "none") return v.kind == Value::kNone;
    if (t == "string") return v.kind == Value::kString;
    if (t == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
    if (t == "integer") return v.kind == Value::kInt;
    if (t == "float") return v.kind == Value::kFloat;
    if (t == "boolean") return v.kind == Value::kBool;
    if (t == "true") return v.kind == Value::kBool && v.b;
    if (t == "false") return v.kind == Value::kBool && !v.b;
    if (t == "mapping") return v.kind == Value::kDict || v.kind == Value::kNamespace;
    if (t == "iterable") return v.kind == Value::kList || v.kind == Value::kDict || v.kind == Value::kString;
    if (t == "sequence") return v.kind == Value::kList || v.kind == Value::kString || v.kind == Value::kDict;
    if (t == "callable") return v.kind == Value::kFunction;
    if ((t == "odd" || t == "even") && v.kind == Value::kInt) return (v.i % 2 != 0) == (t == "odd");
    if ((t == "equalto" || t == "eq" || t == "sameas") && args.size() == 1) return equal(v, args[0]);
    fail(e.line, "the test '" + t + "' is not supported");
  }

  Value binary(const Expr& e) {
    if (e.name == "and") {
      const Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (e.name == "or") {
      const Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    const std::string& op = e.name;
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") return bounded(Value::string(text_of(a) + text_of(b)), e.line);
    if (op == "in") {
      bool r = false;
      if (b.kind == Value::kString && a.kind == Value::kString) r = b.s.find(a.s) != std::string::npos;
      else if (b.kind == Value::kList) r = std::any_of(b.list->begin(), b.list->end(), [&](const Value& x) { return equal(a, x); });
      else if (b.kind == Value::kDict || b.kind == Value::kNamespace) r = a.kind == Value::kString && b.find(a.s);
      else if (b.kind != Value::kUndefined) fail(e.line, std::string("'in' a ") + kind_name(b));
      return Value::boolean(e.negated ? !r : r);
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c = 0;
      if (a.numeric() && b.numeric()) c = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
      else if (a.kind == Value::kString && b.kind == Value::kString) c = a.s.compare(b.s);
      else fail(e.line, std::string("comparing a ") + kind_name(a) + " with a " + kind_name(b));
      return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    if (op == "+") {
      if (a.kind == Value::kString && b.kind == Value::kString) return bounded(Value::string(a.s + b.s), e.line);
      if (a.kind == Value::kList && b.kind == Value::kList) {
        if (a.list->size() + b.list->size() > 1000000) fail(e.line, "a list past a million items");
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::of_list(std::move(l));
      }
    }
    if (!a.numeric() || !b.numeric())
      fail(e.line, std::string("'") + op + "' of a " + kind_name(a) + " and a " + kind_name(b));
    const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
    const double x = a.as_double(), y = b.as_double();
    if (ints) {  // 64-bit integers, Python's floor division and modulo; past 64 bits an error (Python's are unbounded)
      const int64_t p = a.kind == Value::kInt ? a.i : a.b, q = b.kind == Value::kInt ? b.i : b.b;
      int64_t r = 0;
      bool over = false;
      if (op == "+") over = __builtin_add_overflow(p, q, &r);
      else if (op == "-") over = __builtin_sub_overflow(p, q, &r);
      else if (op == "*") over = __builtin_mul_overflow(p, q, &r);
      else if (op != "/" && q == 0) fail(e.line, "division by zero");
      else if (op == "//" || op == "%") {
        if (p == INT64_MIN && q == -1) fail(e.line, "an integer past 64 bits");
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) {
          --d;
          m += q;
        }
        r = op == "//" ? d : m;
      }
      if (over) fail(e.line, "an integer past 64 bits");
      if (op != "/") return Value::integer(r);
    }
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (y == 0) fail(e.line, "division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") return Value::number(x - y * std::floor(x / y));
    fail(e.line, "the operator '" + op + "' is not supported");
  }

  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace

Result<std::string> render_chat(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const ChatOptions& o) {
  try {
    Parser parser(cut(tmpl));
    std::string stop;
    const std::vector<NodeP> nodes = parser.block({"endif", "endfor", "elif", "else"}, &stop);
    if (!stop.empty()) fail(0, "{% " + stop + " %} without its opening tag");
    List msgs;
    for (const ChatMessage& m : messages)
      msgs.push_back(Value::of_dict({{"role", Value::string(m.role)}, {"content", Value::string(m.content)}}));
    Renderer r({{"messages", Value::of_list(std::move(msgs))},
                {"add_generation_prompt", Value::boolean(add_generation_prompt)},
                {"bos_token", Value::string(o.bos_token)},
                {"eos_token", Value::string(o.eos_token)}});
    std::string out;
    r.run(nodes, &out);
    return out;
  } catch (const TemplateError& e) {
    return make_status(StatusCode::kFailedPrecondition, "chat template line %d: %s", e.line, e.what.c_str());
  } catch (const std::exception& e) {  // what the bounds above should leave none of (std::bad_alloc, ...)
    return make_status(StatusCode::kFailedPrecondition, "chat template: %s", e.what());
  }
}

}  // namespace tt
