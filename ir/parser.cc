#include "ir/parser.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

enum class Tok { kEnd, kIdent, kValueName, kString, kNumber, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier, name (without %), unescaped string, number, or punctuation
  int line = 0;
  int col = 0;
};

class Lexer {
 public:
  explicit Lexer(absl::string_view s) : s_(s) {}

  absl::StatusOr<Token> Next() {
    SkipSpace();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= s_.size()) return t;
    const char c = s_[pos_];
    if (c == '%') {
      Advance();
      t.kind = Tok::kValueName;
      if (pos_ < s_.size() && s_[pos_] == '"') {
        OTTR_ASSIGN_OR_RETURN(t.text, ReadString());
      } else {
        while (pos_ < s_.size() && IsNameChar(s_[pos_])) t.text += Advance();
        if (t.text.empty()) return Error(t, "empty value name after '%'");
      }
      return t;
    }
    if (c == '"') {
      t.kind = Tok::kString;
      OTTR_ASSIGN_OR_RETURN(t.text, ReadString());
      return t;
    }
    if ((c >= '0' && c <= '9') || c == '-' || c == '+') {
      t.kind = Tok::kNumber;
      t.text += Advance();
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                  s_[pos_] == '.' || s_[pos_] == '+' || s_[pos_] == '-')) {
        // Allow exponents like 1e-05 but stop before a following "-" that is not an exponent sign.
        if ((s_[pos_] == '+' || s_[pos_] == '-') && !(t.text.back() == 'e' || t.text.back() == 'E')) {
          break;
        }
        t.text += Advance();
      }
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::kIdent;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                  s_[pos_] == '_' || s_[pos_] == '.')) {
        t.text += Advance();
      }
      return t;
    }
    if (c == ':' && pos_ + 1 < s_.size() && s_[pos_ + 1] == ':') {
      Advance();
      Advance();
      t.kind = Tok::kPunct;
      t.text = "::";
      return t;
    }
    if (absl::string_view(":,=(){}[]<>?*").find(c) != absl::string_view::npos) {
      t.kind = Tok::kPunct;
      t.text = Advance();
      return t;
    }
    return Error(t, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  static absl::Status Error(const Token& t, absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat("IR text line ", t.line, " column ", t.col,
                                                   ": ", msg));
  }

 private:
  static bool IsNameChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
           c == '/' || c == '-';
  }
  char Advance() {
    const char c = s_[pos_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }
  void SkipSpace() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        Advance();
      } else if (s_[pos_] == '#') {  // comment to end of line
        while (pos_ < s_.size() && s_[pos_] != '\n') Advance();
      } else {
        break;
      }
    }
  }
  absl::StatusOr<std::string> ReadString() {
    Token at{Tok::kString, "", line_, col_};
    Advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) return Error(at, "unterminated string");
      char c = Advance();
      if (c == '"') break;
      if (c == '\\') {
        if (pos_ >= s_.size()) return Error(at, "unterminated string");
        char e = Advance();
        if (e == 'n') {
          out += '\n';
        } else if (e == 'x') {
          if (pos_ + 2 > s_.size()) return Error(at, "bad \\x escape");
          int v = 0;
          for (int k = 0; k < 2; ++k) {
            char h = Advance();
            v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                       : (std::tolower(h) - 'a' + 10));
          }
          out += static_cast<char>(v);
        } else {
          out += e;
        }
      } else {
        out += c;
      }
    }
    return out;
  }

  absl::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

// A node whose inputs are resolved after the whole graph is read (forward references).
struct PendingNode {
  Node* node;
  std::vector<std::pair<std::string, Token>> inputs;  // "" name = omitted
};

class Parser {
 public:
  explicit Parser(absl::string_view text) : lex_(text) {}

  absl::Status Init() { return Advance(); }

