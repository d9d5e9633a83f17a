// group-gemms (fusion_passes.h): independent plain matrix products that become ready at the same
// point of the step -> one ottr::GroupedGemm, which the CUDA executor runs as one grouped launch
// (cuBLAS's cublasGemmGroupedBatchedEx) where that is measured faster than one launch per product.
//
//   before:  %dx = Gemm(%dy, %w)                      both read %dy, made by the node before them
//            %dw = Gemm(%dy, %x) {transA = 1}
//   after:   %dx, %dw = ottr::GroupedGemm(%dy, %w, %dy, %x) {transA = [0, 1], transB = [0, 0],
//                                                            alpha = [1.0, 1.0]}
//
// A product is plain when it has no epilogue: an ONNX Gemm without C (or beta 0), a 2-D MatMul,
// or an ottr::FusedGemm with epilogue "none" and no output_type; its operands are static 2-D
// matrices of one float type (f32, f16, bf16: the types the grouped launch takes). On Hopper a
// grouped GEMM takes only the default epilogue, so a GEMM the fusion passes gave an epilogue
// stays fused and is never grouped (the remarks say which). The point a product becomes ready
// is the last node, in the step's order, that makes one of its operands; products with the same
// point and type form a group (at most kGroupedGemmMaxProducts each). Two products with the same
// point never depend on each other: a product that reads another's output is ready after it.
//
// The node computes what the products computed (the CPU reference runs each as the Gemm kernel:
// the same bits). Off by default (TrainingSpec::group_gemms, `--group-gemms on`): on the H100
// (bench/RESULTS.md 2026-12-05) cuBLAS's grouped launch was slower than separate cuBLASLt GEMMs
// for every pair the pass made (a layer's data and weight gradients: 128 x 512 x 512 with its
// weight gradient 59.5 against 13.3 µs, 4096³ pairs 5514 against 5216 µs), so each node ran its
// products one after the other on one stream, where without the pass the executor's two streams
// overlap them: the small MLP without epilogues (fp32, batch 128) 85.6 / 85.7 against 80.4 / 80.1
// µs, the MLP 4096x4 in fp32 32053 against 31590 µs, in TF32 without kmajor-gemm-operands 5684
// against 5555 µs. With TF32's default passes it finds no pair in the bench MLPs (the epilogues
// and K-major transposes leave none ready together).
#include <algorithm>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/status.h"
#include "passes/fusion_passes.h"
#include "passes/fusion_util.h"

namespace ottr::passes {
namespace {

using fusion::Remark;
using ir::Node;
using ir::Value;

constexpr char kName[] = "group-gemms";

// A plain product: its node (operands A and B are inputs 0 and 1) and attributes.
struct Product {
  Node* node = nullptr;
  int64_t trans_a = 0;
  int64_t trans_b = 0;
  float alpha = 1.0f;
};

bool IsGemmLike(const Node* n) {
  return fusion::IsOnnx(n, "Gemm") || fusion::IsOnnx(n, "MatMul") || fusion::IsOttr(n, ir::kFusedGemmOp);
}

bool IsStaticMatrix(const Value* v) { return v != nullptr && v->type().is_static() && v->type().rank() == 2; }

// The plain product `n` computes, or nullopt with the reason it is not one.
std::optional<Product> AsProduct(Node* n, std::string* why) {
  if (fusion::IsOnnx(n, "MatMul")) {
    if (!IsStaticMatrix(n->input(0)) || !IsStaticMatrix(n->input(1))) {
      *why = "its operands are not both static 2-D matrices";
      return std::nullopt;
    }
    return Product{n, 0, 0, 1.0f};
  }
  if (const std::optional<ir::FusedEpilogue> e = fusion::FusedEpilogueOf(n); e && *e != ir::FusedEpilogue::kNone) {
    *why = absl::StrCat("it has the epilogue ", ir::FusedEpilogueName(*e),
                        " (a grouped GEMM takes only the default epilogue: a GEMM is fused or grouped)");
    return std::nullopt;
  }
  if (!fusion::IsPlainGemm(n)) {
    *why = "it adds C (a grouped GEMM takes only the default epilogue)";
    return std::nullopt;
  }
  if (n->has_attr("output_type")) {
    *why = "it writes another type than its operands'";
    return std::nullopt;
  }
  if (!IsStaticMatrix(n->input(0)) || !IsStaticMatrix(n->input(1))) {
    *why = "its operands are not both static 2-D matrices";
    return std::nullopt;
  }
  return Product{n, n->GetInt("transA", 0) != 0 ? 1 : 0,
                 n->GetInt("transB", 0) != 0 ? 1 : 0, n->GetFloat("alpha", 1.0f)};
}

bool GroupableType(ir::DType t) {
  return t == ir::DType::kFloat32 || t == ir::DType::kFloat16 || t == ir::DType::kBFloat16;
}

absl::Status Rewrite(ir::Graph& g, const std::vector<Product>& group, std::ostream* remarks) {
  std::vector<Value*> inputs;
  std::vector<std::string> names;
  std::vector<int64_t> ta, tb;
  std::vector<float> alpha;
  std::string what;
  for (const Product& p : group) {
    // The operands as the node reads them now: an earlier group may have replaced their producer.
    inputs.push_back(p.node->input(0));
    inputs.push_back(p.node->input(1));
    names.push_back(g.UniqueName(p.node->output(0)->name() + ".grouped"));
    ta.push_back(p.trans_a);
    tb.push_back(p.trans_b);
    alpha.push_back(p.alpha);
    absl::StrAppend(&what, what.empty() ? "" : " + ", p.node->Describe());
  }
  std::map<std::string, ir::Attribute> attrs = {{"transA", ta}, {"transB", tb}, {"alpha", alpha}};
  OTTR_ASSIGN_OR_RETURN(Node * f, fusion::AddInferred(g, {ir::kGroupedGemmOp, std::string(ir::kOttrDomain), inputs,
                                                          names, std::move(attrs), group.front().node->origin()}));
  fusion::Renames renames;
  std::vector<Node*> dead;
  for (size_t i = 0; i < group.size(); ++i) {
    if (f->output(static_cast<int>(i))->type() != group[i].node->output(0)->type()) {
      return absl::InternalError(absl::StrCat(kName, ": the grouped product ", i, " is ",
                                              f->output(static_cast<int>(i))->type().ToString(), " where ",
                                              group[i].node->Describe(), " made ",
                                              group[i].node->output(0)->type().ToString()));
    }
    renames.Replace(g, group[i].node->output(0), f->output(static_cast<int>(i)));
    dead.push_back(group[i].node);
  }
  OTTR_RETURN_IF_ERROR(fusion::EraseDead(g, dead));
  renames.Apply(g);
  Remark(remarks, kName, absl::StrCat("grouped ", what, " -> ottr::GroupedGemm (", group.size(), " products)"));
  return absl::OkStatus();
}

class GroupGemmsPass : public Pass {
 public:
  absl::string_view name() const override { return kName; }

