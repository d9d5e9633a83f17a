// Schemas and shape functions of the layout ops: Reshape, Flatten, Transpose, Squeeze, Unsqueeze,
// Expand, Identity, Shape, Size, Concat, Split, Slice, Tile and Pad. The indexing and generator
// ops of the same family are in tensor_index_ops.cc.
//
// Where an output shape depends on input values (Reshape's shape, Slice's starts, Pad's pads...),
// the shape function uses the value when the input is a constant and otherwise leaves the
// affected dims (or the rank) unknown. The arithmetic is shared with the CPU kernels through
// tensor_shape_math.h so that both agree.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"
#include "ir/ops/tensor_shape_math.h"

namespace ottr::ir {

void RegisterTensorIndexOps(OpRegistry& r);  // tensor_index_ops.cc

namespace {

using Kind = Attribute::Kind;

// Converts a helper's error into one naming the node.
absl::Status NodeError(const InferenceContext& ctx, const absl::Status& s) {
  return ctx.Error(s.message());
}

// Values of optional input i: nullopt when absent; `known` false when present but not constant.
struct OptionalInts {
  bool present = false;
  bool known = false;
  std::vector<int64_t> values;
};
OptionalInts GetOptionalInts(const InferenceContext& ctx, int i) {
  OptionalInts o;
  o.present = ctx.has_input(i);
  if (!o.present) return o;
  if (std::optional<std::vector<int64_t>> v = ConstantInts(ctx, i)) {
    o.known = true;
    o.values = std::move(*v);
  }
  return o;
}

// Length of a 1-D input when its shape is static, else -1.
int64_t StaticLength(const InferenceContext& ctx, int i) {
  if (!ctx.has_input(i)) return -1;
  const TensorType& t = ctx.input_type(i);
  if (!t.has_rank() || t.rank() != 1 || !(*t.shape)[0].is_static()) return -1;
  return (*t.shape)[0].value();
}

Shape UnknownDims(int64_t rank) { return Shape(rank, Dim()); }

// Two dims that must be equal at run time: a static one wins; differing static ones are an error.
std::optional<Dim> MergeDims(const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return a.value() == b.value() ? std::optional<Dim>(a) : std::nullopt;
  if (a.is_static()) return a;
  if (b.is_static()) return b;
  if (a.is_symbol()) return a;
  return b;
}

absl::Status InferReshape(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const bool allowzero = ctx.node().GetInt("allowzero", 0) != 0;
  std::optional<std::vector<int64_t>> shape = ConstantInts(ctx, 1);
  if (!shape) {
    const int64_t n = StaticLength(ctx, 1);
    ctx.set_output_type(0, TensorType(in.dtype, n >= 0 ? std::optional<Shape>(UnknownDims(n))
                                                       : std::nullopt));
    return absl::OkStatus();
  }
  if (!in.has_rank()) {
    // Only the explicit dims are known.
    Shape out;
    for (int64_t v : *shape) out.push_back(v > 0 || (v == 0 && allowzero) ? Dim(v) : Dim());
    ctx.set_output_type(0, TensorType(in.dtype, out));
    return absl::OkStatus();
  }
  absl::StatusOr<Shape> out = ResolveReshapeSymbolic(*in.shape, *shape, allowzero);
  if (!out.ok()) return NodeError(ctx, out.status());
  ctx.set_output_type(0, TensorType(in.dtype, *out));
  return absl::OkStatus();
}

absl::Status InferFlatten(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, UnknownDims(2)));
    return absl::OkStatus();
  }
  const int64_t rank = in.rank();
  int64_t axis = ctx.node().GetInt("axis", 1);
  if (axis < -rank || axis > rank) {
    return ctx.Error(absl::StrCat("axis ", axis, " is out of range [", -rank, ", ", rank,
                                  "] for input ", in.ToString()));
  }
  if (axis < 0) axis += rank;
  const Shape& s = *in.shape;
  ctx.set_output_type(0, TensorType(in.dtype, Shape{DimProduct({s.begin(), s.begin() + axis}),
                                                    DimProduct({s.begin() + axis, s.end()})}));
  return absl::OkStatus();
}

