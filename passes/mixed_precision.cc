#include "passes/mixed_precision.h"

#include <map>
#include <optional>
#include <regex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/status.h"

namespace ottr::passes {
namespace {

using ir::DType;
using ir::Node;
using ir::Value;

constexpr char kName[] = "mixed-precision";

// The policy table: ai.onnx ops that run in the low type. All their float inputs are cast.
bool RunsInLowType(const Node& n) {
  if (!n.domain().empty()) return false;
  const std::string& op = n.op_type();
  return op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose";
}

class MixedPrecisionPass : public Pass {
 public:
  MixedPrecisionPass(DType low, std::string keep_fp32) : low_(low), keep_fp32_(std::move(keep_fp32)) {}
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    if (low_ != DType::kBFloat16 && low_ != DType::kFloat16) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixed precision needs bf16 or f16, not ", ir::DTypeName(low_)));
    }
    std::optional<std::regex> keep;
    if (!keep_fp32_.empty()) {
      try {
        keep.emplace(keep_fp32_);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad --keep-fp32 regex '", keep_fp32_, "': ", e.what()));
      }
    }
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    absl::flat_hash_map<Value*, Value*> low_copy;  // float32 value -> its Cast to the low type
    bool changed = false;
    for (Node* n : order) {
      if (!RunsInLowType(*n)) continue;
      if (std::string why = Declines(*n, keep); !why.empty()) {
        Remark(absl::StrCat("declined ", n->Describe(), ": ", why));
        continue;
      }
      OTTR_RETURN_IF_ERROR(Rewrite(g, *n, low_copy));
      Remark(absl::StrCat("runs ", n->Describe(), " in ", ir::DTypeName(low_)));
      changed = true;
    }
    return changed;
  }

 private:
  // "" when `n` is rewritten, else the reason it is not.
  std::string Declines(const Node& n, const std::optional<std::regex>& keep) const {
    if (keep) {
      if (std::regex_search(n.origin(), *keep)) return "kept in f32 by --keep-fp32 (origin)";
      for (const Value* o : n.outputs()) {
        if (o != nullptr && std::regex_search(o->name(), *keep)) {
          return absl::StrCat("kept in f32 by --keep-fp32 (output '", o->name(), "')");
        }
      }
    }
    if (n.num_outputs() != 1 || n.output(0)->type().dtype != DType::kFloat32) {
      return absl::StrCat("output is ", ir::DTypeName(n.output(0)->type().dtype),
                          ", not f32 (integer, f64, or already low precision)");
    }
    for (int i = 0; i < n.num_inputs(); ++i) {
      const Value* v = n.input(i);
      if (v != nullptr && v->type().dtype != DType::kFloat32) {
        return absl::StrCat("input ", i, " '", v->name(), "' is ", ir::DTypeName(v->type().dtype),
                            ", not f32");
      }
    }
    return "";
  }

  absl::Status Rewrite(ir::Graph& g, Node& n, absl::flat_hash_map<Value*, Value*>& low_copy) {
    const ir::OpRegistry& registry = ir::OpRegistry::Global();
    const std::string suffix = absl::StrCat(".", ir::DTypeName(low_));
    for (int i = 0; i < n.num_inputs(); ++i) {
      Value* v = n.input(i);
      if (v == nullptr) continue;
      Value*& copy = low_copy[v];
      if (copy == nullptr) {
        OTTR_ASSIGN_OR_RETURN(copy, Cast(g, v, low_, g.UniqueName(v->name() + suffix), n.origin()));
      }
      g.SetNodeInput(&n, i, copy);
    }
    Value* out = n.output(0);
    const std::string name = out->name();
    OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(registry, n));  // the output is now the low type
    OTTR_RET_CHECK(out->type().dtype == low_) << n.Describe() << " infers " << out->type().ToString();
    OTTR_ASSIGN_OR_RETURN(Value * back, Cast(g, out, DType::kFloat32, g.UniqueName(name + ".f32"), n.origin()));
    // Every reader of the old float32 value (nodes, graph outputs, state updates) reads the cast
    // back; the cast itself reads the low-type output.
    g.ReplaceAllUsesWith(out, back);
    g.SetNodeInput(back->producer(), 0, out);
    g.RenameValue(out, g.UniqueName(name + suffix));
    g.RenameValue(back, name);
    return absl::OkStatus();
  }

  static absl::StatusOr<Value*> Cast(ir::Graph& g, Value* v, DType to, const std::string& name,
                                     const std::string& origin) {
    OTTR_ASSIGN_OR_RETURN(
        Node * c, g.AddNode({"Cast", "", {v}, {name},
                             {{"to", ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(to)))}}, origin}));
    OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(ir::OpRegistry::Global(), *c));
    return c->output(0);
  }

  void Remark(const std::string& text) const {
    if (remarks() != nullptr) *remarks() << "// " << kName << ": " << text << "\n";
  }

  DType low_;
  std::string keep_fp32_;
};

}  // namespace

std::unique_ptr<Pass> CreateMixedPrecisionPass(ir::DType low, std::string keep_fp32) {
  return std::make_unique<MixedPrecisionPass>(low, std::move(keep_fp32));
}

}  // namespace ottr::passes