  absl::StatusOr<std::unique_ptr<Graph>> ParseGraphBlock() {
    OTTR_RETURN_IF_ERROR(ExpectIdent("graph"));
    if (cur_.kind != Tok::kString) return Err("expected the graph name as a string");
    auto g = std::make_unique<Graph>(cur_.text);
    OTTR_RETURN_IF_ERROR(Advance());
    OTTR_RETURN_IF_ERROR(ExpectPunct("{"));
    std::vector<PendingNode> pending;
    // A placeholder value per node input is impossible before its producer exists, so nodes are
    // created with no inputs and wired once every line has been read.
    std::vector<std::pair<std::string, Token>> output_names;
    struct PendingUpdate {
      std::string target, value;
      Token at;
    };
    std::vector<PendingUpdate> update_names;
    while (!IsPunct("}")) {
      if (cur_.kind == Tok::kEnd) return Err("unexpected end of text inside graph");
      if (IsIdent("opset")) {
        OTTR_RETURN_IF_ERROR(Advance());
        if (cur_.kind != Tok::kIdent) return Err("expected a domain after 'opset'");
        std::string domain = cur_.text == "ai.onnx" ? "" : cur_.text;
        OTTR_RETURN_IF_ERROR(Advance());
        OTTR_ASSIGN_OR_RETURN(int64_t v, ParseInt());
        g->set_opset_import(domain, v);
      } else if (IsIdent("input") || IsIdent("init") || IsIdent("capture")) {
        const std::string what = cur_.text;
        OTTR_RETURN_IF_ERROR(Advance());
        Token at = cur_;
        OTTR_ASSIGN_OR_RETURN(std::string name, ParseValueName());
        OTTR_RETURN_IF_ERROR(ExpectPunct(":"));
        OTTR_ASSIGN_OR_RETURN(TensorType type, ParseType());
        absl::StatusOr<Value*> v;
        if (what == "input") {
          v = g->AddInput(name, type);
        } else if (what == "capture") {
          v = g->AddCapture(name, type);
        } else {
          OTTR_RETURN_IF_ERROR(ExpectPunct("="));
          OTTR_ASSIGN_OR_RETURN(Tensor t, ParseTensorBody(type));
          v = g->AddInitializer(name, std::move(t));
        }
        if (!v.ok()) return Lexer::Error(at, v.status().message());
      } else if (IsIdent("update")) {
        OTTR_RETURN_IF_ERROR(Advance());
        Token at = cur_;
        OTTR_ASSIGN_OR_RETURN(std::string target, ParseValueName());
        OTTR_RETURN_IF_ERROR(ExpectPunct("<"));
        if (!IsPunct("-") && !(cur_.kind == Tok::kNumber && cur_.text == "-")) {
          return Err("expected '<-' in an update");
        }
        OTTR_RETURN_IF_ERROR(Advance());
        OTTR_ASSIGN_OR_RETURN(std::string value, ParseValueName());
        update_names.push_back({target, value, at});
      } else if (IsIdent("output")) {
        OTTR_RETURN_IF_ERROR(Advance());
        while (true) {
          output_names.push_back({"", cur_});
          OTTR_ASSIGN_OR_RETURN(output_names.back().first, ParseValueName());
          if (!IsPunct(",")) break;
          OTTR_RETURN_IF_ERROR(Advance());
        }
      } else {
        OTTR_RETURN_IF_ERROR(ParseNode(*g, pending));
      }
    }
    OTTR_RETURN_IF_ERROR(Advance());  // }
    for (PendingNode& p : pending) {
      for (const auto& [name, tok] : p.inputs) {
        Value* v = nullptr;
        if (!name.empty()) {
          v = g->FindValue(name);
          if (v == nullptr) return Lexer::Error(tok, absl::StrCat("undefined value %", name));
        }
        g->AppendNodeInput(p.node, v);
      }
    }
    for (const auto& [name, tok] : output_names) {
      Value* v = g->FindValue(name);
      if (v == nullptr) return Lexer::Error(tok, absl::StrCat("undefined output %", name));
      g->AddOutput(v);
    }
    for (const PendingUpdate& u : update_names) {
      Value* t = g->FindValue(u.target);
      Value* v = g->FindValue(u.value);
      if (t == nullptr || v == nullptr) return Lexer::Error(u.at, "update names an undefined value");
      absl::Status s = g->AddUpdate(t, v);
      if (!s.ok()) return Lexer::Error(u.at, s.message());
    }
    return g;
  }