  absl::StatusOr<bool> Run(ir::Graph& g) override {
    OTTR_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopoOrder());
    absl::flat_hash_map<const Node*, int> position;
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
    // (ready point, element type) -> the products ready there, in step order.
    std::map<std::pair<int, int>, std::vector<Product>> groups;
    for (Node* n : order) {
      if (!IsGemmLike(n)) continue;
      std::string why;
      std::optional<Product> p = AsProduct(n, &why);
      const ir::DType ta = n->input(0)->type().dtype, tb = n->input(1)->type().dtype;
      if (p && (ta != tb || !GroupableType(ta))) {
        why = absl::StrCat("its operands are ", ir::DTypeName(ta), " and ", ir::DTypeName(tb),
                           " (grouped: f32, f16 or bf16, both the same)");
        p.reset();
      }
      if (!p) {
        Remark(remarks(), kName, absl::StrCat("declined ", n->Describe(), ": ", why));
        continue;
      }
      int ready = -1;
      for (const Value* v : n->inputs()) {
        if (v != nullptr && v->producer() != nullptr) ready = std::max(ready, position.at(v->producer()));
      }
      groups[{ready, static_cast<int>(ta)}].push_back(*p);
    }
    // The lone products first: a rewrite below may erase the node a remark names.
    for (auto& [key, products] : groups) {
      if (products.size() >= 2) continue;
      const int ready = key.first;
      Remark(remarks(), kName,
             absl::StrCat("declined ", products.front().node->Describe(),
                          ": no other plain product of its type is ready at the same point (after ",
                          ready < 0 ? std::string("the step's inputs") : order[ready]->Describe(), ")"));
    }
    bool changed = false;
    for (auto& [key, products] : groups) {
      if (products.size() < 2) continue;
      for (size_t begin = 0; begin < products.size(); begin += ir::kGroupedGemmMaxProducts) {
        const size_t end = std::min(products.size(), begin + ir::kGroupedGemmMaxProducts);
        if (end - begin < 2) {
          Remark(remarks(), kName,
                 absl::StrCat("declined ", products[begin].node->Describe(), ": left over after groups of ",
                              ir::kGroupedGemmMaxProducts));
          continue;
        }
        OTTR_RETURN_IF_ERROR(Rewrite(
            g, std::vector<Product>(products.begin() + static_cast<std::ptrdiff_t>(begin),
                                    products.begin() + static_cast<std::ptrdiff_t>(end)),
            remarks()));
        changed = true;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> CreateGroupGemmsPass() { return std::make_unique<GroupGemmsPass>(); }

}  // namespace ottr::passes
