// Helpers shared by the tensor_*.cu kernels (CUDA only).
#ifndef OTTR_RUNTIME_CUDA_KERNELS_TENSOR_COMMON_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_TENSOR_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda::kernels::tensor_impl {

// Unsigned storage of an element of N bytes (16: uint4).
template <int N>
struct Width;
template <>
struct Width<1> {
  using type = uint8_t;
};
template <>
struct Width<2> {
  using type = uint16_t;
};
template <>
struct Width<4> {
  using type = uint32_t;
};
template <>
struct Width<8> {
  using type = unsigned long long;
};
template <>
struct Width<16> {
  using type = uint4;
};

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<E>{}) with the element storage type of `bytes`; cudaErrorInvalidValue for
// other widths.
template <typename F>
cudaError_t VisitWidth(int bytes, F&& f) {
  switch (bytes) {
    case 1: return f(TypeTag<uint8_t>{});
    case 2: return f(TypeTag<uint16_t>{});
    case 4: return f(TypeTag<uint32_t>{});
    case 8: return f(TypeTag<unsigned long long>{});
    case 16: return f(TypeTag<uint4>{});
    default: return cudaErrorInvalidValue;
  }
}

// Calls f(TypeTag<T>{}) with the C++ type of an ONNX dtype code (bool as bool, float16 as __half,
// bfloat16 as __nv_bfloat16); cudaErrorInvalidValue for others.
template <typename F>
cudaError_t VisitDtype(int dtype, F&& f) {
  switch (dtype) {
    case 1: return f(TypeTag<float>{});
    case 2: return f(TypeTag<uint8_t>{});
    case 3: return f(TypeTag<int8_t>{});
    case 4: return f(TypeTag<uint16_t>{});
    case 5: return f(TypeTag<int16_t>{});
    case 6: return f(TypeTag<int32_t>{});
    case 7: return f(TypeTag<int64_t>{});
    case 9: return f(TypeTag<bool>{});
    case 10: return f(TypeTag<__half>{});
    case 11: return f(TypeTag<double>{});
    case 12: return f(TypeTag<uint32_t>{});
    case 13: return f(TypeTag<uint64_t>{});
    case 16: return f(TypeTag<__nv_bfloat16>{});
    default: return cudaErrorInvalidValue;
  }
}

// The float types (float16/bfloat16/float32/float64).
template <typename F>
cudaError_t VisitFloatDtype(int dtype, F&& f) {
  switch (dtype) {
    case 1: return f(TypeTag<float>{});
    case 10: return f(TypeTag<__half>{});
    case 11: return f(TypeTag<double>{});
    case 16: return f(TypeTag<__nv_bfloat16>{});
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
constexpr bool kIsHalfLike = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
template <typename T>
constexpr bool kIsFloatLike = std::is_floating_point<T>::value || kIsHalfLike<T>;

// Accumulator of a float type: double for float64, float otherwise.
template <typename T>
using FloatAcc = std::conditional_t<std::is_same<T, double>::value, double, float>;

template <typename T>
__device__ __forceinline__ auto ToAcc(T v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __half2float(v);
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// A double or float rounded to the float type T (float16/bfloat16 through float, as the CPU's
// FromDouble).
template <typename T, typename F>
__device__ __forceinline__ T FromAcc(F v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

inline unsigned GridFor(int64_t n, int threads, int64_t cap = 8192) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

// Reads index i of an int32 or int64 index tensor as int64.
template <typename Idx>
__device__ __forceinline__ int64_t LoadIndex(const Idx* p, int64_t i) {
  return static_cast<int64_t>(p[i]);
}

}  // namespace ottr::cuda::kernels::tensor_impl

#endif  // OTTR_RUNTIME_CUDA_KERNELS_TENSOR_COMMON_CUH_