  bool AtEnd() const { return cur_.kind == Tok::kEnd; }
  absl::Status Err(absl::string_view msg) const { return Lexer::Error(cur_, msg); }

 private:
  absl::Status Advance() {
    OTTR_ASSIGN_OR_RETURN(cur_, lex_.Next());
    return absl::OkStatus();
  }
  bool IsPunct(absl::string_view p) const { return cur_.kind == Tok::kPunct && cur_.text == p; }
  bool IsIdent(absl::string_view p) const { return cur_.kind == Tok::kIdent && cur_.text == p; }
  absl::Status ExpectPunct(absl::string_view p) {
    if (!IsPunct(p)) return Err(absl::StrCat("expected '", p, "', found '", cur_.text, "'"));
    return Advance();
  }
  absl::Status ExpectIdent(absl::string_view p) {
    if (!IsIdent(p)) return Err(absl::StrCat("expected '", p, "', found '", cur_.text, "'"));
    return Advance();
  }
  absl::StatusOr<std::string> ParseValueName() {
    if (cur_.kind != Tok::kValueName) return Err("expected a %value name");
    std::string n = cur_.text;
    OTTR_RETURN_IF_ERROR(Advance());
    return n;
  }
  absl::StatusOr<int64_t> ParseInt() {
    int64_t v;
    if (cur_.kind != Tok::kNumber || !absl::SimpleAtoi(cur_.text, &v)) return Err("expected an integer");
    OTTR_RETURN_IF_ERROR(Advance());
    return v;
  }
  absl::StatusOr<double> ParseDouble() {
    double v;
    if (cur_.kind == Tok::kIdent && (cur_.text == "nan" || cur_.text == "inf")) {
      v = cur_.text == "nan" ? std::numeric_limits<double>::quiet_NaN()
                             : std::numeric_limits<double>::infinity();
    } else if (cur_.kind == Tok::kNumber && cur_.text == "-" ) {
      return Err("expected a number");
    } else if (cur_.kind == Tok::kNumber && (cur_.text == "-inf" || cur_.text == "+inf")) {
      v = cur_.text[0] == '-' ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
    } else if (cur_.kind != Tok::kNumber || !absl::SimpleAtod(cur_.text, &v)) {
      return Err("expected a number");
    }
    OTTR_RETURN_IF_ERROR(Advance());
    return v;
  }

  absl::StatusOr<TensorType> ParseType() {
    if (cur_.kind != Tok::kIdent) return Err("expected an element type");
    TensorType t;
    if (cur_.text == "undefined") {
      t.dtype = DType::kUndefined;
    } else {
      auto d = DTypeFromName(cur_.text);
      if (!d.ok()) return Err(d.status().message());
      t.dtype = *d;
    }
    OTTR_RETURN_IF_ERROR(Advance());
    OTTR_RETURN_IF_ERROR(ExpectPunct("["));
    if (IsPunct("*")) {
      OTTR_RETURN_IF_ERROR(Advance());
      OTTR_RETURN_IF_ERROR(ExpectPunct("]"));
      return t;
    }
    Shape s;
    while (!IsPunct("]")) {
      if (cur_.kind == Tok::kNumber) {
        OTTR_ASSIGN_OR_RETURN(int64_t v, ParseInt());
        s.emplace_back(v);
      } else if (cur_.kind == Tok::kIdent) {
        s.push_back(Dim::Symbol(cur_.text));
        OTTR_RETURN_IF_ERROR(Advance());
      } else if (IsPunct("?")) {
        s.emplace_back();
        OTTR_RETURN_IF_ERROR(Advance());
      } else {
        return Err("expected a dimension");
      }
      if (IsPunct(",")) OTTR_RETURN_IF_ERROR(Advance());
    }
    OTTR_RETURN_IF_ERROR(Advance());
    t.shape = std::move(s);
    return t;
  }