absl::Status InferTranspose(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const std::vector<int64_t> perm = ctx.node().GetInts("perm");
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, perm.empty() ? std::nullopt
                                                             : std::optional<Shape>(UnknownDims(perm.size()))));
    return absl::OkStatus();
  }
  const int64_t rank = in.rank();
  Shape out(rank);
  if (perm.empty()) {
    for (int64_t i = 0; i < rank; ++i) out[i] = (*in.shape)[rank - 1 - i];
  } else {
    std::vector<bool> seen(rank, false);
    if (static_cast<int64_t>(perm.size()) != rank) {
      return ctx.Error(absl::StrCat("perm [", absl::StrJoin(perm, ","), "] does not match input ",
                                    in.ToString()));
    }
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t p = perm[i];
      if (p < 0 || p >= rank || seen[p]) {
        return ctx.Error(absl::StrCat("perm [", absl::StrJoin(perm, ","),
                                      "] is not a permutation of 0..", rank - 1));
      }
      seen[p] = true;
      out[i] = (*in.shape)[p];
    }
  }
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

absl::Status InferSqueeze(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  OptionalInts axes = GetOptionalInts(ctx, 1);
  if (!in.has_rank() || (axes.present && !axes.known)) {
    const int64_t n = StaticLength(ctx, 1);
    std::optional<Shape> s;
    if (in.has_rank() && n >= 0) s = UnknownDims(in.rank() - n);
    ctx.set_output_type(0, TensorType(in.dtype, s));
    return absl::OkStatus();
  }
  const Shape& s = *in.shape;
  Shape out;
  if (!axes.present || axes.values.empty()) {
    for (const Dim& d : s) {
      if (!d.is_static()) {  // might be 1 at run time: the rank is unknown
        ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
        return absl::OkStatus();
      }
      if (d.value() != 1) out.push_back(d);
    }
  } else {
    absl::StatusOr<std::vector<int64_t>> ax = WrapAxes(axes.values, in.rank());
    if (!ax.ok()) return NodeError(ctx, ax.status());
    std::vector<bool> drop(s.size(), false);
    for (int64_t a : *ax) {
      if (s[a].is_static() && s[a].value() != 1) {
        return ctx.Error(absl::StrCat("cannot squeeze axis ", a, " of ", in.ToString(),
                                      ": its size is not 1"));
      }
      drop[a] = true;
    }
    for (size_t i = 0; i < s.size(); ++i) {
      if (!drop[i]) out.push_back(s[i]);
    }
  }
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

absl::Status InferUnsqueeze(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  std::optional<std::vector<int64_t>> axes = ConstantInts(ctx, 1);
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  if (!axes) {
    const int64_t n = StaticLength(ctx, 1);
    ctx.set_output_type(0, TensorType(in.dtype, n >= 0 ? std::optional<Shape>(UnknownDims(in.rank() + n))
                                                       : std::nullopt));
    return absl::OkStatus();
  }
  const int64_t out_rank = in.rank() + static_cast<int64_t>(axes->size());
  absl::StatusOr<std::vector<int64_t>> ax = WrapAxes(*axes, out_rank);
  if (!ax.ok()) return NodeError(ctx, ax.status());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *ax) inserted[a] = true;
  Shape out;
  size_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? Dim(1) : (*in.shape)[k++]);
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

absl::Status InferExpand(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  std::optional<std::vector<int64_t>> shape = ConstantInts(ctx, 1);
  if (!shape) {
    const int64_t n = StaticLength(ctx, 1);
    if (!in.has_rank() || n < 0) {
      ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
      return absl::OkStatus();
    }
    // The output keeps the input's static dims > 1 (right-aligned); everything else is unknown.
    const int64_t rank = std::max(in.rank(), n);
    Shape out = UnknownDims(rank);
    for (int64_t i = 0; i < in.rank(); ++i) {
      const Dim& d = (*in.shape)[in.rank() - 1 - i];
      if (d.is_static() && d.value() != 1) out[rank - 1 - i] = d;
    }
    ctx.set_output_type(0, TensorType(in.dtype, out));
    return absl::OkStatus();
  }
  for (int64_t v : *shape) {
    if (v < 0) return ctx.Error(absl::StrCat("shape [", absl::StrJoin(*shape, ","), "] has a negative dim"));
  }
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  std::optional<Shape> out = BroadcastShapes(*in.shape, ShapeFromDims(*shape));
  if (!out) {
    return ctx.Error(absl::StrCat("cannot expand ", in.ToString(), " to [",
                                  absl::StrJoin(*shape, ","), "]"));
  }
  ctx.set_output_type(0, TensorType(in.dtype, *out));
  return absl::OkStatus();
}

