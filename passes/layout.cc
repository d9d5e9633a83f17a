// "nhwc-layout": runs the convolutions and pools of the step channels-last, the layout cuDNN's
// fastest convolution kernels take (measured on the H200 with the benchmark CNN at batch 1024,
// cuDNN 9, TF32: Conv 32→64 forward 111 µs NHWC against 305 µs NCHW), with one transpose at each
// edge of the channels-last region instead of one around every convolution.
//
//   before:  %c : f32[8,16,26,26] = Conv(%x, %w, %b) {kernel_shape = ints[3, 3]}
//            %r : f32[8,16,26,26] = Relu(%c)
//            %p : f32[8,16,13,13] = MaxPool(%r) {kernel_shape = ints[2, 2], strides = ints[2, 2]}
//            %f : f32[8,2704] = Flatten(%p) {axis = 1}
//   after:   %x.nhwc : f32[8,26,26,3] = Transpose(%x) {perm = ints[0, 2, 3, 1]}
//            %w.nhwc : f32[16,3,3,3] = Transpose(%w) {perm = ints[0, 2, 3, 1]}
//            %c.nhwc : f32[8,26,26,16] = ottr::Conv(%x.nhwc, %w.nhwc, %b) {kernel_shape = ints[3, 3], layout = "NHWC"}
//            %r.nhwc : f32[8,26,26,16] = Relu(%c.nhwc)
//            %p.nhwc : f32[8,13,13,16] = ottr::MaxPool(%r.nhwc) {..., layout = "NHWC"}
//            %p : f32[8,16,13,13] = Transpose(%p.nhwc) {perm = ints[0, 3, 1, 2]}
//            %f : f32[8,2704] = Flatten(%p) {axis = 1}
//
// The region: every 2-D convolution-family node that qualifies (Conv, ottr::ConvGradInput,
// ottr::ConvGradFilter, single-output MaxPool, ottr::MaxPoolGrad; rank 4, static shapes, float
// types; the convolutions with group 1 and pads that are symmetric, as cuDNN pads) becomes its
// channels-last form (ir/ops/channels_last.h), and the elementwise nodes connected to them (Relu,
// ReluGrad, Add, Cast, ... whose operands all have the output's shape or one element) follow.
// ReduceSum over a converted value (the bias gradient, axes [0, 2, 3] keepdims 0 -> a 1-D result)
// follows with its axes renumbered. Operands from outside the region are transposed in (the
// weights each once per step: tiny), values read outside it are transposed back, and a transpose
// that only moves a dim of size 1 is a Reshape (free). Attributes keep their meaning, so the
// nodes' window attributes are copied unchanged.
//
// Declines, with a remark: nodes that do not qualify (the reason per node), and the whole graph
// when the region would transpose more activation tensors in and out than it has convolutions
// (e.g. a ResNet whose BatchNormalizations stay channels-first: a transpose around each would cost
// more than the faster convolutions save).
//
// Runs last in the training pipeline (after the fusion passes), for the CUDA executor.
#include "passes/layout.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/ops/channels_last.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/status.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::Attribute;
using ir::Node;
using ir::Value;

constexpr char kName[] = "nhwc-layout";

bool IsConvFamily(const Node* n) {
  return fusion::IsOnnx(n, "Conv") || fusion::IsOttr(n, "ConvGradInput") || fusion::IsOttr(n, "ConvGradFilter");
}

bool IsLayoutOp(const Node* n) {
  return IsConvFamily(n) || fusion::IsOnnx(n, "MaxPool") || fusion::IsOttr(n, "MaxPoolGrad");
}

// Elementwise ops whose result does not depend on where the elements are, when every operand has
// the output's shape (or one element).
bool IsElementwise(const Node* n) {
  static const absl::flat_hash_set<std::string>* const kOnnx = new absl::flat_hash_set<std::string>{
      "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "Softplus", "Softsign", "HardSigmoid",
      "HardSwish", "Mish", "Gelu", "Identity", "Cast", "Neg", "Abs", "Sqrt", "Exp", "Log", "Add", "Sub",
      "Mul", "Div", "Sum", "Max", "Min"};
  static const absl::flat_hash_set<std::string>* const kOttr = new absl::flat_hash_set<std::string>{
      "ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "EluGrad", "SeluGrad", "CeluGrad", "SoftplusGrad",
      "SoftsignGrad", "HardSigmoidGrad", "HardSwishGrad", "MishGrad", "GeluGrad"};
  if (n->domain().empty()) return kOnnx->contains(n->op_type());
  return n->domain() == ir::kOttrDomain && kOttr->contains(n->op_type());
}

