#include "ir/printer.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ottr::ir {
namespace {

bool IsBareNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == ':' || c == '/' || c == '-';
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string FormatFloat(double v, bool is_double) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = is_double ? absl::StrFormat("%.17g", v) : absl::StrFormat("%.9g", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string FormatElements(const Tensor& t) {
  std::string out;
  const bool fp = IsFloat(t.dtype());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (i) out += ", ";
    VisitDType(t.dtype(), [&]<typename T>() {
      if constexpr (std::is_void_v<T>) {
        out += "?";
      } else if constexpr (std::is_same_v<T, uint64_t>) {
        absl::StrAppend(&out, t.data<uint64_t>()[i]);
      } else if constexpr (std::is_integral_v<T>) {
        absl::StrAppend(&out, static_cast<int64_t>(t.data<T>()[i]));
      } else {
        (void)fp;
        out += FormatFloat(ToDouble(t.data<T>()[i]), std::is_same_v<T, double>);
      }
    });
  }
  return out;
}

std::string FormatTensorBody(const Tensor& t, const PrintOptions& o) {
  if (o.max_inline_elements >= 0 && t.num_elements() > o.max_inline_elements) return "elided";
  return absl::StrCat("[", FormatElements(t), "]");
}

void PrintGraphInto(const Graph& g, const PrintOptions& o, int indent, std::string& out);

std::string FormatAttribute(const Attribute& a, const PrintOptions& o, int indent) {
  switch (a.kind()) {
    case Attribute::Kind::kInt: return absl::StrCat(a.i());
    case Attribute::Kind::kFloat: return FormatFloat(a.f(), false);
    case Attribute::Kind::kString: return Quote(a.s());
    case Attribute::Kind::kInts: return absl::StrCat("ints[", absl::StrJoin(a.ints(), ", "), "]");
    case Attribute::Kind::kFloats:
      return absl::StrCat("floats[", absl::StrJoin(a.floats(), ", ", [](std::string* s, float f) {
                            s->append(FormatFloat(f, false));
                          }), "]");
    case Attribute::Kind::kStrings:
      return absl::StrCat("strings[", absl::StrJoin(a.strings(), ", ", [](std::string* s,
                                                                           const std::string& x) {
                            s->append(Quote(x));
                          }), "]");
    case Attribute::Kind::kTensor:
      return absl::StrCat("tensor<", a.t().type().ToString(), " ", FormatTensorBody(a.t(), o), ">");
    case Attribute::Kind::kGraph: {
      std::string s;
      PrintGraphInto(*a.g(), o, indent, s);
      while (!s.empty() && s.back() == '\n') s.pop_back();
      // Drop the leading indentation of the first line: it follows "name = ".
      return std::string(absl::StripLeadingAsciiWhitespace(s));
    }
  }
  return "?";
}

std::string FormatNode(const Node& n, const PrintOptions& o, int indent) {
  std::string out;
  if (n.num_outputs() == 0) {
    out = "()";
  } else {
    out = absl::StrJoin(n.outputs(), ", ", [](std::string* s, const Value* v) {
      absl::StrAppend(s, PrintValueName(v->name()), " : ", v->type().ToString());
    });
  }
  absl::StrAppend(&out, " = ");
  if (!n.domain().empty()) absl::StrAppend(&out, n.domain(), "::");
  absl::StrAppend(&out, n.op_type(), "(",
                  absl::StrJoin(n.inputs(), ", ", [](std::string* s, const Value* v) {
                    s->append(v ? PrintValueName(v->name()) : "_");
                  }), ")");
  if (!n.attrs().empty()) {
    absl::StrAppend(&out, " {");
    bool first = true;
    for (const auto& [name, a] : n.attrs()) {
      absl::StrAppend(&out, first ? "" : ", ", name, " = ", FormatAttribute(a, o, indent));
      first = false;
    }
    absl::StrAppend(&out, "}");
  }
  absl::StrAppend(&out, " origin ", Quote(n.origin()));
  return out;
}

void PrintGraphInto(const Graph& g, const PrintOptions& o, int indent, std::string& out) {
  const std::string pad(indent, ' ');
  const std::string in(indent + 2, ' ');
  absl::StrAppend(&out, pad, "graph ", Quote(g.name()), " {\n");
  for (const auto& [domain, version] : g.opset_imports()) {
    absl::StrAppend(&out, in, "opset ", domain.empty() ? "ai.onnx" : domain, " ", version, "\n");
  }
  for (const Value* v : g.inputs()) {
    absl::StrAppend(&out, in, "input ", PrintValueName(v->name()), " : ", v->type().ToString(),
                    "\n");
  }
  for (const Value* v : g.initializers()) {
    absl::StrAppend(&out, in, "init ", PrintValueName(v->name()), " : ", v->type().ToString(),
                    " = ", FormatTensorBody(*v->initializer(), o), "\n");
  }
  for (const Value* v : g.captures()) {
    absl::StrAppend(&out, in, "capture ", PrintValueName(v->name()), " : ", v->type().ToString(),
                    "\n");
  }
  auto order = g.TopoOrder();
  const std::vector<Node*> nodes = order.ok() ? *order : g.nodes();
  for (const Node* n : nodes) absl::StrAppend(&out, in, FormatNode(*n, o, indent + 2), "\n");
  if (!g.outputs().empty()) {
    absl::StrAppend(&out, in, "output ",
                    absl::StrJoin(g.outputs(), ", ", [](std::string* s, const Value* v) {
                      s->append(PrintValueName(v->name()));
                    }), "\n");
  }
  for (const StateUpdate& u : g.updates()) {
    absl::StrAppend(&out, in, "update ", PrintValueName(u.target->name()), " <- ",
                    PrintValueName(u.value->name()), "\n");
  }
  absl::StrAppend(&out, pad, "}\n");
}

}  // namespace

std::string PrintValueName(const std::string& name) {
  bool bare = !name.empty();
  for (char c : name) bare = bare && IsBareNameChar(c);
  return bare ? absl::StrCat("%", name) : absl::StrCat("%", Quote(name));
}

std::string PrintNode(const Node& node, const PrintOptions& options) {
  return FormatNode(node, options, 0);
}

std::string PrintGraph(const Graph& graph, const PrintOptions& options) {
  std::string out;
  PrintGraphInto(graph, options, 0, out);
  return out;
}

}  // namespace ottr::ir
