// Comparisons (any element type -> bool; float16/bfloat16 compared as float, so NaN compares
// false like IEEE), And/Or/Xor on bool, and Where, all with broadcasting. Where only moves bits,
// so it is instantiated per element size.
#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

#define OTTR_CMP_OP_(Name, expr)                                   \
  struct Name : OpBase {                                           \
    template <typename C>                                          \
    __device__ __forceinline__ bool operator()(C x, C z) const { \
      return expr;                                                 \
    }                                                              \
  };
OTTR_CMP_OP_(EqualOp, x == z)
OTTR_CMP_OP_(LessOp, x < z)
OTTR_CMP_OP_(GreaterOp, x > z)
OTTR_CMP_OP_(LessOrEqualOp, x <= z)
OTTR_CMP_OP_(GreaterOrEqualOp, x >= z)
OTTR_CMP_OP_(AndOp, x && z)
OTTR_CMP_OP_(OrOp, x || z)
OTTR_CMP_OP_(XorOp, x != z)
#undef OTTR_CMP_OP_

template <typename Op>
BinaryFn CompareEntry(int type) {
  BinaryFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fn = &BinaryEntry<Op, T, T, bool>;
  });
  return fn;
}

struct WhereOp : RawOp {
  template <typename B>
  __device__ __forceinline__ B operator()(bool c, B x, B y) const {
    return c ? x : y;
  }
};

template <typename B>
cudaError_t WhereEntry(const IndexPlan<3>& plan, const void* cond, const void* x, const void* y,
                       void* out, cudaStream_t stream) {
  return LaunchTernary<WhereOp, bool, B, B, B>(plan, cond, x, y, out, WhereOp{}, stream);
}

}  // namespace

BinaryFn FindComparison(BinaryOp op, int a_type, int b_type) {
  if (a_type != b_type) return nullptr;
  switch (op) {
    case BinaryOp::kEqual: return CompareEntry<EqualOp>(a_type);
    case BinaryOp::kLess: return CompareEntry<LessOp>(a_type);
    case BinaryOp::kGreater: return CompareEntry<GreaterOp>(a_type);
    case BinaryOp::kLessOrEqual: return CompareEntry<LessOrEqualOp>(a_type);
    case BinaryOp::kGreaterOrEqual: return CompareEntry<GreaterOrEqualOp>(a_type);
    case BinaryOp::kAnd: return a_type == 9 ? &BinaryEntry<AndOp, bool, bool, bool> : nullptr;
    case BinaryOp::kOr: return a_type == 9 ? &BinaryEntry<OrOp, bool, bool, bool> : nullptr;
    case BinaryOp::kXor: return a_type == 9 ? &BinaryEntry<XorOp, bool, bool, bool> : nullptr;
    default: return nullptr;
  }
}

WhereFn FindWhere(int elem_bytes) {
  switch (elem_bytes) {
    case 1: return &WhereEntry<uint8_t>;
    case 2: return &WhereEntry<uint16_t>;
    case 4: return &WhereEntry<uint32_t>;
    case 8: return &WhereEntry<uint64_t>;
    default: return nullptr;
  }
}

}  // namespace ottr::cuda::kernels