  // `[v, v, ...]` or `elided` for a tensor of the given static type.
  absl::StatusOr<Tensor> ParseTensorBody(const TensorType& type) {
    if (!type.is_static()) return Err("a constant needs a static shape");
    Tensor t(type.dtype, StaticDims(*type.shape));
    if (IsIdent("elided")) {
      OTTR_RETURN_IF_ERROR(Advance());
      return t;  // zeros
    }
    OTTR_RETURN_IF_ERROR(ExpectPunct("["));
    int64_t i = 0;
    while (!IsPunct("]")) {
      if (i >= t.num_elements()) return Err("too many elements for the tensor's shape");
      const std::string text = cur_.text;
      absl::Status st = VisitDType(type.dtype, [&]<typename T>() -> absl::Status {
        if constexpr (std::is_void_v<T>) {
          return Err("unsupported element type in a constant");
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          uint64_t v;
          if (!absl::SimpleAtoi(text, &v)) return Err("expected an unsigned integer");
          t.data<T>()[i] = v;
          return Advance();
        } else if constexpr (std::is_integral_v<T>) {
          int64_t v;
          if (!absl::SimpleAtoi(text, &v)) return Err("expected an integer");
          t.data<T>()[i] = static_cast<T>(v);
          return Advance();
        } else {
          OTTR_ASSIGN_OR_RETURN(double v, ParseDouble());
          t.data<T>()[i] = FromDouble<T>(v);
          return absl::OkStatus();
        }
      });
      OTTR_RETURN_IF_ERROR(st);
      ++i;
      if (IsPunct(",")) OTTR_RETURN_IF_ERROR(Advance());
    }
    if (i != t.num_elements()) return Err("too few elements for the tensor's shape");
    OTTR_RETURN_IF_ERROR(Advance());
    return t;
  }