// Shape-15's [start, end) range of dims, clamped to [0, rank].
std::pair<int64_t, int64_t> ShapeRange(const Node& node, int64_t rank) {
  int64_t start = node.GetInt("start", 0);
  int64_t end = node.GetInt("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  return {start, end};
}

absl::Status InferShape(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(DType::kInt64, Shape{Dim()}));
    return absl::OkStatus();
  }
  auto [start, end] = ShapeRange(ctx.node(), in.rank());
  ctx.set_output_type(0, TensorType(DType::kInt64, Shape{Dim(std::max<int64_t>(end - start, 0))}));
  return absl::OkStatus();
}

absl::Status InferConcat(InferenceContext& ctx) {
  DType dtype = DType::kUndefined;
  int64_t rank = -1;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("input ", i, " is missing"));
    const TensorType& t = ctx.input_type(i);
    if (t.dtype != DType::kUndefined) {
      if (dtype != DType::kUndefined && dtype != t.dtype) {
        return ctx.Error(absl::StrCat("inputs have different element types ", DTypeName(dtype),
                                      " and ", DTypeName(t.dtype)));
      }
      dtype = t.dtype;
    }
    if (t.has_rank()) {
      if (rank >= 0 && rank != t.rank()) {
        return ctx.Error(absl::StrCat("inputs have different ranks ", rank, " and ", t.rank(),
                                      " (input ", i, " is ", t.ToString(), ")"));
      }
      rank = t.rank();
    }
  }
  if (rank < 0) {
    ctx.set_output_type(0, TensorType(dtype, std::nullopt));
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> axis = WrapAxis(ctx.node().GetInt("axis", 0), rank);
  if (!axis.ok()) return NodeError(ctx, axis.status());
  Shape out = UnknownDims(rank);
  bool first = true;
  bool axis_known = true;
  int64_t axis_sum = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType& t = ctx.input_type(i);
    if (!t.has_rank()) {
      axis_known = false;
      continue;
    }
    for (int64_t d = 0; d < rank; ++d) {
      const Dim& dim = (*t.shape)[d];
      if (d == *axis) {
        if (dim.is_static()) {
          axis_sum += dim.value();
        } else {
          axis_known = false;
        }
        continue;
      }
      std::optional<Dim> m = first ? std::optional<Dim>(dim) : MergeDims(out[d], dim);
      if (!m) {
        return ctx.Error(absl::StrCat("input ", i, " ", t.ToString(), " does not match the other ",
                                      "inputs in dim ", d, " (concatenating on axis ", *axis, ")"));
      }
      out[d] = *m;
    }
    first = false;
  }
  out[*axis] = axis_known ? Dim(axis_sum) : Dim();
  ctx.set_output_type(0, TensorType(dtype, out));
  return absl::OkStatus();
}

