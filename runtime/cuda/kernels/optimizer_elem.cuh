// The optimizers' element updates, shared by the multi-tensor kernels (optimizer_kernels.cu) and
// the GEMM-fused update (gemm_adam.cu). Element arithmetic uses the round-to-nearest intrinsics
// (__fmul_rn, __dadd_rn, ...) so that nvcc cannot contract a·b + c into a fused multiply-add: the
// CPU reference rounds each operation, and the float32 results match it bit for bit.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_OPTIMIZER_ELEM_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_OPTIMIZER_ELEM_CUH_

#include "runtime/cuda/kernels/norm_common.cuh"
#include "runtime/cuda/kernels/optimizer_kernels.h"

namespace ottr::cuda::kernels::opt {

__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float Sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double Sqrt(double a) { return __dsqrt_rn(a); }

__device__ __forceinline__ double ReadLr(const OptimizerScalars& s) { return nl::LoadAny(s.lr, s.lr_dtype, 0); }
__device__ __forceinline__ int64_t ReadStep(const OptimizerScalars& s) {
  return s.step_dtype == nl::kI32 ? static_cast<int64_t>(*static_cast<const int32_t*>(s.step))
                                  : *static_cast<const int64_t*>(s.step);
}

// ---------------------------------------------------------------------------------------------
// Element updates. Prepare() runs once per thread (reads the device scalars); Apply() updates
// one element: x = param (in/out), g = grad, st = states (in/out).

template <typename T>
struct AdamElem {
  static constexpr int kStates = 2;
  // Host-side constants, rounded to T as the CPU reference does.
  T w1, b2, w2, wdt, eps;
  double beta1, beta2, wd;
  bool decoupled;
  // Per-step scalars.
  T step_size, bc2_sqrt, decay;

  __device__ void Prepare(const OptimizerScalars& s) {
    T out[3];
    PrepareSplit(s, 0, out);
    PrepareSplit(s, 1, out);
    step_size = out[0];
    bc2_sqrt = out[1];
    decay = out[2];
  }
  // Prepare() by two lanes of a warp at once (the two pow in double are its longest chain: ~1 µs
  // for one thread, bench/adam_scalars_bench.cu): lane 0 writes step_size and decay to out[0],
  // out[2], lane 1 bc2_sqrt to out[1]; other lanes do nothing. Prepare() runs both parts itself.
  __device__ void PrepareSplit(const OptimizerScalars& s, int lane, T* out) const {
    if (lane > 1) return;
    const double t = static_cast<double>(ReadStep(s));
    const double bc = 1.0 - pow(lane == 0 ? beta1 : beta2, t);
    if (lane == 0) {
      const double lr = ReadLr(s);
      out[0] = static_cast<T>(lr / bc);
      out[2] = static_cast<T>(__dsub_rn(1.0, __dmul_rn(lr, wd)));
    } else {
      out[1] = static_cast<T>(sqrt(bc));
    }
  }
  __device__ __forceinline__ void Apply(T& x, T d, T* st, bool /*has_state0*/) const {
    if (wd != 0.0) {
      if (decoupled) {
        x = Mul(x, decay);
      } else {
        d = Add(d, Mul(wdt, x));
      }
    }
    const T m = Add(st[0], Mul(w1, Sub(d, st[0])));  // lerp(m, g, 1 − β1)
    const T v = Add(Mul(st[1], b2), Mul(Mul(w2, d), d));
    const T denom = Add(Div(Sqrt(v), bc2_sqrt), eps);
    x = Sub(x, Mul(step_size, Div(m, denom)));
    st[0] = m;
    st[1] = v;
  }
};

template <typename T>
AdamElem<T> MakeAdam(const AdamHyper& h) {
  AdamElem<T> e{};
  e.beta1 = h.beta1;
  e.beta2 = h.beta2;
  e.wd = h.weight_decay;
  e.decoupled = h.decoupled;
  e.w1 = static_cast<T>(1.0 - e.beta1);
  e.b2 = static_cast<T>(e.beta2);
  e.w2 = static_cast<T>(1.0 - e.beta2);
  e.wdt = static_cast<T>(e.wd);
  e.eps = static_cast<T>(h.epsilon);
  return e;
}

template <typename T>
struct SgdElem {
  static constexpr int kStates = 1;
  T momentum, one_minus_dampening, wd;
  bool nesterov;
  T lr;
  bool first;  // step <= 1: the buffer starts as the gradient

  __device__ void Prepare(const OptimizerScalars& s) {
    lr = static_cast<T>(ReadLr(s));
    first = ReadStep(s) <= 1;
  }
  __device__ __forceinline__ void Apply(T& x, T d, T* st, bool has_buf) const {
    if (wd != T(0)) d = Add(d, Mul(wd, x));
    if (has_buf) {
      const T b = first ? d : Add(Mul(momentum, st[0]), Mul(one_minus_dampening, d));
      st[0] = b;
      d = nesterov ? Add(d, Mul(momentum, b)) : b;
    }
    x = Sub(x, Mul(lr, d));
  }
};

template <typename T>
SgdElem<T> MakeSgd(const SgdHyper& h) {
  SgdElem<T> e{};
  e.momentum = static_cast<T>(h.momentum);
  // (1 - dampening) in T, as the reference's `(1 - dampening)` with a T dampening.
  e.one_minus_dampening = static_cast<T>(1) - static_cast<T>(h.dampening);
  e.wd = static_cast<T>(h.weight_decay);
  e.nesterov = h.nesterov;
  return e;
}


}  // namespace ottr::cuda::kernels::opt

#endif  // OTTR_RUNTIME_CUDA_KERNELS_OPTIMIZER_ELEM_CUH_