std::optional<std::vector<int64_t>> Dims(const Value* v) {
  if (v == nullptr || !v->type().is_static()) return std::nullopt;
  return ir::StaticDims(*v->type().shape);
}

bool Rank4(const Value* v) {
  auto d = Dims(v);
  return d && d->size() == 4;
}

// "" when the elementwise node `n` can run on channels-last operands: a rank-4 output every
// operand matches in shape or broadcasts from a single element.
bool ElementwiseQualifies(const Node* n) {
  auto out = Dims(n->output(0));
  if (!out || out->size() != 4) return false;
  for (const Value* o : n->outputs()) {
    if (Dims(o) != out) return false;
  }
  for (const Value* in : n->inputs()) {
    if (in == nullptr) continue;
    auto d = Dims(in);
    if (!d) return false;
    if (*d != *out && ir::NumElements(*d) != 1) return false;
  }
  return true;
}

// "" when the convolution-family or pooling node qualifies, else why not.
std::string LayoutOpDeclines(const Node* n) {
  for (const Value* in : n->inputs()) {
    if (in != nullptr && !in->type().is_static()) return absl::StrCat("input ", in->name(), " has a dynamic shape");
  }
  const Value* x = n->input(0);
  if (!Rank4(x) || !Rank4(n->output(0))) return "not a 2-D window (rank-4 tensors)";
  const ir::DType t = x->type().dtype;
  if (t != ir::DType::kFloat32 && t != ir::DType::kFloat16 && t != ir::DType::kBFloat16) {
    return absl::StrCat("element type ", ir::DTypeName(t), " (f32, f16, bf16 run channels-last)");
  }
  if (fusion::IsOnnx(n, "MaxPool") && n->num_outputs() > 1 && n->output_used(1)) {
    return "its Indices output is read (they index the channels-first tensor)";
  }
  if (!IsConvFamily(n)) return "";
  if (n->GetInt("group", 1) != 1) return absl::StrCat("group ", n->GetInt("group", 1), " (only group 1)");
  // The image: Conv's X, ConvGradFilter's X (input 1), ConvGradInput's input_shape.
  std::vector<int64_t> image;
  if (fusion::IsOnnx(n, "Conv")) {
    image = *Dims(n->input(0));
  } else if (fusion::IsOttr(n, "ConvGradFilter")) {
    image = *Dims(n->input(1));
  } else {
    image = n->GetInts("input_shape");
  }
  if (image.size() != 4) return "input_shape is not rank 4";
  auto attrs = ir::ReadWindowAttrs(*n, 2, false);
  if (!attrs.ok()) return std::string(attrs.status().message());
  if (attrs->kernel.empty()) {
    const Value* w = fusion::IsOttr(n, "ConvGradFilter") ? nullptr : n->input(1);
    if (w == nullptr) return "no kernel_shape";
    auto wd = *Dims(w);
    attrs->kernel = {wd[2], wd[3]};
  }
  for (int64_t a = 0; a < 2; ++a) {
    auto w = ir::ResolveWindowAxis(*attrs, a, image[2 + a]);
    if (!w.ok()) return std::string(w.status().message());
    if (w->pad_begin != w->pad_end) {
      return absl::StrCat("asymmetric padding on axis ", a, " (", w->pad_begin, " / ", w->pad_end,
                          "; cuDNN pads symmetrically and the channels-last path has no padded copy)");
    }
  }
  return "";
}

// ReduceSum(v, axes) with keepdims 0 and a result of rank <= 1: the result does not depend on
// the layout, only the axes do. Returns the constant axes, or nullopt.
std::optional<std::vector<int64_t>> ReduceAxes(const Node* n) {
  if (!fusion::IsOnnx(n, "ReduceSum") || n->GetInt("keepdims", 1) != 0 || n->num_inputs() < 2) return std::nullopt;
  if (!Rank4(n->input(0)) || n->output(0)->type().rank() > 1) return std::nullopt;
  const Value* axes = n->input(1);
  if (axes == nullptr || !fusion::IsOnnx(axes->producer(), "Constant")) return std::nullopt;
  const Attribute* a = axes->producer()->attr("value");
  if (a == nullptr || a->kind() != Attribute::Kind::kTensor) return std::nullopt;
  std::vector<int64_t> out = a->t().ToInt64Vector();
  for (int64_t& x : out) {
    if (x < -4 || x > 3) return std::nullopt;
    if (x < 0) x += 4;
  }
  return out;
}

class NhwcLayoutPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    to_last_.clear();  // values of an earlier graph this pass object ran on
    to_first_.clear();
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    // 1. The layout ops that qualify.
    absl::flat_hash_set<Node*> region;
    int convs = 0;
    for (Node* n : order) {
      if (!IsLayoutOp(n)) continue;
      const std::string why = LayoutOpDeclines(n);
      if (!why.empty()) {
        Remark(remarks(), kName, absl::StrCat("declined ", n->Describe(), ": ", why));
        continue;
      }
      region.insert(n);
      convs += IsConvFamily(n) ? 1 : 0;
    }
    if (convs == 0) return false;
    // 2. Elementwise nodes and bias-gradient reductions connected to the region, to a fixed point.
    absl::flat_hash_map<Node*, std::vector<int64_t>> reduce_axes;
    for (bool grew = true; grew;) {
      grew = false;
      for (Node* n : order) {
        if (region.contains(n)) continue;
        bool elementwise = IsElementwise(n) && ElementwiseQualifies(n);
        std::optional<std::vector<int64_t>> axes = elementwise ? std::nullopt : ReduceAxes(n);
        if (!elementwise && !axes) continue;
        bool touches = false;
        for (const Value* in : n->inputs()) touches |= in != nullptr && region.contains(in->producer());
        if (elementwise) {
          for (const Value* o : n->outputs()) {
            for (const ir::Use& u : o->uses()) touches |= region.contains(u.node);
          }
        }
        if (!touches) continue;
        region.insert(n);
        if (axes) reduce_axes[n] = *axes;
        grew = true;
      }
    }
    // 3. Count the activation tensors that would cross the region's edge (weights and moves of
    //    a size-1 dim do not count).
    int crossings = 0;
    absl::flat_hash_set<const Value*> counted;
    auto is_weight = [](const Node* n, int i) {
      return (IsConvFamily(n) && !fusion::IsOttr(n, "ConvGradFilter") && i == 1);
    };
    for (Node* n : order) {
      if (!region.contains(n)) continue;
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Value* in = n->input(i);
        if (in == nullptr || !Rank4(in) || region.contains(in->producer()) || is_weight(n, i)) continue;
        if ((*Dims(in))[1] != 1 && counted.insert(in).second) ++crossings;
      }
      if (fusion::IsOttr(n, "ConvGradFilter")) continue;  // its output is a weight gradient
      for (const Value* o : n->outputs()) {
        if (!Rank4(o) || (*Dims(o))[3] == 1) continue;
        bool outside = g.IsRoot(o);
        for (const ir::Use& u : o->uses()) outside |= !region.contains(u.node);
        if (outside && counted.insert(o).second) ++crossings;
      }
    }
    if (crossings > convs) {
      Remark(remarks(), kName,
             absl::StrCat("declined the graph: ", crossings, " activation tensors would be transposed at the region's ",
                          "edge for ", convs, " convolutions"));
      return false;
    }
    OTTR_RETURN_IF_ERROR(Rewrite(g, order, region, reduce_axes));
    Remark(remarks(), kName,
           absl::StrCat("converted ", region.size(), " nodes (", convs, " convolutions) to channels-last; ", crossings,
                        " activation tensors transposed at the edge"));
    return true;
  }

 private:
  // A value's channels-last form: transposed (or, moving a size-1 dim, reshaped) once and cached.
  absl::StatusOr<Value*> Convert(ir::Graph& g, Value* v, bool to_last, const std::string& origin) {
    auto& cache = to_last ? to_last_ : to_first_;
    if (auto it = cache.find(v); it != cache.end()) return it->second;
    const std::vector<int64_t> dims = *Dims(v);
    const std::vector<int64_t> perm = to_last ? ir::ToChannelsLastPerm(4) : ir::ToChannelsFirstPerm(4);
    const std::vector<int64_t> out_dims = ir::PermuteDims(dims, perm);
    const std::string name = to_last ? g.UniqueName(v->name() + ".nhwc") : g.UniqueName(v->name() + ".nchw");
    const bool moves_one = (to_last ? dims[1] : dims[3]) == 1;
    ir::Node* n = nullptr;
    if (moves_one) {
      OTTR_ASSIGN_OR_RETURN(Node * shape,
                            fusion::AddInferred(g, {"Constant", "", {}, {g.UniqueName(name + ".shape")},
                                                    {{"value", Attribute(ir::Tensor::FromVector<int64_t>({4}, out_dims))}},
                                                    origin}));
      OTTR_ASSIGN_OR_RETURN(n, g.AddNode({"Reshape", "", {v, shape->output(0)}, {name}, {}, origin}));
      // Node-local inference does not read the shape Constant's value: the type is known here.
      n->output(0)->set_type(ir::TensorType(v->type().dtype, ir::ShapeFromDims(out_dims)));
    } else {
      OTTR_ASSIGN_OR_RETURN(n, fusion::AddInferred(g, {"Transpose", "", {v}, {name}, {{"perm", Attribute(perm)}}, origin}));
    }
    cache[v] = n->output(0);
    return n->output(0);
  }

  absl::Status Rewrite(ir::Graph& g, const std::vector<Node*>& order, const absl::flat_hash_set<Node*>& region,
                       const absl::flat_hash_map<Node*, std::vector<int64_t>>& reduce_axes) {
    // twin[v]: the channels-last value standing for v (a rank-4 output of a region node).
    absl::flat_hash_map<Value*, Value*> twin;
    std::vector<Node*> replaced, old_axes;
    std::map<std::vector<int64_t>, Value*> axes_values;
    for (Node* n : order) {
      if (!region.contains(n)) continue;
      const std::string origin = n->origin();
      ir::NodeSpec spec;
      spec.origin = origin;
      spec.attrs = n->attrs();
      spec.op_type = n->op_type();
      spec.domain = n->domain();
      if (IsLayoutOp(n)) {
        spec.domain = std::string(ir::kOttrDomain);
        spec.attrs[ir::kLayoutAttr] = Attribute(std::string(ir::kChannelsLast));
      }
      for (int i = 0; i < n->num_inputs(); ++i) {
        Value* in = n->input(i);
        if (in != nullptr && Rank4(in)) {
          if (auto it = twin.find(in); it != twin.end()) {
            in = it->second;
          } else {
            OTTR_ASSIGN_OR_RETURN(in, Convert(g, in, /*to_last=*/true, origin));
          }
        }
        spec.inputs.push_back(in);
      }
      if (auto it = reduce_axes.find(n); it != reduce_axes.end()) {
        // NCHW axis a sits at channels-last position p where ToChannelsLastPerm[p] == a.
        const std::vector<int64_t> perm = ir::ToChannelsLastPerm(4);
        std::vector<int64_t> axes;
        for (int64_t a : it->second) axes.push_back(std::find(perm.begin(), perm.end(), a) - perm.begin());
        std::sort(axes.begin(), axes.end());
        Value*& c = axes_values[axes];
        if (c == nullptr) {
          OTTR_ASSIGN_OR_RETURN(
              Node * k, fusion::AddInferred(g, {"Constant", "", {}, {g.UniqueName(n->input(1)->name() + ".nhwc")},
                                                {{"value", Attribute(ir::Tensor::FromVector<int64_t>(
                                                               {static_cast<int64_t>(axes.size())}, axes))}},
                                                origin}));
          c = k->output(0);
        }
        old_axes.push_back(n->input(1)->producer());
        spec.inputs[1] = c;
      }
      for (Value* o : n->outputs()) {
        spec.output_names.push_back(g.UniqueName(o->name() + (Rank4(o) ? ".nhwc" : ".new")));
      }
      OTTR_ASSIGN_OR_RETURN(Node * m, fusion::AddInferred(g, std::move(spec)));
      for (int i = 0; i < n->num_outputs(); ++i) {
        // A reduction's result has the old type (node-local inference does not read the axes).
        if (!Rank4(n->output(i))) m->output(i)->set_type(n->output(i)->type());
        twin[n->output(i)] = m->output(i);
      }
      replaced.push_back(n);
    }
    // Readers outside the region (and graph outputs / updates) get the channels-first value.
    fusion::Renames renames;
    for (Node* n : replaced) {
      for (int i = 0; i < n->num_outputs(); ++i) {
        Value* old = n->output(i);
        Value* now = twin[old];
        // Every rank-4 output of a region node is channels-last (a weight gradient as KRSC).
        Value* outside = now;
        if (Rank4(now)) {
          bool read_outside = g.IsRoot(old);
          for (const ir::Use& u : old->uses()) read_outside |= !region.contains(u.node);
          if (!read_outside) continue;
          OTTR_ASSIGN_OR_RETURN(outside, Convert(g, now, /*to_last=*/false, n->origin()));
        }
        renames.Replace(g, old, outside);
      }
    }
    for (auto it = replaced.rbegin(); it != replaced.rend(); ++it) OTTR_RETURN_IF_ERROR(g.EraseNode(*it));
    renames.Apply(g);
    // The reductions' old axes, when nothing else reads them (one Constant may serve several).
    absl::flat_hash_set<Node*> erased;
    for (Node* c : old_axes) {
      if (!erased.contains(c) && !c->output_used(0) && !g.IsRoot(c->output(0))) {
        OTTR_RETURN_IF_ERROR(g.EraseNode(c));
        erased.insert(c);
      }
    }
    return absl::OkStatus();
  }

  absl::flat_hash_map<Value*, Value*> to_last_, to_first_;
};

}  // namespace

std::unique_ptr<Pass> CreateNhwcLayoutPass() { return std::make_unique<NhwcLayoutPass>(); }

}  // namespace ottr::passes
