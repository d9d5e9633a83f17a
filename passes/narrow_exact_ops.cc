// "narrow-exact-ops": after mixed-precision, the activations between two 16-bit GEMMs or
// convolutions make a float32 round trip (Cast to f32, Relu / MaxPool / their gradients in f32,
// Cast back to the 16-bit type), which costs two casts and twice the bytes of every pass over
// them. An op whose result is one of its inputs' values (a select or a copy) computes the same
// bits in the 16-bit type, so it runs there and the widening moves after it:
//
//   before:  %c : f32[8,24,24,64] = Cast(%c.bf16) {to = 1}
//            %r : f32[8,24,24,64] = Relu(%c)
//            %r.bf16 : bf16[8,24,24,64] = Cast(%r) {to = 16}
//   after:   %r.low : bf16[8,24,24,64] = Relu(%c.bf16)
//            %r : f32[8,24,24,64] = Cast(%r.low) {to = 1}          (only while something reads it)
//            (readers of %r.bf16 read %r.low: Cast(Cast(v, f32), bf16) is v)
//
// Exact ops: Relu, MaxPool (Indices unread), Transpose, Reshape, Flatten, Squeeze, Unsqueeze,
// Identity, ottr::ReluGrad (Select(y > 0, dy, 0)) and ottr::MaxPoolGrad whose windows do not
// overlap (each dX element receives at most one dY: 0 + dY is exact). A node is narrowed when
// every one of its float inputs is a widening Cast (to f32) of the same 16-bit type; integer
// inputs (Reshape's shape) stay. Repeated to a fixed point, so a chain Relu -> MaxPool ->
// Transpose -> Flatten narrows link by link and the casts between 16-bit producers and readers
// disappear. Runs after autodiff and the optimizer (the gradients' casts exist then), before the
// fusion passes (which then see the 16-bit chains), when the precision is bf16 or fp16.
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using ir::DType;
using ir::Node;
using ir::Value;

constexpr char kName[] = "narrow-exact-ops";

// The 16-bit value `v` widens (v = Cast(low, to = f32)), else null.
Value* WidenedFrom(const Value* v) {
  const Node* p = v->producer();
  if (!fusion::IsOnnx(p, "Cast") || v->type().dtype != DType::kFloat32) return nullptr;
  Value* src = p->input(0);
  return fusion::IsLowFloat(src->type().dtype) ? src : nullptr;
}

// Windows that tile without overlap: every stride >= its kernel, no dilation.
bool NonOverlapping(const Node* n) {
  const std::vector<int64_t> k = n->GetInts("kernel_shape"), s = n->GetInts("strides"), d = n->GetInts("dilations");
  for (size_t i = 0; i < k.size(); ++i) {
    const int64_t stride = i < s.size() ? s[i] : 1;
    if (stride < k[i] || (i < d.size() && d[i] != 1)) return false;
  }
  return !k.empty();
}

bool IsExact(const Node* n) {
  for (const char* op : {"Relu", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    if (fusion::IsOnnx(n, op)) return true;
  }
  if (fusion::IsOnnx(n, "MaxPool")) return n->num_outputs() == 1 || !n->output_used(1);
  if (fusion::IsOttr(n, "ReluGrad")) return true;
  if (fusion::IsOttr(n, "MaxPoolGrad")) return NonOverlapping(n);
  return false;
}

class NarrowExactOpsPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
      for (Node* n : order) {
        if (!IsExact(n)) continue;
        OTTR_ASSIGN_OR_RETURN(bool narrowed, Narrow(g, n));
        again |= narrowed;
      }
      OTTR_ASSIGN_OR_RETURN(bool folded, FoldCastPairs(g));
      again |= folded;
      changed |= again;
    }
    return changed;
  }

 private:
  absl::StatusOr<bool> Narrow(ir::Graph& g, Node* n) {
    DType low = DType::kUndefined;
    std::vector<Value*> inputs;
    int floats = 0;
    for (Value* in : n->inputs()) {
      if (in == nullptr || !ir::IsFloat(in->type().dtype)) {
        inputs.push_back(in);
        continue;
      }
      Value* src = WidenedFrom(in);
      if (src == nullptr || (low != DType::kUndefined && src->type().dtype != low)) return false;
      low = src->type().dtype;
      inputs.push_back(src);
      ++floats;
    }
    if (floats == 0) return false;
    ir::NodeSpec spec{n->op_type(), n->domain(), inputs, {}, n->attrs(), n->origin()};
    for (const Value* o : n->outputs()) spec.output_names.push_back(g.UniqueName(o->name() + ".low"));
    OTTR_ASSIGN_OR_RETURN(Node * m, fusion::AddInferred(g, std::move(spec)));
    fusion::Renames renames;
    for (int i = 0; i < n->num_outputs(); ++i) {
      Value* old = n->output(i);
      Value* now = m->output(i);
      // The same shapes (node-local inference does not read a Reshape's shape Constant).
      if (ir::IsFloat(old->type().dtype)) now->set_type(ir::TensorType(low, old->type().shape));
      if (now->type().dtype == low && old->type().dtype == DType::kFloat32) {
        OTTR_ASSIGN_OR_RETURN(Node * widen,
                              fusion::AddInferred(g, {"Cast", "", {now}, {g.UniqueName(old->name() + ".wide")},
                                                      {{"to", ir::Attribute(int64_t{ir::DTypeToOnnx(DType::kFloat32)})}},
                                                      n->origin()}));
        now = widen->output(0);
      }
      renames.Replace(g, old, now);
    }
    fusion::Remark(remarks(), kName, absl::StrCat("narrowed ", n->Describe(), " to ", ir::DTypeName(low)));
    OTTR_RETURN_IF_ERROR(g.EraseNode(n));
    renames.Apply(g);
    return true;
  }

  // Cast(Cast(v, to = f32), to = low) with v of type low is v. Dead widening Casts go.
  absl::StatusOr<bool> FoldCastPairs(ir::Graph& g) {
    bool changed = false;
    for (Node* c : g.nodes()) {
      if (!fusion::IsOnnx(c, "Cast") || !fusion::IsLowFloat(c->output(0)->type().dtype)) continue;
      Value* src = WidenedFrom(c->input(0));
      if (src == nullptr || src->type().dtype != c->output(0)->type().dtype || g.IsRoot(c->output(0))) continue;
      g.ReplaceAllUsesWith(c->output(0), src);
      OTTR_RETURN_IF_ERROR(g.EraseNode(c));
      changed = true;
    }
    for (bool again = true; again;) {
      again = false;
      for (Node* c : g.nodes()) {
        if (fusion::IsOnnx(c, "Cast") && WidenedFrom(c->output(0)) != nullptr && !c->output_used(0) &&
            !g.IsRoot(c->output(0))) {
          OTTR_RETURN_IF_ERROR(g.EraseNode(c));
          again = changed = true;
        }
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateNarrowExactOpsPass() { return std::make_unique<NarrowExactOpsPass>(); }

}  // namespace ottr::passes
