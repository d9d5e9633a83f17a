// Device helpers shared by the softmax, loss, normalisation, dropout and optimizer kernels
// (softmax_kernels.cu, loss_kernels.cu, norm_kernels.cu, dropout_kernels.cu,
// optimizer_kernels.cu). Included by .cu files only: no abseil, no ottr ir/ headers.
//
// Conventions:
//   - Element types are passed across the host boundary as ONNX TensorProto codes (kF32...).
//   - float16 / bfloat16 / float32 compute in float, float64 in double (ComputeT).
//   - Every reduction is a fixed tree (warp butterflies, then the warps' partials in warp order),
//     so results are identical from run to run; no floating-point atomics anywhere.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_NORM_COMMON_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_NORM_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace ottr::cuda::kernels::nl {

// ONNX TensorProto.DataType codes used by the launchers.
constexpr int kF32 = 1;
constexpr int kI32 = 6;
constexpr int kI64 = 7;
constexpr int kBool = 9;
constexpr int kF16 = 10;
constexpr int kF64 = 11;
constexpr int kBF16 = 16;

template <typename T>
struct ComputeOf {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};
template <typename T>
using ComputeT = typename ComputeOf<T>::type;

__device__ __forceinline__ float ToC(float v) { return v; }
__device__ __forceinline__ double ToC(double v) { return v; }
__device__ __forceinline__ float ToC(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToC(__nv_bfloat16 v) { return __bfloat162float(v); }

// Rounds a computed value to the element type T (nearest-even).
template <typename T, typename C>
__device__ __forceinline__ T FromC(C v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

__device__ __forceinline__ float Exp(float v) { return expf(v); }
__device__ __forceinline__ double Exp(double v) { return exp(v); }
__device__ __forceinline__ float Log(float v) { return logf(v); }
__device__ __forceinline__ double Log(double v) { return log(v); }
__device__ __forceinline__ float Sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double Sqrt(double v) { return sqrt(v); }

// Element i of a floating-point tensor of ONNX type `dtype`, widened to double. Used for
// per-row / per-channel parameters whose type may differ from the data's (the switch is uniform
// across the warp).
__device__ __forceinline__ double LoadAny(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case kF32: return static_cast<const float*>(p)[i];
    case kF64: return static_cast<const double*>(p)[i];
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kI32: return static_cast<const int32_t*>(p)[i];
    case kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case kBool: return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
    default: return __longlong_as_double(0x7ff8000000000000LL);  // NaN
  }
}

// Stores v (rounded to nearest) as element i of a floating-point tensor of type `dtype`.
__device__ __forceinline__ void StoreAny(void* p, int dtype, int64_t i, double v) {
  switch (dtype) {
    case kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case kF64: static_cast<double*>(p)[i] = v; break;
    case kF16: static_cast<__half*>(p)[i] = __double2half(v); break;
    case kBF16: static_cast<__nv_bfloat16*>(p)[i] = __double2bfloat16(v); break;
    default: break;
  }
}

// Integer labels (int32 or int64) widened to int64.
__device__ __forceinline__ int64_t LoadLabel(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

template <typename C>
__device__ __forceinline__ C QuietNaN() {
  return std::numeric_limits<C>::quiet_NaN();
}

// ---------------------------------------------------------------------------------------------
// Reductions. `kWidth` lanes (a power of two <= 32, aligned within the warp) reduce together;
// every lane of the group ends with the same value. All 32 lanes must call them.

template <int kWidth = 32, typename C>
__device__ __forceinline__ C WarpSum(C v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int kWidth = 32, typename C>
__device__ __forceinline__ C WarpMax(C v) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). `smem` holds >= 32 values;
// every thread gets the same total. Contains __syncthreads(): all threads must call it.
template <typename C>
__device__ __forceinline__ C BlockSum(C v, C* smem) {
  v = WarpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  C t = lane < warps ? smem[lane] : C(0);
  return WarpSum(t);
}

template <typename C>
__device__ __forceinline__ C BlockMax(C v, C* smem) {
  v = WarpMax(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  C t = lane < warps ? smem[lane] : -std::numeric_limits<C>::infinity();
  return WarpMax(t);
}

// Block sum of two values at once (one pair of barriers).
template <typename C>
__device__ __forceinline__ void BlockSum2(C& a, C& b, C* smem /* >= 64 */) {
  a = WarpSum(a);
  b = WarpSum(b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    smem[warp] = a;
    smem[32 + warp] = b;
  }
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  a = WarpSum(lane < warps ? smem[lane] : C(0));
  b = WarpSum(lane < warps ? smem[32 + lane] : C(0));
}

// ---------------------------------------------------------------------------------------------
// Unsigned 32-bit division by a run-time invariant d >= 1 with a multiply and a shift
// (Granlund & Montgomery, "Division by invariant integers using multiplication", 1994):
// q = (umulhi(n, m) + n) >> s with s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1.
// Exact for n < 2^31.
struct FastDivmod {
  uint32_t d = 1, m = 1, s = 0;
  FastDivmod() = default;
  __host__ explicit FastDivmod(uint32_t divisor) : d(divisor) {
    s = 0;
    while ((uint64_t{1} << s) < divisor) ++s;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ uint32_t Div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
  __device__ __forceinline__ void DivMod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = Div(n);
    r = n - q * d;
  }
};

// Signed 64-bit index division by an invariant d >= 1: FastDivmod when every dividend is below
// 2^31 (`limit`, the largest dividend + 1, decides once on the host), else a plain division.
// The branch is uniform across the grid.
struct IndexDiv {
  FastDivmod fast;
  int64_t d = 1;
  bool use_fast = true;
  IndexDiv() = default;
  __host__ IndexDiv(int64_t divisor, int64_t limit)
      : d(divisor), use_fast(limit < (int64_t{1} << 31) && divisor < (int64_t{1} << 31)) {
    if (use_fast) fast = FastDivmod(static_cast<uint32_t>(divisor));
  }
  __device__ __forceinline__ int64_t Div(int64_t n) const {
    return use_fast ? static_cast<int64_t>(fast.Div(static_cast<uint32_t>(n))) : n / d;
  }
};

// Number of SMs of the current device (queried once).
inline int SmCount() {
  static const int count = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return n > 0 ? n : 132;
  }();
  return count;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int GridFor(int64_t work_items, int per_block, int max_blocks) {
  const int64_t g = CeilDiv(std::max<int64_t>(work_items, 1), per_block);
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(g, 1), max_blocks));
}

// Smallest power of two >= n (n >= 1).
inline int NextPow2(int64_t n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Calls f(T{}) with T the element type of a floating-point ONNX type code (C++17 tag dispatch:
// `[&](auto tag) { using T = decltype(tag); ... }`); false for other codes.
template <typename F>
bool DispatchFloat(int dtype, F&& f) {
  switch (dtype) {
    case kF32: f(float{}); return true;
    case kF16: f(__half{}); return true;
    case kBF16: f(__nv_bfloat16{}); return true;
    case kF64: f(double{}); return true;
    default: return false;
  }
}

}  // namespace ottr::cuda::kernels::nl

#endif  // OTTR_RUNTIME_CUDA_KERNELS_NORM_COMMON_CUH_