absl::Status InferSplit(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const int n_out = ctx.num_outputs();
  if (!in.has_rank()) {
    for (int i = 0; i < n_out; ++i) ctx.set_output_type(i, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> axis = WrapAxis(ctx.node().GetInt("axis", 0), in.rank());
  if (!axis.ok()) return NodeError(ctx, axis.status());
  OptionalInts split = GetOptionalInts(ctx, 1);
  const int64_t num_outputs = ctx.node().GetInt("num_outputs", 0);
  if (split.present && num_outputs > 0) {
    return ctx.Error("the split input and the num_outputs attribute are mutually exclusive");
  }
  const Dim& dim = (*in.shape)[*axis];
  std::vector<Dim> sizes(n_out, Dim());
  if (split.present && split.known) {
    absl::StatusOr<std::vector<int64_t>> s =
        SplitSizes(dim.is_static() ? dim.value() : [&] {
          int64_t sum = 0;
          for (int64_t v : split.values) sum += v;
          return sum;
        }(), split.values, 0, n_out);
    if (!s.ok()) return NodeError(ctx, s.status());
    for (int i = 0; i < n_out; ++i) sizes[i] = Dim((*s)[i]);
  } else if (!split.present && dim.is_static()) {
    absl::StatusOr<std::vector<int64_t>> s =
        SplitSizes(dim.value(), std::nullopt, num_outputs, n_out);
    if (!s.ok()) return NodeError(ctx, s.status());
    for (int i = 0; i < n_out; ++i) sizes[i] = Dim((*s)[i]);
  }
  for (int i = 0; i < n_out; ++i) {
    Shape s = *in.shape;
    s[*axis] = sizes[i];
    ctx.set_output_type(i, TensorType(in.dtype, s));
  }
  return absl::OkStatus();
}

absl::Status InferSlice(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  const int64_t rank = in.rank();
  OptionalInts starts = GetOptionalInts(ctx, 1);
  OptionalInts ends = GetOptionalInts(ctx, 2);
  OptionalInts axes = GetOptionalInts(ctx, 3);
  OptionalInts steps = GetOptionalInts(ctx, 4);
  Shape out = *in.shape;
  if (axes.present && !axes.known) {
    ctx.set_output_type(0, TensorType(in.dtype, UnknownDims(rank)));
    return absl::OkStatus();
  }
  if (!starts.known || !ends.known || (steps.present && !steps.known)) {
    // Which axes are sliced is known (explicit axes, or the first len(starts)); their sizes not.
    if (axes.present) {
      absl::StatusOr<std::vector<int64_t>> ax = WrapAxes(axes.values, rank);
      if (!ax.ok()) return NodeError(ctx, ax.status());
      for (int64_t a : *ax) out[a] = Dim();
    } else {
      int64_t n = starts.known ? static_cast<int64_t>(starts.values.size())
                               : (ends.known ? static_cast<int64_t>(ends.values.size())
                                             : StaticLength(ctx, 1));
      if (n < 0) n = rank;
      for (int64_t a = 0; a < std::min(n, rank); ++a) out[a] = Dim();
    }
    ctx.set_output_type(0, TensorType(in.dtype, out));
    return absl::OkStatus();
  }
  absl::StatusOr<SliceSpec> spec =
      MakeSliceSpec(rank, starts.values, ends.values,
                    axes.present ? std::optional<std::vector<int64_t>>(axes.values) : std::nullopt,
                    steps.present ? std::optional<std::vector<int64_t>>(steps.values) : std::nullopt);
  if (!spec.ok()) return NodeError(ctx, spec.status());
  for (size_t i = 0; i < spec->axes.size(); ++i) {
    const int64_t a = spec->axes[i];
    const Dim& d = (*in.shape)[a];
    if (!d.is_static()) {
      out[a] = Dim();
      continue;
    }
    out[a] = Dim(ComputeSliceRange(d.value(), spec->starts[i], spec->ends[i], spec->steps[i]).count);
  }
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

absl::Status InferTile(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  std::optional<std::vector<int64_t>> repeats = ConstantInts(ctx, 1);
  if (!repeats) {
    ctx.set_output_type(0, TensorType(in.dtype, UnknownDims(in.rank())));
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(repeats->size()) != in.rank()) {
    return ctx.Error(absl::StrCat("repeats [", absl::StrJoin(*repeats, ","),
                                  "] must have one value per dim of ", in.ToString()));
  }
  Shape out = *in.shape;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t r = (*repeats)[i];
    if (r < 0) return ctx.Error(absl::StrCat("repeats [", absl::StrJoin(*repeats, ","), "] has a negative value"));
    out[i] = DimProduct({out[i], Dim(r)});
  }
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

absl::Status InferPad(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const std::string mode = ctx.node().GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return ctx.Error(absl::StrCat("unknown mode '", mode, "' (constant, reflect, edge or wrap)"));
  }
  if (!in.has_rank()) {
    ctx.set_output_type(0, TensorType(in.dtype, std::nullopt));
    return absl::OkStatus();
  }
  OptionalInts pads = GetOptionalInts(ctx, 1);
  OptionalInts axes = GetOptionalInts(ctx, 3);
  if (!pads.known || (axes.present && !axes.known)) {
    Shape out = UnknownDims(in.rank());
    if (axes.known) {  // only the named axes change
      out = *in.shape;
      absl::StatusOr<std::vector<int64_t>> ax = WrapAxes(axes.values, in.rank());
      if (!ax.ok()) return NodeError(ctx, ax.status());
      for (int64_t a : *ax) out[a] = Dim();
    }
    ctx.set_output_type(0, TensorType(in.dtype, out));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> amounts = PadAmounts(
      in.rank(), pads.values,
      axes.present ? std::optional<std::vector<int64_t>>(axes.values) : std::nullopt);
  if (!amounts.ok()) return NodeError(ctx, amounts.status());
  Shape out = *in.shape;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto [b, e] = (*amounts)[i];
    if (b == 0 && e == 0) continue;
    if (!out[i].is_static()) {
      out[i] = Dim();
      continue;
    }
    const int64_t n = out[i].value() + b + e;
    if (n < 0) {
      return ctx.Error(absl::StrCat("pads [", absl::StrJoin(pads.values, ","),
                                    "] remove more than dim ", i, " of ", in.ToString()));
    }
    out[i] = Dim(n);
  }
  ctx.set_output_type(0, TensorType(in.dtype, out));
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorOps(OpRegistry& r) {
  r.Register(OpSchemaBuilder("", "Reshape").Opsets(7).Inputs(2, 2)
                 .Attr("allowzero", Kind::kInt).Shape(InferReshape).Build());
  r.Register(OpSchemaBuilder("", "Flatten").Opsets(7).Inputs(1, 1)
                 .Attr("axis", Kind::kInt).Shape(InferFlatten).Build());
  r.Register(OpSchemaBuilder("", "Transpose").Opsets(7).Inputs(1, 1)
                 .Attr("perm", Kind::kInts).Shape(InferTranspose).Build());
  // Squeeze/Unsqueeze-1 and -11 carry `axes` as an attribute; the importer moves it to input 1.
  r.Register(OpSchemaBuilder("", "Squeeze").Opsets(7).Inputs(1, 2)
                 .Attr("axes", Kind::kInts).Shape(InferSqueeze).Build());
  r.Register(OpSchemaBuilder("", "Unsqueeze").Opsets(7).Inputs(2, 2)
                 .Attr("axes", Kind::kInts).Shape(InferUnsqueeze).Build());
  r.Register(OpSchemaBuilder("", "Expand").Opsets(8).Inputs(2, 2).Shape(InferExpand).Build());
  r.Register(OpSchemaBuilder("", "Identity").Opsets(7).Inputs(1, 1)
                 .Shape([](InferenceContext& ctx) { return SameAsInput(ctx); }).Build());
  r.Register(OpSchemaBuilder("", "Shape").Opsets(7).Inputs(1, 1)
                 .Attr("start", Kind::kInt).Attr("end", Kind::kInt).NotDifferentiable()
                 .Shape(InferShape).Build());
  r.Register(OpSchemaBuilder("", "Size").Opsets(7).Inputs(1, 1).NotDifferentiable()
                 .Shape([](InferenceContext& ctx) {
                   ctx.set_output_type(0, TensorType(DType::kInt64, Shape{}));
                   return absl::OkStatus();
                 })
                 .Build());
  r.Register(OpSchemaBuilder("", "Concat").Opsets(7).Inputs(1, -1)
                 .Attr("axis", Kind::kInt, /*required=*/true).Shape(InferConcat).Build());
  // Split-2/11 carry `split` as an attribute (moved to input 1 by the importer); Split-18 adds
  // num_outputs.
  r.Register(OpSchemaBuilder("", "Split").Opsets(7).Inputs(1, 2).Outputs(1, -1)
                 .Attr("axis", Kind::kInt).Attr("split", Kind::kInts)
                 .Attr("num_outputs", Kind::kInt).Shape(InferSplit).Build());
  // Slice-1 attributes starts/ends/axes become inputs 1..3 in the importer.
  r.Register(OpSchemaBuilder("", "Slice").Opsets(7).Inputs(3, 5)
                 .Attr("starts", Kind::kInts).Attr("ends", Kind::kInts).Attr("axes", Kind::kInts)
                 .Shape(InferSlice).Build());
  r.Register(OpSchemaBuilder("", "Tile").Opsets(7).Inputs(2, 2).Shape(InferTile).Build());
  // Pad-2 attributes pads/value become inputs 1 and 2 in the importer; axes (input 3) is Pad-18.
  r.Register(OpSchemaBuilder("", "Pad").Opsets(7).Inputs(2, 4)
                 .Attr("mode", Kind::kString).Attr("pads", Kind::kInts).Attr("value", Kind::kFloat)
                 .Attr("paddings", Kind::kInts).Shape(InferPad).Build());
  RegisterTensorIndexOps(r);
}

}  // namespace ottr::ir
