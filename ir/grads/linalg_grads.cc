// Gradient rules of MatMul and Gemm. The 2-D products are emitted as Gemm with transpose flags,
// so no transpose is materialised and the fusion passes can map each to one cuBLASLt call.
#include "absl/strings/str_cat.h"
#include "ir/gradient.h"
#include "ir/status.h"

namespace ottr::ir {
namespace {

absl::StatusOr<Value*> Gemm(GradientBuilder& b, Value* x, Value* y, bool trans_x, bool trans_y,
                            float alpha) {
  std::map<std::string, Attribute> attrs;
  if (trans_x) attrs["transA"] = Attribute(int64_t{1});
  if (trans_y) attrs["transB"] = Attribute(int64_t{1});
  if (alpha != 1.0f) attrs["alpha"] = Attribute(alpha);
  return b.Emit1("Gemm", {x, y}, std::move(attrs));
}

// Y = α·op(A)·op(B) + β·C, op = transpose when transA/transB:
//   dA = α·dY·op(B)ᵀ  (transA: its transpose α·op(B)·dYᵀ)
//   dB = α·op(A)ᵀ·dY  (transB: its transpose α·dYᵀ·op(A))
//   dC = β·dY summed over C's broadcast dimensions
absl::Status GemmGrad(GradientBuilder& b) {
  const bool ta = b.node().GetInt("transA", 0) != 0;
  const bool tb = b.node().GetInt("transB", 0) != 0;
  const float alpha = b.node().GetFloat("alpha", 1.0f);
  const float beta = b.node().GetFloat("beta", 1.0f);
  Value* dy = b.output_grad(0);
  Value* a = b.input(0);
  Value* bm = b.input(1);
  if (b.needs_input_grad(0)) {
    // op(B)ᵀ is B when transB, Bᵀ otherwise.
    OTTR_ASSIGN_OR_RETURN(Value * g, ta ? Gemm(b, bm, dy, tb, true, alpha)
                                        : Gemm(b, dy, bm, false, !tb, alpha));
    b.set_input_grad(0, g);
  }
  if (b.needs_input_grad(1)) {
    OTTR_ASSIGN_OR_RETURN(Value * g, tb ? Gemm(b, dy, a, true, ta, alpha)
                                        : Gemm(b, a, dy, !ta, false, alpha));
    b.set_input_grad(1, g);
  }
  if (b.needs_input_grad(2)) {
    Value* g = dy;
    if (beta != 1.0f) {
      OTTR_ASSIGN_OR_RETURN(Value * s, b.Scalar(beta, dy->type().dtype));
      OTTR_ASSIGN_OR_RETURN(g, b.Emit1("Mul", {dy, s}));
    }
    OTTR_ASSIGN_OR_RETURN(Value * r, b.SumToShape(g, b.input(2)->type()));
    b.set_input_grad(2, r);
  }
  return absl::OkStatus();
}

// Swaps the last two dimensions.
absl::StatusOr<Value*> TransposeLast2(GradientBuilder& b, Value* x) {
  const int64_t r = x->type().rank();
  std::vector<int64_t> perm(r);
  for (int64_t i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[r - 1], perm[r - 2]);
  return b.Emit1("Transpose", {x}, {{"perm", Attribute(perm)}});
}

// Y = A·B (NumPy matmul: batch broadcasting, 1-D operands promoted then squeezed):
//   dA = dY·Bᵀ,  dB = Aᵀ·dY  on the promoted shapes, summed over broadcast batch dims.
absl::Status MatMulGrad(GradientBuilder& b) {
  Value* a = b.input(0);
  Value* bm = b.input(1);
  Value* dy = b.output_grad(0);
  const TensorType& at = a->type();
  const TensorType& bt = bm->type();
  if (!at.is_static() || !bt.is_static() || !dy->type().is_static()) {
    return b.Error("needs static shapes");
  }
  std::vector<int64_t> ad = StaticDims(*at.shape), bd = StaticDims(*bt.shape);
  std::vector<int64_t> yd = StaticDims(*dy->type().shape);
  // Promote 1-D operands: A [K] -> [1, K], B [K] -> [K, 1]; dY gets the removed dims back.
  if (ad.size() == 1) {
    ad.insert(ad.begin(), 1);
    yd.insert(yd.end() - (bd.size() == 1 ? 0 : 1), 1);
  }
  if (bd.size() == 1) {
    bd.push_back(1);
    yd.push_back(1);
  }
  auto reshape = [&](Value* v, const std::vector<int64_t>& dims) -> absl::StatusOr<Value*> {
    return b.ReshapeTo(v, TensorType(v->type().dtype, ShapeFromDims(dims)));
  };
  OTTR_ASSIGN_OR_RETURN(Value * a2, reshape(a, ad));
  OTTR_ASSIGN_OR_RETURN(Value * b2, reshape(bm, bd));
  OTTR_ASSIGN_OR_RETURN(Value * dy2, reshape(dy, yd));
  const bool plain2d = ad.size() == 2 && bd.size() == 2;
  if (b.needs_input_grad(0)) {
    Value* g;
    if (plain2d) {
      OTTR_ASSIGN_OR_RETURN(g, Gemm(b, dy2, b2, false, true, 1.0f));
    } else {
      OTTR_ASSIGN_OR_RETURN(Value * bt2, TransposeLast2(b, b2));
      OTTR_ASSIGN_OR_RETURN(g, b.Emit1("MatMul", {dy2, bt2}));
      OTTR_ASSIGN_OR_RETURN(g, b.SumToShape(g, TensorType(at.dtype, ShapeFromDims(ad))));
    }
    OTTR_ASSIGN_OR_RETURN(g, b.ReshapeTo(g, at));
    b.set_input_grad(0, g);
  }
  if (b.needs_input_grad(1)) {
    Value* g;
    if (plain2d) {
      OTTR_ASSIGN_OR_RETURN(g, Gemm(b, a2, dy2, true, false, 1.0f));
    } else {
      OTTR_ASSIGN_OR_RETURN(Value * at2, TransposeLast2(b, a2));
      OTTR_ASSIGN_OR_RETURN(g, b.Emit1("MatMul", {at2, dy2}));
      OTTR_ASSIGN_OR_RETURN(g, b.SumToShape(g, TensorType(bt.dtype, ShapeFromDims(bd))));
    }
    OTTR_ASSIGN_OR_RETURN(g, b.ReshapeTo(g, bt));
    b.set_input_grad(1, g);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLinalgGradients(OpRegistry& r) {
  r.SetGradient("", "Gemm", GemmGrad);
  r.SetGradient("", "MatMul", MatMulGrad);
}

}  // namespace ottr::ir
