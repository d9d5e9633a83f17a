#include "importer/canonicalize.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace ottr::importer {
namespace {

using ir::Attribute;
using ir::DType;
using ir::NodeSpec;
using ir::Tensor;

absl::Status Unsupported(const NodeSpec& s, int64_t opset, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat("node '", s.origin, "': op ", s.op_type,
                                               " of domain ai.onnx opset ", opset, ": ", what));
}

// Moves an ints attribute into input slot `index` as an i64 1-D constant (absent attribute:
// the input stays omitted).
absl::Status IntsAttrToInput(NodeSpec& s, const std::string& attr, int index,
                             CanonicalizeContext& ctx) {
  auto it = s.attrs.find(attr);
  if (it == s.attrs.end()) return absl::OkStatus();
  if (it->second.kind() != Attribute::Kind::kInts) {
    return absl::InvalidArgumentError(absl::StrCat("node '", s.origin, "' (", s.op_type,
                                                   "): attribute '", attr, "' must be ints"));
  }
  const std::vector<int64_t> v = it->second.ints();
  s.attrs.erase(it);
  OTTR_ASSIGN_OR_RETURN(ir::Value * c,
                        ctx.AddConstant(absl::StrCat(s.origin, "/", attr),
                                        Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v)));
  if (static_cast<int>(s.inputs.size()) <= index) s.inputs.resize(index + 1, nullptr);
  s.inputs[index] = c;
  return absl::OkStatus();
}

// The element type of input i if known, else `fallback`.
DType InputDType(const NodeSpec& s, int i, DType fallback) {
  if (i < static_cast<int>(s.inputs.size()) && s.inputs[i] != nullptr &&
      s.inputs[i]->type().dtype != DType::kUndefined) {
    return s.inputs[i]->type().dtype;
  }
  return fallback;
}

absl::StatusOr<ir::Value*> ScalarConstant(CanonicalizeContext& ctx, const std::string& hint,
                                          DType dtype, double v) {
  Tensor t(dtype, {});
  ir::VisitDType(dtype, [&]<typename T>() {
    if constexpr (!std::is_void_v<T>) t.data<T>()[0] = ir::FromDouble<T>(v);
  });
  return ctx.AddConstant(hint, std::move(t));
}

absl::StatusOr<bool> CanonicalizeConstant(NodeSpec& s, int64_t opset) {
  if (s.attrs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("node '", s.origin,
                                                   "' (Constant): needs exactly one value attribute"));
  }
  auto [name, a] = *s.attrs.begin();
  Tensor t;
  if (name == "value") {
    return false;
  } else if (name == "value_float") {
    t = Tensor::Scalar<float>(a.f());
  } else if (name == "value_floats") {
    t = Tensor::FromVector<float>({static_cast<int64_t>(a.floats().size())}, a.floats());
  } else if (name == "value_int") {
    t = Tensor::Scalar<int64_t>(a.i());
  } else if (name == "value_ints") {
    t = Tensor::FromVector<int64_t>({static_cast<int64_t>(a.ints().size())}, a.ints());
  } else {
    return Unsupported(s, opset, absl::StrCat("attribute '", name, "' (string or sparse constants)"));
  }
  s.attrs.clear();
  s.attrs["value"] = Attribute(std::move(t));
  return false;
}

// Softmax, LogSoftmax and Hardmax before opset 13 flatten the input to 2-D at `axis` (default 1)
// and normalise over the second dimension. Lowered to Flatten -> op(axis=-1) -> Reshape(Shape(x)).
absl::StatusOr<bool> CanonicalizeSoftmaxFamily(NodeSpec& s, CanonicalizeContext& ctx) {
  int64_t axis = 1;
  if (auto it = s.attrs.find("axis"); it != s.attrs.end()) axis = it->second.i();
  ir::Value* x = s.inputs.empty() ? nullptr : s.inputs[0];
  if (x == nullptr) return false;  // the schema check reports the missing input
  const ir::TensorType& xt = x->type();
  if (xt.has_rank()) {
    const int64_t rank = xt.rank();
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a == rank - 1) {  // coercion is a no-op: same as the opset-13 op on the last axis
      s.attrs["axis"] = Attribute(int64_t{-1});
      return false;
    }
  }
  const std::string base = s.origin;
  OTTR_ASSIGN_OR_RETURN(ir::Node * flat,
                        ctx.AddNode({"Flatten", "", {x}, {ctx.graph().UniqueName(base + "/flat")},
                                     {{"axis", Attribute(axis)}}, base}));
  OTTR_ASSIGN_OR_RETURN(ir::Node * op,
                        ctx.AddNode({s.op_type, "", {flat->output(0)},
                                     {ctx.graph().UniqueName(base + "/2d")},
                                     {{"axis", Attribute(int64_t{1})}}, base}));
  OTTR_ASSIGN_OR_RETURN(ir::Node * shape,
                        ctx.AddNode({"Shape", "", {x}, {ctx.graph().UniqueName(base + "/shape")},
                                     {}, base}));
  OTTR_RETURN_IF_ERROR(ctx.AddNode({"Reshape", "", {op->output(0), shape->output(0)},
                                    s.output_names, {}, base})
                           .status());
  return true;
}

}  // namespace