  absl::StatusOr<Attribute> ParseAttribute() {
    if (cur_.kind == Tok::kString) {
      std::string s = cur_.text;
      OTTR_RETURN_IF_ERROR(Advance());
      return Attribute(std::move(s));
    }
    if (cur_.kind == Tok::kNumber || IsIdent("nan") || IsIdent("inf")) {
      const std::string text = cur_.text;
      if (text.find_first_of(".eEn") == std::string::npos) {
        OTTR_ASSIGN_OR_RETURN(int64_t v, ParseInt());
        return Attribute(v);
      }
      OTTR_ASSIGN_OR_RETURN(double v, ParseDouble());
      return Attribute(static_cast<float>(v));
    }
    if (IsIdent("ints") || IsIdent("floats") || IsIdent("strings")) {
      const std::string kind = cur_.text;
      OTTR_RETURN_IF_ERROR(Advance());
      OTTR_RETURN_IF_ERROR(ExpectPunct("["));
      std::vector<int64_t> ints;
      std::vector<float> floats;
      std::vector<std::string> strings;
      while (!IsPunct("]")) {
        if (kind == "ints") {
          OTTR_ASSIGN_OR_RETURN(int64_t v, ParseInt());
          ints.push_back(v);
        } else if (kind == "floats") {
          OTTR_ASSIGN_OR_RETURN(double v, ParseDouble());
          floats.push_back(static_cast<float>(v));
        } else {
          if (cur_.kind != Tok::kString) return Err("expected a string");
          strings.push_back(cur_.text);
          OTTR_RETURN_IF_ERROR(Advance());
        }
        if (IsPunct(",")) OTTR_RETURN_IF_ERROR(Advance());
      }
      OTTR_RETURN_IF_ERROR(Advance());
      if (kind == "ints") return Attribute(std::move(ints));
      if (kind == "floats") return Attribute(std::move(floats));
      return Attribute(std::move(strings));
    }
    if (IsIdent("tensor")) {
      OTTR_RETURN_IF_ERROR(Advance());
      OTTR_RETURN_IF_ERROR(ExpectPunct("<"));
      OTTR_ASSIGN_OR_RETURN(TensorType type, ParseType());
      OTTR_ASSIGN_OR_RETURN(Tensor t, ParseTensorBody(type));
      OTTR_RETURN_IF_ERROR(ExpectPunct(">"));
      return Attribute(std::move(t));
    }
    if (IsIdent("graph")) {
      OTTR_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ParseGraphBlock());
      return Attribute(std::shared_ptr<Graph>(std::move(g)));
    }
    return Err("expected an attribute value");
  }

  absl::Status ParseNode(Graph& g, std::vector<PendingNode>& pending) {
    std::vector<std::pair<std::string, TensorType>> outs;
    Token first = cur_;
    if (IsPunct("(")) {  // "()" = no outputs
      OTTR_RETURN_IF_ERROR(Advance());
      OTTR_RETURN_IF_ERROR(ExpectPunct(")"));
    } else {
      while (true) {
        OTTR_ASSIGN_OR_RETURN(std::string name, ParseValueName());
        OTTR_RETURN_IF_ERROR(ExpectPunct(":"));
        OTTR_ASSIGN_OR_RETURN(TensorType type, ParseType());
        outs.push_back({std::move(name), std::move(type)});
        if (!IsPunct(",")) break;
        OTTR_RETURN_IF_ERROR(Advance());
      }
    }
    OTTR_RETURN_IF_ERROR(ExpectPunct("="));
    if (cur_.kind != Tok::kIdent) return Err("expected an op name");
    NodeSpec spec;
    spec.op_type = cur_.text;
    OTTR_RETURN_IF_ERROR(Advance());
    if (IsPunct("::")) {
      OTTR_RETURN_IF_ERROR(Advance());
      if (cur_.kind != Tok::kIdent) return Err("expected an op name after '::'");
      spec.domain = spec.op_type;
      spec.op_type = cur_.text;
      OTTR_RETURN_IF_ERROR(Advance());
    }
    OTTR_RETURN_IF_ERROR(ExpectPunct("("));
    PendingNode p{nullptr, {}};
    while (!IsPunct(")")) {
      if (IsIdent("_")) {
        p.inputs.push_back({"", cur_});
        OTTR_RETURN_IF_ERROR(Advance());
      } else {
        Token at = cur_;
        OTTR_ASSIGN_OR_RETURN(std::string name, ParseValueName());
        p.inputs.push_back({std::move(name), at});
      }
      if (IsPunct(",")) OTTR_RETURN_IF_ERROR(Advance());
    }
    OTTR_RETURN_IF_ERROR(Advance());
    if (IsPunct("{")) {
      OTTR_RETURN_IF_ERROR(Advance());
      while (!IsPunct("}")) {
        if (cur_.kind != Tok::kIdent) return Err("expected an attribute name");
        std::string name = cur_.text;
        OTTR_RETURN_IF_ERROR(Advance());
        OTTR_RETURN_IF_ERROR(ExpectPunct("="));
        OTTR_ASSIGN_OR_RETURN(Attribute a, ParseAttribute());
        spec.attrs[name] = std::move(a);
        if (IsPunct(",")) OTTR_RETURN_IF_ERROR(Advance());
      }
      OTTR_RETURN_IF_ERROR(Advance());
    }
    if (IsIdent("origin")) {
      OTTR_RETURN_IF_ERROR(Advance());
      if (cur_.kind != Tok::kString) return Err("expected the origin as a string");
      spec.origin = cur_.text;
      OTTR_RETURN_IF_ERROR(Advance());
    }
    for (const auto& [name, type] : outs) spec.output_names.push_back(name);
    auto node = g.AddNode(std::move(spec));
    if (!node.ok()) return Lexer::Error(first, node.status().message());
    for (size_t i = 0; i < outs.size(); ++i) (*node)->output(i)->set_type(outs[i].second);
    p.node = *node;
    pending.push_back(std::move(p));
    return absl::OkStatus();
  }

  Lexer lex_;
  Token cur_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text) {
  Parser p(text);
  OTTR_RETURN_IF_ERROR(p.Init());
  OTTR_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, p.ParseGraphBlock());
  if (!p.AtEnd()) return p.Err("unexpected text after the graph");
  return g;
}

}  // namespace ottr::ir
