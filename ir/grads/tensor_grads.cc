// Gradient rules of the tensor family (layout, indexing and generator ops) and the ottr-domain
// backward ops they emit:
//
//   ottr::SliceGrad(dY, starts, ends, [axes], [steps]) {shape} -> dX
//     dX = zeros(shape); dX[Slice(starts, ends, axes, steps)] = dY. Takes Slice's own index
//     inputs, so the slice need not be known when the rule runs; any step, also negative.
//   ottr::GatherGrad(dY, indices) {axis, shape} -> dX
//     dX = zeros(shape); dX[..., indices[j], ...] += dY[..., j, ...] (scatter-add over axis).
//   ottr::GatherElementsGrad(dY, indices) {axis, shape} -> dX
//     dX = zeros(shape); dX[i with i_axis = indices[k]] += dY[k] for every position k.
//   ottr::PadGrad(dY, pads, [axes]) {mode, shape} -> dX
//     dX = zeros(shape); dX[source(o)] += dY[o] for every position o of Pad's output, with
//     source() the element Pad copied there (none for the constant padding).
//
// `shape` is the forward input's static shape (the training graph has static shapes); the CPU
// kernels are in runtime/cpu/tensor_kernels.cc and tensor_index_kernels.cc.
//
// Not differentiable (marked in their schemas): Shape, Size, Constant, ConstantOfShape, Range,
// OneHot (integer or shape results, or no float input), and the control-flow ops Loop and If.
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/gradient.h"
#include "ir/grads/tensor_grad_util.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

using K = Attribute::Kind;
using grad_util::InputsFrom;
using grad_util::KnownInts;
using grad_util::StaticDimsOf;
using grad_util::Zeros;

// The ottr domain as a std::string (a function, not a global: no static-initialization order).
std::string Ottr() { return std::string(kOttrDomain); }

// True when the rule has nothing to do: no gradient flows in or input 0 needs none.
bool NothingToDo(const GradientBuilder& b) {
  return b.output_grad(0) == nullptr || !b.needs_input_grad(0);
}

