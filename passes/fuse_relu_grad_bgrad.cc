// fuse-relu-grad-bgrad (fusion_passes.h): a ReLU layer's backward and the bias gradient of the
// layer below it in one kernel, where the GEMM epilogues did not take them.
//
//   before:  %dh = ottr::ReluGrad(%da, %a)
//            %s = ReduceSum(%dh, [0]) {keepdims = 1}        %b.grad = Reshape(%s, [C])
//            [%b.grad.f32 = Cast(%b.grad) {to = f32}]       (16-bit steps: the sum widened)
//   after:   %dh, %b.grad = ottr::ReluGradBiasGrad(%da, %a) [{bias_type = f32}]
//
// The ReduceSum reads dX again (2 bytes per element in bf16); the fused kernel sums dX while it
// writes it. A widening Cast of the sum is folded: the sum comes out of float32 accumulators
// and is rounded once, to float32, instead of to bf16 first. It runs after fuse-gemm-dact-bgrad
// (which takes ReluGrad and the sum into the dX GEMM's DRELU_BGRAD epilogue where that is
// faster) and before fuse-gemm-bgrad (which would otherwise put the sum into the weight-gradient
// GEMM: a BGRAD epilogue that cuBLASLt runs as an extra kernel re-reading dY in bf16).
#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "fuse-relu-grad-bgrad";

struct Plan {
  Node* grad = nullptr;
  fusion::BiasGradMatch bias;
  ir::DType bias_type = ir::DType::kUndefined;
};

std::optional<Plan> Match(Node* r, std::string* why) {
  Plan p;
  p.grad = r;
  const ir::TensorType& t = r->output(0)->type();
  if (!t.is_static() || t.rank() != 2) {
    *why = absl::StrCat("dX ", t.ToString(), " is not a static matrix");
    return std::nullopt;
  }
  if (!ir::IsFloat(t.dtype)) {
    *why = absl::StrCat("dX is ", ir::DTypeName(t.dtype), ", not a float type");
    return std::nullopt;
  }
  if (r->input(0)->type() != t || r->input(1)->type() != t) {
    *why = absl::StrCat("dY ", r->input(0)->type().ToString(), " and Y ", r->input(1)->type().ToString(),
                        " differ from dX ", t.ToString());
    return std::nullopt;
  }
  std::optional<fusion::BiasGradMatch> m = fusion::FindBiasGrad(r->output(0), 0);
  if (!m) {
    *why = absl::StrCat("no bias gradient (ReduceSum over axis 0 to a vector) reads ", r->output(0)->name());
    return std::nullopt;
  }
  p.bias = *m;
  p.bias_type = p.bias.result->type().dtype;
  if (fusion::IsLowFloat(t.dtype) && fusion::AppendCastTo(p.bias, ir::DType::kFloat32)) {
    p.bias_type = ir::DType::kFloat32;
  }
  if (p.bias_type != t.dtype && p.bias_type != ir::DType::kFloat32) {
    *why = absl::StrCat("the bias gradient is ", ir::DTypeName(p.bias_type), ", neither dX's type nor f32");
    return std::nullopt;
  }
  return p;
}

absl::Status Rewrite(ir::Graph& g, const Plan& p, std::ostream* remarks) {
  Node* r = p.grad;
  std::map<std::string, ir::Attribute> attrs;
  if (p.bias_type != r->output(0)->type().dtype) {
    attrs["bias_type"] = ir::Attribute(static_cast<int64_t>(ir::DTypeToOnnx(p.bias_type)));
  }
  OTTR_ASSIGN_OR_RETURN(
      Node * f, fusion::AddInferred(g, {"ReluGradBiasGrad", std::string(ir::kOttrDomain), {r->input(0), r->input(1)},
                                        {g.UniqueName(r->output(0)->name() + ".fused"),
                                         g.UniqueName(p.bias.result->name() + ".fused")},
                                        std::move(attrs), r->origin()}));
  std::string what = absl::StrCat(r->Describe(), " + ", p.bias.chain[0]->Describe());
  if (fusion::IsOnnx(p.bias.chain.back(), "Cast")) {
    absl::StrAppend(&what, " + its widening ", p.bias.chain.back()->Describe());
  }
  fusion::Renames renames;
  renames.Replace(g, r->output(0), f->output(0));
  renames.Replace(g, p.bias.result, f->output(1));
  std::vector<Node*> dead(p.bias.chain.rbegin(), p.bias.chain.rend());
  dead.push_back(r);
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kName,
         absl::StrCat("fused ", what, " -> ottr::ReluGradBiasGrad (bias gradient in ", ir::DTypeName(p.bias_type), ")"));
  return absl::OkStatus();
}

class FuseReluGradBgradPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    std::vector<Node*> roots;
    for (Node* n : order) {
      if (fusion::IsOttr(n, "ReluGrad")) roots.push_back(n);
    }
    // A rewrite erases its own ReluGrad and that ReluGrad's sum chain: never another root.
    return fusion::MatchAndRewrite(roots, remarks(), kName, Match,
                                   [&](const Plan& p) { return Rewrite(g, p, remarks()); });
  }
};

}  // namespace

std::unique_ptr<Pass> CreateFuseReluGradBgradPass() { return std::make_unique<FuseReluGradBgradPass>(); }

}  // namespace ottr::passes