absl::StatusOr<ir::Value*> CanonicalizeContext::AddConstant(const std::string& hint, Tensor t) {
  return graph_.AddInitializer(graph_.UniqueName(hint), std::move(t));
}

absl::StatusOr<bool> Canonicalize(NodeSpec& s, int64_t opset, CanonicalizeContext& ctx) {
  if (!s.domain.empty()) return false;
  const std::string& op = s.op_type;
  if (op == "Constant") return CanonicalizeConstant(s, opset);

  // Reductions: `axes` attribute became input 1 at opset 13 (ReduceSum) or 18 (the others).
  static const char* const kReduceOps[] = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                           "ReduceProd", "ReduceSumSquare"};
  if (op == "ReduceSum" && opset < 13) {
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "axes", 1, ctx));
    return false;
  }
  for (const char* r : kReduceOps) {
    if (op == r && opset < 18) {
      OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "axes", 1, ctx));
      return false;
    }
  }
  if ((op == "Squeeze" || op == "Unsqueeze") && opset < 13) {
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "axes", 1, ctx));
    return false;
  }
  if (op == "Split" && opset < 13) {
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "split", 1, ctx));
    return false;
  }
  if (op == "Slice" && opset < 10) {
    // Slice-1: starts/ends/axes attributes -> inputs 1..3.
    s.inputs.resize(1);
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "starts", 1, ctx));
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "ends", 2, ctx));
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "axes", 3, ctx));
    return false;
  }
  if (op == "Clip" && opset < 11) {
    // Clip-6: float min/max attributes (defaults: the float range) -> inputs 1 and 2.
    const DType t = InputDType(s, 0, DType::kFloat32);
    s.inputs.resize(3, nullptr);
    if (auto it = s.attrs.find("min"); it != s.attrs.end()) {
      OTTR_ASSIGN_OR_RETURN(s.inputs[1], ScalarConstant(ctx, s.origin + "/min", t, it->second.f()));
      s.attrs.erase(it);
    }
    if (auto it = s.attrs.find("max"); it != s.attrs.end()) {
      OTTR_ASSIGN_OR_RETURN(s.inputs[2], ScalarConstant(ctx, s.origin + "/max", t, it->second.f()));
      s.attrs.erase(it);
    }
    return false;
  }
  if (op == "Pad" && opset < 11) {
    // Pad-2: `pads` and `value` attributes -> inputs 1 and 2.
    const DType t = InputDType(s, 0, DType::kFloat32);
    s.inputs.resize(1);
    if (s.attrs.count("paddings")) {  // Pad-1 spelling
      s.attrs["pads"] = s.attrs["paddings"];
      s.attrs.erase("paddings");
    }
    if (!s.attrs.count("pads")) return Unsupported(s, opset, "Pad without 'pads'");
    OTTR_RETURN_IF_ERROR(IntsAttrToInput(s, "pads", 1, ctx));
    float value = 0.0f;
    if (auto it = s.attrs.find("value"); it != s.attrs.end()) {
      value = it->second.f();
      s.attrs.erase(it);
    }
    s.inputs.resize(3, nullptr);
    OTTR_ASSIGN_OR_RETURN(s.inputs[2], ScalarConstant(ctx, s.origin + "/value", t, value));
    return false;
  }
  if (op == "Dropout" && opset < 12) {
    // Dropout-7..11 has no training mode in ONNX inference semantics: an identity with an all-true
    // mask. The ratio attribute moves to input 1 for completeness.
    if (opset < 10 && s.output_names.size() > 1) {
      return Unsupported(s, opset, "the mask output of Dropout before opset 10 (typed like the data)");
    }
    s.attrs.erase("is_test");
    if (auto it = s.attrs.find("ratio"); it != s.attrs.end()) {
      const DType t = InputDType(s, 0, DType::kFloat32);
      s.inputs.resize(2, nullptr);
      OTTR_ASSIGN_OR_RETURN(s.inputs[1], ScalarConstant(ctx, s.origin + "/ratio", t, it->second.f()));
      s.attrs.erase(it);
    }
    return false;
  }
  if ((op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && opset < 13) {
    return CanonicalizeSoftmaxFamily(s, ctx);
  }
  if (op == "BatchNormalization") {
    if (opset < 9) {
      if (auto it = s.attrs.find("spatial"); it != s.attrs.end()) {
        if (it->second.i() != 1) return Unsupported(s, opset, "spatial=0 (per-activation statistics)");
        s.attrs.erase(it);
      }
    }
    s.attrs.erase("is_test");
    if (opset < 14 && s.output_names.size() > 1) {
      // Before opset 14 the extra outputs (running mean/var, saved mean/var) mean training mode.
      if (s.output_names.size() > 3) {
        for (size_t i = 3; i < s.output_names.size(); ++i) {
          if (!s.output_names[i].empty()) {
            return Unsupported(s, opset, "the saved_mean/saved_var outputs of BatchNormalization");
          }
        }
        s.output_names.resize(3);
      }
      s.attrs["training_mode"] = Attribute(int64_t{1});
    }
    return false;
  }
  return false;
}

}  // namespace ottr::importer
