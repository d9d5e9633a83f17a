// Matrix products: MatMul (NumPy matmul semantics) and Gemm (2-D, transposes, alpha/beta, C
// broadcast to the output).
#include "absl/strings/str_cat.h"
#include "ir/op_registry.h"
#include "ir/ops/shape_helpers.h"

namespace ottr::ir {
namespace {

using Kind = Attribute::Kind;

// True when static dims a and b are known to differ.
bool KnownDifferent(const Dim& a, const Dim& b) {
  return a.is_static() && b.is_static() && a.value() != b.value();
}

absl::Status CheckSameDType(InferenceContext& ctx, int i, int j) {
  const DType a = ctx.input_type(i).dtype;
  const DType b = ctx.input_type(j).dtype;
  if (a != DType::kUndefined && b != DType::kUndefined && a != b) {
    return ctx.Error(absl::StrCat("inputs ", i, " ", ctx.input_type(i).ToString(), " and ", j, " ",
                                  ctx.input_type(j).ToString(), " have different element types"));
  }
  return absl::OkStatus();
}

// MatMul: A [..., M, K] x B [..., K, N] -> [broadcast(batch_A, batch_B), M, N]. A 1-D A is [1, K]
// and a 1-D B is [K, 1], with that dimension removed from the result.
absl::Status InferMatMul(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 1));
  const TensorType& at = ctx.input_type(0);
  const TensorType& bt = ctx.input_type(1);
  if (!at.has_rank() || !bt.has_rank()) {
    ctx.set_output_type(0, TensorType(at.dtype, std::nullopt));
    return absl::OkStatus();
  }
  if (at.rank() == 0 || bt.rank() == 0) {
    return ctx.Error(absl::StrCat("operands must have rank >= 1, got A ", at.ToString(), " and B ",
                                  bt.ToString()));
  }
  Shape a = *at.shape;
  Shape b = *bt.shape;
  const bool a_vector = a.size() == 1;
  const bool b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), Dim(1));
  if (b_vector) b.push_back(Dim(1));
  if (KnownDifferent(a[a.size() - 1], b[b.size() - 2])) {
    return ctx.Error(
        absl::StrCat("inner dimensions differ: A ", at.ToString(), " and B ", bt.ToString()));
  }
  const Shape a_batch(a.begin(), a.end() - 2);
  const Shape b_batch(b.begin(), b.end() - 2);
  std::optional<Shape> out = BroadcastShapes(a_batch, b_batch);
  if (!out) {
    return ctx.Error(absl::StrCat("batch dimensions cannot be broadcast: A ", at.ToString(),
                                  " and B ", bt.ToString()));
  }
  if (!a_vector) out->push_back(a[a.size() - 2]);
  if (!b_vector) out->push_back(b[b.size() - 1]);
  ctx.set_output_type(0, TensorType(at.dtype, out));
  return absl::OkStatus();
}

// Gemm: Y [M, N] = alpha * op(A) * op(B) + beta * C, op(A) [M, K], op(B) [K, N]; C broadcasts
// unidirectionally to [M, N].
absl::Status InferGemm(InferenceContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 1));
  if (ctx.has_input(2)) OTTR_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 2));
  const TensorType& at = ctx.input_type(0);
  const TensorType& bt = ctx.input_type(1);
  const bool trans_a = ctx.node().GetInt("transA", 0) != 0;
  const bool trans_b = ctx.node().GetInt("transB", 0) != 0;
  if ((at.has_rank() && at.rank() != 2) || (bt.has_rank() && bt.rank() != 2)) {
    return ctx.Error(absl::StrCat("A ", at.ToString(), " and B ", bt.ToString(), " must be 2-D"));
  }
  Dim m, n, ka, kb;
  if (at.has_rank()) {
    m = (*at.shape)[trans_a ? 1 : 0];
    ka = (*at.shape)[trans_a ? 0 : 1];
  }
  if (bt.has_rank()) {
    kb = (*bt.shape)[trans_b ? 1 : 0];
    n = (*bt.shape)[trans_b ? 0 : 1];
  }
  if (KnownDifferent(ka, kb)) {
    return ctx.Error(absl::StrCat("inner dimensions differ: op(A) of A ", at.ToString(),
                                  (trans_a ? " (transposed)" : ""), " and op(B) of B ",
                                  bt.ToString(), (trans_b ? " (transposed)" : "")));
  }
  if (ctx.has_input(2) && ctx.input_type(2).has_rank()) {
    const Shape& cs = *ctx.input_type(2).shape;
    const Shape mn = {m, n};
    bool ok = cs.size() <= 2;
    for (size_t i = 0; ok && i < cs.size(); ++i) {
      const Dim& c = cs[cs.size() - 1 - i];
      const Dim& y = mn[1 - i];
      ok = !(c.is_static() && c.value() != 1 && KnownDifferent(c, y));
    }
    if (!ok) {
      return ctx.Error(absl::StrCat("C ", ctx.input_type(2).ToString(),
                                    " does not broadcast to the output [", m.ToString(), ",",
                                    n.ToString(), "]"));
    }
  }
  ctx.set_output_type(0, TensorType(at.dtype, Shape{m, n}));
  return absl::OkStatus();
}

}  // namespace

void RegisterLinalgOps(OpRegistry& r) {
  r.Register(OpSchemaBuilder("", "MatMul")
                 .Opsets(7)
                 .Inputs(2, 2)
                 .Outputs(1, 1)
                 .Shape(InferMatMul)
                 .Build());
  // C is required before opset 11 (a superset is fine for the canonical form).
  r.Register(OpSchemaBuilder("", "Gemm")
                 .Opsets(7)
                 .Inputs(2, 3)
                 .Outputs(1, 1)
                 .Attr("alpha", Kind::kFloat)
                 .Attr("beta", Kind::kFloat)
                 .Attr("transA", Kind::kInt)
                 .Attr("transB", Kind::kInt)
                 .Shape(InferGemm)
                 .Build());
}

}  // namespace ottr::ir