// Y = reshape(X) (Reshape, Flatten, Squeeze, Unsqueeze, Identity): dX = reshape(dY, shape(X)).
absl::Status ReshapeLikeGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.ReshapeTo(b.output_grad(0), b.input(0)->type()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = transpose(X, perm), Y[i] = X[perm-indexed i]: dX = transpose(dY, perm⁻¹) with
// perm⁻¹[perm[i]] = i. The default perm (reversal) is its own inverse.
absl::Status TransposeGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  const std::vector<int64_t> perm = b.node().GetInts("perm");
  std::map<std::string, Attribute> attrs;
  if (!perm.empty()) {
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
      if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(perm.size())) {
        return b.Error(absl::StrCat("perm [", absl::StrJoin(perm, ","), "] is not a permutation"));
      }
      inv[perm[i]] = static_cast<int64_t>(i);
    }
    attrs["perm"] = Attribute(inv);
  }
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("Transpose", {b.output_grad(0)}, attrs));
  OTTR_ASSIGN_OR_RETURN(dx, b.ReshapeTo(dx, b.input(0)->type()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = expand(X, shape) (broadcast): dX = sum of dY over the broadcast dims, reshaped to X.
absl::Status ExpandGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.SumToShape(b.output_grad(0), b.input(0)->type()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = tile(X, r), Y[j] = X[j mod d] per axis: view dY [r0·d0, r1·d1, ...] as
// [r0, d0, r1, d1, ...]; dX = ReduceSum over the r axes (keepdims 0).
absl::Status TileGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> y_dims, StaticDimsOf(b, b.output(0)));
  if (x_dims.size() != y_dims.size()) return b.Error("output rank differs from the input's");
  if (NumElements(x_dims) == 0) {
    OTTR_ASSIGN_OR_RETURN(Value * z, Zeros(b, b.input(0)->type().dtype, x_dims));
    b.set_input_grad(0, z);
    return absl::OkStatus();
  }
  std::vector<int64_t> split_dims, axes;
  for (size_t a = 0; a < x_dims.size(); ++a) {
    const int64_t r = y_dims[a] / x_dims[a];
    if (r == 1) {
      split_dims.push_back(x_dims[a]);
      continue;
    }
    axes.push_back(static_cast<int64_t>(split_dims.size()));
    split_dims.push_back(r);
    split_dims.push_back(x_dims[a]);
  }
  Value* dx = b.output_grad(0);
  if (!axes.empty()) {
    OTTR_ASSIGN_OR_RETURN(Value * shape, b.Ints(split_dims));
    OTTR_ASSIGN_OR_RETURN(Value * split, b.Emit1("Reshape", {dx, shape}));
    OTTR_ASSIGN_OR_RETURN(Value * ax, b.Ints(axes));
    OTTR_ASSIGN_OR_RETURN(dx,
                          b.Emit1("ReduceSum", {split, ax}, {{"keepdims", Attribute(int64_t{0})}}));
  }
  OTTR_ASSIGN_OR_RETURN(dx, b.ReshapeTo(dx, b.input(0)->type()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = concat(X_0, ..., X_n-1, axis): dX_i = the i-th slab of dY along axis (one Split).
absl::Status ConcatGradient(GradientBuilder& b) {
  if (b.output_grad(0) == nullptr) return absl::OkStatus();
  const int n = b.node().num_inputs();
  if (n == 1) {
    OTTR_ASSIGN_OR_RETURN(Value * dx, b.ReshapeTo(b.output_grad(0), b.input(0)->type()));
    b.set_input_grad(0, dx);
    return absl::OkStatus();
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> y_dims, StaticDimsOf(b, b.output(0)));
  const int64_t rank = static_cast<int64_t>(y_dims.size());
  int64_t axis = b.node().GetInt("axis", 0);
  if (axis < -rank || axis >= rank) return b.Error(absl::StrCat("axis ", axis, " is out of range"));
  if (axis < 0) axis += rank;
  std::vector<int64_t> sizes;
  for (int i = 0; i < n; ++i) {
    OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> d, StaticDimsOf(b, b.input(i)));
    sizes.push_back(d[axis]);
  }
  OTTR_ASSIGN_OR_RETURN(Value * split, b.Ints(sizes));
  OTTR_ASSIGN_OR_RETURN(std::vector<Value*> parts,
                        b.Emit("Split", {b.output_grad(0), split}, {{"axis", Attribute(axis)}}, n));
  for (int i = 0; i < n; ++i) b.set_input_grad(i, parts[i]);
  return absl::OkStatus();
}

// (Y_0, ..., Y_n-1) = split(X, axis): dX = concat(dY_0, ..., dY_n-1, axis), zeros standing in for
// the outputs no gradient flows into.
absl::Status SplitGradient(GradientBuilder& b) {
  if (!b.needs_input_grad(0)) return absl::OkStatus();
  std::vector<Value*> parts;
  for (int k = 0; k < b.node().num_outputs(); ++k) {
    Value* g = b.output_grad(k);
    if (g == nullptr) {
      OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> d, StaticDimsOf(b, b.output(k)));
      OTTR_ASSIGN_OR_RETURN(g, Zeros(b, b.output(k)->type().dtype, d));
    }
    parts.push_back(g);
  }
  OTTR_ASSIGN_OR_RETURN(
      Value * dx, b.Emit1("Concat", parts, {{"axis", Attribute(b.node().GetInt("axis", 0))}}));
  OTTR_ASSIGN_OR_RETURN(dx, b.ReshapeTo(dx, b.input(0)->type()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = X[starts:ends:steps] on axes: dX = zeros(shape(X)) with dY written back into the sliced
// positions (ottr::SliceGrad; the positions are distinct, so no accumulation).
absl::Status SliceGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  std::vector<Value*> inputs = {b.output_grad(0)};
  for (Value* v : InputsFrom(b, 1)) inputs.push_back(v);
  OTTR_ASSIGN_OR_RETURN(Value * dx,
                        b.Emit1("SliceGrad", inputs, {{"shape", Attribute(x_dims)}}, Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = pad(X, pads, mode, c). constant: Y is X cropped by the negative pads and surrounded by c,
// so dX = pad(dY, -pads) with zeros (one Pad), and dc = Σ dY over the padding = Σ dY - Σ dX.
// reflect/edge/wrap: every Y element is a copy of one X element, dX = scatter-add of dY onto
// those sources (ottr::PadGrad); c is unused (dc = 0).
absl::Status PadGradient(GradientBuilder& b) {
  if (b.output_grad(0) == nullptr) return absl::OkStatus();
  const std::string mode = b.node().GetString("mode", "constant");
  const bool value_grad = b.node().num_inputs() > 2 && b.needs_input_grad(2);
  if (!b.needs_input_grad(0) && !value_grad) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  Value* axes = b.node().num_inputs() > 3 ? b.input(3) : nullptr;
  Value* dx = nullptr;
  if (mode == "constant") {
    std::optional<std::vector<int64_t>> pads = KnownInts(b.input(1));
    if (!pads) return b.Error("pads must be a constant (initializer or Constant node)");
    for (int64_t& p : *pads) p = -p;
    OTTR_ASSIGN_OR_RETURN(Value * neg, b.Ints(*pads));
    std::vector<Value*> inputs = {b.output_grad(0), neg};
    if (axes != nullptr) inputs.insert(inputs.end(), {nullptr, axes});
    OTTR_ASSIGN_OR_RETURN(dx, b.Emit1("Pad", inputs, {{"mode", Attribute("constant")}}));
    OTTR_ASSIGN_OR_RETURN(dx, b.ReshapeTo(dx, b.input(0)->type()));
    if (value_grad) {
      const std::map<std::string, Attribute> all = {{"keepdims", Attribute(int64_t{0})}};
      OTTR_ASSIGN_OR_RETURN(Value * total, b.Emit1("ReduceSum", {b.output_grad(0)}, all));
      OTTR_ASSIGN_OR_RETURN(Value * inner, b.Emit1("ReduceSum", {dx}, all));
      OTTR_ASSIGN_OR_RETURN(Value * dc, b.Emit1("Sub", {total, inner}));
      OTTR_ASSIGN_OR_RETURN(dc, b.ReshapeTo(dc, b.input(2)->type()));
      b.set_input_grad(2, dc);
    }
  } else {
    if (value_grad) {
      OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> c_dims, StaticDimsOf(b, b.input(2)));
      OTTR_ASSIGN_OR_RETURN(Value * dc, Zeros(b, b.input(2)->type().dtype, c_dims));
      b.set_input_grad(2, dc);
    }
    if (!b.needs_input_grad(0)) return absl::OkStatus();
    std::vector<Value*> inputs = {b.output_grad(0), b.input(1)};
    if (axes != nullptr) inputs.push_back(axes);
    OTTR_ASSIGN_OR_RETURN(
        dx, b.Emit1("PadGrad", inputs, {{"mode", Attribute(mode)}, {"shape", Attribute(x_dims)}},
                    Ottr()));
  }
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = gather(X, I, axis): dX = zeros(shape(X)) scatter-added with dY along axis
// (ottr::GatherGrad; repeated indices accumulate). Indices get no gradient.
absl::Status GatherGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("GatherGrad", {b.output_grad(0), b.input(1)},
                                            {{"axis", Attribute(b.node().GetInt("axis", 0))},
                                             {"shape", Attribute(x_dims)}},
                                            Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y[k] = X[k with k_axis = I[k]]: dX = zeros(shape(X)) scatter-added with dY
// (ottr::GatherElementsGrad).
absl::Status GatherElementsGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x_dims, StaticDimsOf(b, b.input(0)));
  OTTR_ASSIGN_OR_RETURN(Value * dx, b.Emit1("GatherElementsGrad", {b.output_grad(0), b.input(1)},
                                            {{"axis", Attribute(b.node().GetInt("axis", 0))},
                                             {"shape", Attribute(x_dims)}},
                                            Ottr()));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = scatter_elements(D, I, U, axis, reduction):
//   none: Y = D with Y[p(k)] = U[k]: dD = dY with the written positions zeroed
//         (ScatterElements(dY, I, 0)), dU[k] = dY[p(k)] (GatherElements). With repeated indices
//         ONNX leaves the winner unspecified; every duplicate then receives dY[p(k)].
//   add:  Y = D; Y[p(k)] += U[k]: dD = dY, dU = GatherElements(dY, I).
//   mul/max/min are not supported (an Unimplemented error when a gradient is needed).
absl::Status ScatterElementsGradient(GradientBuilder& b) {
  Value* dy = b.output_grad(0);
  if (dy == nullptr) return absl::OkStatus();
  const std::string reduction = b.node().GetString("reduction", "none");
  if (reduction != "none" && reduction != "add") {
    return absl::UnimplementedError(
        absl::StrCat("gradient of ", b.node().Describe(), ": reduction '", reduction,
                     "' is not differentiable in ottr (none and add are)"));
  }
  const std::map<std::string, Attribute> axis = {{"axis", Attribute(b.node().GetInt("axis", 0))}};
  if (b.needs_input_grad(0)) {
    Value* dd = dy;
    if (reduction == "none") {
      OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> u_dims, StaticDimsOf(b, b.input(2)));
      OTTR_ASSIGN_OR_RETURN(Value * zeros, Zeros(b, dy->type().dtype, u_dims));
      OTTR_ASSIGN_OR_RETURN(dd, b.Emit1("ScatterElements", {dy, b.input(1), zeros}, axis));
    }
    OTTR_ASSIGN_OR_RETURN(dd, b.ReshapeTo(dd, b.input(0)->type()));
    b.set_input_grad(0, dd);
  }
  if (b.needs_input_grad(2)) {
    OTTR_ASSIGN_OR_RETURN(Value * du, b.Emit1("GatherElements", {dy, b.input(1)}, axis));
    OTTR_ASSIGN_OR_RETURN(du, b.ReshapeTo(du, b.input(2)->type()));
    b.set_input_grad(2, du);
  }
  return absl::OkStatus();
}

// Y = cumsum(X, axis) (inclusive, forward): dX_i = Σ_{j >= i} dY_j, the cumsum of dY in the
// other direction; exclusive stays exclusive (dX_i = Σ_{j > i} dY_j).
absl::Status CumSumGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  const int64_t reverse = b.node().GetInt("reverse", 0) != 0 ? 0 : 1;
  OTTR_ASSIGN_OR_RETURN(Value * dx,
                        b.Emit1("CumSum", {b.output_grad(0), b.input(1)},
                                {{"exclusive", Attribute(b.node().GetInt("exclusive", 0))},
                                 {"reverse", Attribute(reverse)}}));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Y = X ⊙ M with M the triangle mask (upper, k): dX = dY ⊙ M, i.e. Trilu(dY) with the same k.
absl::Status TriluGradient(GradientBuilder& b) {
  if (NothingToDo(b)) return absl::OkStatus();
  std::vector<Value*> inputs = {b.output_grad(0)};
  for (Value* v : InputsFrom(b, 1)) inputs.push_back(v);
  OTTR_ASSIGN_OR_RETURN(
      Value * dx, b.Emit1("Trilu", inputs, {{"upper", Attribute(b.node().GetInt("upper", 1))}}));
  b.set_input_grad(0, dx);
  return absl::OkStatus();
}

// Shape functions of the ottr backward ops: dX has dY's element type and the `shape` attribute.
absl::Status InferGradToShape(InferenceContext& ctx) {
  const Attribute* shape = ctx.node().attr("shape");
  if (shape == nullptr || shape->kind() != K::kInts) {
    return ctx.Error("needs the forward input's dims as the 'shape' attribute");
  }
  for (int64_t d : shape->ints()) {
    if (d < 0)
      return ctx.Error(
          absl::StrCat("shape [", absl::StrJoin(shape->ints(), ","), "] has a negative dim"));
  }
  const TensorType& dy = ctx.input_type(0);
  if (!IsFloat(dy.dtype) && dy.dtype != DType::kUndefined) {
    return ctx.Error(absl::StrCat("dY must be a float tensor, got ", dy.ToString()));
  }
  ctx.set_output_type(0, TensorType(dy.dtype, ShapeFromDims(shape->ints())));
  return absl::OkStatus();
}

absl::Status InferIndexedGrad(InferenceContext& ctx) {
  const DType t = ctx.input_type(1).dtype;
  if (t != DType::kUndefined && t != DType::kInt32 && t != DType::kInt64) {
    return ctx.Error(absl::StrCat("indices must be int32 or int64, got ", DTypeName(t)));
  }
  return InferGradToShape(ctx);
}

absl::Status InferPadGrad(InferenceContext& ctx) {
  const std::string mode = ctx.node().GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return ctx.Error(absl::StrCat("unknown mode '", mode, "' (constant, reflect, edge or wrap)"));
  }
  return InferGradToShape(ctx);
}

}  // namespace

void RegisterTensorGradients(OpRegistry& r) {
  r.Register(OpSchemaBuilder(Ottr(), "SliceGrad")
                 .Inputs(3, 5)
                 .Outputs(1, 1)
                 .Attr("shape", K::kInts, /*required=*/true)
                 .Shape(InferGradToShape)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(Ottr(), "GatherGrad")
                 .Inputs(2, 2)
                 .Outputs(1, 1)
                 .Attr("axis", K::kInt)
                 .Attr("shape", K::kInts, /*required=*/true)
                 .Shape(InferIndexedGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(Ottr(), "GatherElementsGrad")
                 .Inputs(2, 2)
                 .Outputs(1, 1)
                 .Attr("axis", K::kInt)
                 .Attr("shape", K::kInts, /*required=*/true)
                 .Shape(InferIndexedGrad)
                 .NotDifferentiable()
                 .Build());
  r.Register(OpSchemaBuilder(Ottr(), "PadGrad")
                 .Inputs(2, 3)
                 .Outputs(1, 1)
                 .Attr("mode", K::kString)
                 .Attr("shape", K::kInts, /*required=*/true)
                 .Shape(InferPadGrad)
                 .NotDifferentiable()
                 .Build());

  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    r.SetGradient("", op, ReshapeLikeGradient);
  }
  r.SetGradient("", "Transpose", TransposeGradient);
  r.SetGradient("", "Expand", ExpandGradient);
  r.SetGradient("", "Tile", TileGradient);
  r.SetGradient("", "Concat", ConcatGradient);
  r.SetGradient("", "Split", SplitGradient);
  r.SetGradient("", "Slice", SliceGradient);
  r.SetGradient("", "Pad", PadGradient);
  r.SetGradient("", "Gather", GatherGradient);
  r.SetGradient("", "GatherElements", GatherElementsGradient);
  r.SetGradient("", "ScatterElements", ScatterElementsGradient);
  r.SetGradient("", "CumSum", CumSumGradient);
  r.SetGradient("", "Trilu", TriluGradient);
}

}  // namespace ottr::ir
