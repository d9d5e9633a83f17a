// Cast between every pair of ottr element types (ConvertElement in elementwise_device.h, the
// CPU reference's semantics). A cast to the same type is a view the op compiles to a copy, so
// those pairs are not instantiated here.
#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

template <typename D, typename S>
struct CastOp : RawOp {
  __device__ __forceinline__ D operator()(S v) const { return ConvertElement<D, S>(v); }
};

template <typename D, typename S>
cudaError_t CastEntry(const void* in, void* out, int64_t n, cudaStream_t stream) {
  return LaunchFlatUnary<CastOp<D, S>, S, D>(in, out, n, CastOp<D, S>{}, stream);
}

}  // namespace

UnaryFn FindCast(int from_type, int to_type) {
  UnaryFn fn = nullptr;
  VisitType(from_type, [&](auto from_tag) {
    using S = typename decltype(from_tag)::type;
    VisitType(to_type, [&](auto to_tag) {
      using D = typename decltype(to_tag)::type;
      if constexpr (!std::is_same<S, D>::value) fn = &CastEntry<D, S>;
    });
  });
  return fn;
}

}  // namespace ottr::cuda::kernels
