// Variadic Sum, Mean, Max and Min with broadcasting: up to kMaxFoldInputs inputs per launch,
// folded left to right with each step rounded to the element type, exactly as the CPU reference
// (runtime/cpu/elementwise_kernels.cc) accumulates into its float16/bfloat16 output. Max/Min
// propagate NaN from either side; integer Sum wraps.
#include "runtime/cuda/kernels/elementwise_device.h"

namespace ottr::cuda::kernels {
namespace {

template <FoldOp kOp>
struct FoldCombine {
  template <typename C>
  __device__ __forceinline__ C operator()(C acc, C v) const {
    if constexpr (kOp == FoldOp::kMax || kOp == FoldOp::kMin) {
      bool keep = kOp == FoldOp::kMax ? acc > v : acc < v;
      if constexpr (kIsFloat<C>) keep = keep || acc != acc;  // NaN in either propagates
      return keep ? acc : v;
    } else if constexpr (kIsInt<C>) {
      return WrapAdd(acc, v);
    } else {
      return acc + v;
    }
  }
};

template <int V, FoldOp kOp, typename T>
__global__ void __launch_bounds__(kThreads)
    FoldKernel(const __grid_constant__ IndexPlan<kMaxFoldInputs> p,
               const __grid_constant__ FoldInputs in, int count, int64_t mean_count,
               T* out, bool vec) {  // out may be in.ptr[0] (chunked folds): no __restrict__
  using C = ComputeType<T>;
  const FoldCombine<kOp> op;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = p.n / V;
    for (int64_t v = t; v < nv; v += step) {
      const int64_t i = v * V;
      int64_t off[kMaxFoldInputs];
      PlanOffsets(p, i, off);
      Pack<T, V> acc = LoadPack<V>(static_cast<const T*>(in.ptr[0]), off[0], p.inner_contiguous[0]);
#pragma unroll
      for (int k = 1; k < kMaxFoldInputs; ++k) {
        if (k < count) {
          const Pack<T, V> x =
              LoadPack<V>(static_cast<const T*>(in.ptr[k]), off[k], p.inner_contiguous[k]);
#pragma unroll
          for (int j = 0; j < V; ++j) acc.v[j] = Store<T>(op(Load(acc.v[j]), Load(x.v[j])));
        }
      }
      if (mean_count > 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) acc.v[j] = Store<T>(Load(acc.v[j]) / static_cast<C>(mean_count));
      }
      *reinterpret_cast<Pack<T, V>*>(out + i) = acc;
    }
    done = nv * V;
  }
  for (int64_t i = done + t; i < p.n; i += step) {
    int64_t off[kMaxFoldInputs];
    PlanOffsets(p, i, off);
    T acc = static_cast<const T*>(in.ptr[0])[off[0]];
#pragma unroll
    for (int k = 1; k < kMaxFoldInputs; ++k) {
      if (k < count) acc = Store<T>(op(Load(acc), Load(static_cast<const T*>(in.ptr[k])[off[k]])));
    }
    if (mean_count > 0) acc = Store<T>(Load(acc) / static_cast<C>(mean_count));
    out[i] = acc;
  }
}

template <FoldOp kOp, typename T>
cudaError_t FoldEntry(const IndexPlan<kMaxFoldInputs>& p, const FoldInputs& in, int count,
                      int64_t mean_count, void* out, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (count < 1 || count > kMaxFoldInputs) return cudaErrorInvalidValue;
  constexpr int V = PackWidth<T>();
  bool vec = PlanVectorizable(p, V) && Aligned16(out);
  for (int k = 0; k < count; ++k) vec = vec && (!p.inner_contiguous[k] || Aligned16(in.ptr[k]));
  FoldKernel<V, kOp, T><<<GridFor(vec ? std::max<int64_t>(p.n / V, 1) : p.n), kThreads, 0, stream>>>(
      p, in, count, mean_count, static_cast<T*>(out), vec);
  return cudaGetLastError();
}

template <FoldOp kOp>
FoldFn Entry(int type) {
  FoldFn fn = nullptr;
  VisitType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kOp == FoldOp::kMean ? kIsFloat<T> : kIsNumeric<T>) fn = &FoldEntry<kOp, T>;
  });
  return fn;
}

}  // namespace

FoldFn FindFold(FoldOp op, int type) {
  switch (op) {
    case FoldOp::kSum: return Entry<FoldOp::kSum>(type);
    case FoldOp::kMean: return Entry<FoldOp::kMean>(type);
    case FoldOp::kMax: return Entry<FoldOp::kMax>(type);
    case FoldOp::kMin: return Entry<FoldOp::kMin>(type);
  }
  return nullptr;
}

}  // namespace ottr::cuda::kernels
