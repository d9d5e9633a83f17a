// Optimizer-update kernels (see optimizer_kernels.h for the formulas).
//
// Work is split into chunks of kMultiTensorChunk elements that never straddle tensors; a block
// takes chunks in grid-stride order and finds a chunk's tensor by binary search over the
// entries' first_chunk. Inside a chunk each thread handles 4 consecutive elements at a time
// (16-byte vectors for float32 when every pointer of the tensor is aligned).
//
// Element arithmetic uses the round-to-nearest intrinsics (__fmul_rn, __dadd_rn, ...) so that
// nvcc cannot contract a·b + c into a fused multiply-add: the CPU reference rounds each
// operation, and the float32 results match it bit for bit.
#include "runtime/cuda/kernels/optimizer_kernels.h"

#include <algorithm>
#include <vector>

#include "runtime/cuda/kernels/norm_common.cuh"
#include "runtime/cuda/kernels/optimizer_elem.cuh"
#include "runtime/cuda/kernels/pdl.cuh"

namespace ottr::cuda::kernels {
namespace {

using namespace opt;  // NOLINT: the element updates (optimizer_elem.cuh)

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

__device__ __forceinline__ bool Aligned(const void* p, int bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The guard of a guarded update: a float scalar that is not finite, or a bool scalar that is false.
__device__ __forceinline__ bool GuardTripped(const OptimizerScalars& s) {
  if (s.guard == nullptr) return false;
  const double v = nl::LoadAny(s.guard, s.guard_dtype, 0);
  return s.guard_dtype == nl::kBool ? v == 0.0 : !isfinite(v);
}

// The gradient factor of an unscaling update: T(1 / S), the reciprocal in double.
template <typename T>
struct Unscale {
  bool on = false;
  T inv = T(1);
  __device__ __forceinline__ T operator()(T g) const { return on ? Mul(g, inv) : g; }
};
template <typename T>
__device__ __forceinline__ Unscale<T> ReadUnscale(const OptimizerScalars& s) {
  Unscale<T> u;
  if (s.grad_scale != nullptr) {
    u.on = true;
    u.inv = static_cast<T>(__ddiv_rn(1.0, nl::LoadAny(s.grad_scale, s.grad_scale_dtype, 0)));
  }
  return u;
}

// The low-precision copy of an updated float32 parameter (MultiTensorEntry::low_out).
template <typename L>
__device__ __forceinline__ L ToLow(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 ToLow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half ToLow<__half>(float x) { return __float2half_rn(x); }

template <typename T>
__device__ __forceinline__ void StoreLow(const MultiTensorEntry& e, int64_t i, T x) {
  if (e.low_dtype == nl::kBF16) {
    static_cast<__nv_bfloat16*>(e.low_out)[i] = ToLow<__nv_bfloat16>(static_cast<float>(x));
  } else {
    static_cast<__half*>(e.low_out)[i] = ToLow<__half>(static_cast<float>(x));
  }
}

// Four consecutive elements at once (low_out + i0 8-byte aligned).
template <typename L, typename T>
__device__ __forceinline__ void StoreLow4As(void* out, int64_t i0, const T* x) {
  struct alignas(8) Four {
    L v[4];
  } f;
#pragma unroll
  for (int j = 0; j < 4; ++j) f.v[j] = ToLow<L>(static_cast<float>(x[j]));
  *reinterpret_cast<Four*>(static_cast<L*>(out) + i0) = f;
}
template <typename T>
__device__ __forceinline__ void StoreLow4(const MultiTensorEntry& e, int64_t i0, const T* x) {
  if (e.low_dtype == nl::kBF16) {
    StoreLow4As<__nv_bfloat16>(e.low_out, i0, x);
  } else {
    StoreLow4As<__half>(e.low_out, i0, x);
  }
}

// A skipped update (guard tripped): outputs take the inputs' values, copied only where the
// output is another buffer (in place they already hold them).
template <typename T, typename Elem>
__device__ void PassThroughChunk(const MultiTensorEntry& e, int64_t begin, int64_t end) {
  const T* p = static_cast<const T*>(e.param);
  T* po = static_cast<T*>(e.param_out);
  const T* s_in[2] = {static_cast<const T*>(e.state0), static_cast<const T*>(e.state1)};
  T* s_out[2] = {static_cast<T*>(e.state0_out), static_cast<T*>(e.state1_out)};
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    if (po != p) po[i] = p[i];
    if (e.low_out != nullptr) StoreLow(e, i, p[i]);
#pragma unroll
    for (int k = 0; k < Elem::kStates; ++k) {
      if (s_out[k] != nullptr && s_in[k] != nullptr && s_out[k] != s_in[k]) s_out[k][i] = s_in[k][i];
    }
  }
}

// Updates elements [begin, end) of tensor `e`.
template <typename T, typename Elem>
__device__ void ProcessChunk(const MultiTensorEntry& e, int64_t begin, int64_t end, const Elem& op,
                             const Unscale<T>& unscale) {
  const T* g = static_cast<const T*>(e.grad);
  const T* p = static_cast<const T*>(e.param);
  T* po = static_cast<T*>(e.param_out);
  const T* s_in[2] = {static_cast<const T*>(e.state0), static_cast<const T*>(e.state1)};
  T* s_out[2] = {static_cast<T*>(e.state0_out), static_cast<T*>(e.state1_out)};
  const bool has0 = e.state0 != nullptr;
  constexpr int kVec = 4;
  constexpr int kBytes = kVec * sizeof(T);
  const bool vec = Aligned(g, kBytes) && Aligned(p, kBytes) && Aligned(po, kBytes) && Aligned(s_in[0], kBytes) &&
                   Aligned(s_in[1], kBytes) && Aligned(s_out[0], kBytes) && Aligned(s_out[1], kBytes) &&
                   Aligned(e.low_out, 8);
  // A thread's vectors two at a time: both vectors' loads are issued before either is used, so a
  // chunk of 2048 elements costs a thread one memory round trip instead of two (the update is
  // latency bound at these sizes: Nsight Compute at batch 128, bench/RESULTS.md 2026-12-03).
  // The two vectors are different elements, so in-place outputs stay safe.
  struct Loaded {
    Vec<T, kVec> x, g, s[Elem::kStates];
  };
  auto load = [&](int64_t i0, Loaded& v) {
    v.x = *reinterpret_cast<const Vec<T, kVec>*>(p + i0);
    v.g = *reinterpret_cast<const Vec<T, kVec>*>(g + i0);
#pragma unroll
    for (int k = 0; k < Elem::kStates; ++k) {
      if (s_in[k] != nullptr) v.s[k] = *reinterpret_cast<const Vec<T, kVec>*>(s_in[k] + i0);
    }
  };
  auto update = [&](int64_t i0, Loaded& v) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      T st[Elem::kStates];
#pragma unroll
      for (int k = 0; k < Elem::kStates; ++k) st[k] = s_in[k] != nullptr ? v.s[k].v[j] : T(0);
      op.Apply(v.x.v[j], unscale(v.g.v[j]), st, has0);
#pragma unroll
      for (int k = 0; k < Elem::kStates; ++k) v.s[k].v[j] = st[k];
    }
    *reinterpret_cast<Vec<T, kVec>*>(po + i0) = v.x;
    if (e.low_out != nullptr) StoreLow4(e, i0, v.x.v);
#pragma unroll
    for (int k = 0; k < Elem::kStates; ++k) {
      if (s_out[k] != nullptr && s_in[k] != nullptr) *reinterpret_cast<Vec<T, kVec>*>(s_out[k] + i0) = v.s[k];
    }
  };
  auto scalar = [&](int64_t i0) {
    for (int64_t i = i0; i < i0 + kVec && i < end; ++i) {
      T x = p[i];
      T st[Elem::kStates];
#pragma unroll
      for (int k = 0; k < Elem::kStates; ++k) st[k] = s_in[k] != nullptr ? s_in[k][i] : T(0);
      op.Apply(x, unscale(g[i]), st, has0);
      po[i] = x;
      if (e.low_out != nullptr) StoreLow(e, i, x);
#pragma unroll
      for (int k = 0; k < Elem::kStates; ++k) {
        if (s_out[k] != nullptr && s_in[k] != nullptr) s_out[k][i] = st[k];
      }
    }
  };
  const int64_t stride = static_cast<int64_t>(blockDim.x) * kVec;
  for (int64_t i0 = begin + static_cast<int64_t>(threadIdx.x) * kVec; i0 < end; i0 += 2 * stride) {
    const int64_t i1 = i0 + stride;
    const bool v0 = vec && i0 + kVec <= end;
    const bool v1 = vec && i1 + kVec <= end;
    if (v0 && v1) {
      Loaded a, b;
      load(i0, a);
      load(i1, b);
      update(i0, a);
      update(i1, b);
      continue;
    }
    if (v0) {
      Loaded a;
      load(i0, a);
      update(i0, a);
    } else {
      scalar(i0);
    }
    if (i1 < end) scalar(i1);  // past a vector's end: the tail of the chunk, element by element
  }
}

// The per-step scalars (Elem::Prepare: the bias corrections' double-precision pow, sqrt and
// divisions) computed once per block by thread 0 and shared, not by each of the 84k threads of
// the grouped Adam at batch 128 (669k parameters): 9.28 µs on the H200 against 9.5-9.6 µs
// (bench/RESULTS.md 2026-12-02 (4)). `op` must be the same in every thread (the launch's argument).
template <typename Elem>
__device__ __forceinline__ void PrepareOnce(Elem& op, const OptimizerScalars& s) {
  __shared__ Elem shared;
  if (threadIdx.x == 0) {
    shared = op;
    shared.Prepare(s);
  }
  __syncthreads();
  op = shared;
}

// Elements [begin, end) of chunk `index` (counted from the tensor's first chunk) of a tensor of
// `numel` elements, and how many chunks such a tensor has.
struct ChunkSpan {
  int64_t begin, end;
};
__device__ __forceinline__ ChunkSpan ChunkRange(int64_t index, int64_t numel) {
  const int64_t begin = index * kMultiTensorChunk;
  return {begin, min(begin + kMultiTensorChunk, numel)};
}
__host__ __device__ constexpr int64_t ChunkCount(int64_t numel) {
  return (numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
}

// Finds the entry holding a chunk: the last k with first_chunk <= chunk (binary search), reusing
// the previous answer while the block's chunks stay inside one tensor.
struct EntryCursor {
  int k = 0;
  int64_t begin = 0, end = 0;  // chunks [begin, end) belong to entry k

  template <typename Entry>
  __device__ __forceinline__ int Find(const Entry& entry, int num, int64_t chunk) {
    if (chunk >= begin && chunk < end) return k;
    int lo = 0, hi = num - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (entry(mid).first_chunk <= chunk) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    k = lo;
    begin = entry(lo).first_chunk;
    end = begin + ChunkCount(entry(lo).numel);
    return k;
  }
};

template <typename T, typename Elem>
__global__ void __launch_bounds__(256)
    MultiTensorTableKernel(const MultiTensorEntry* __restrict__ table, int num, int64_t total_chunks, Elem op,
                           OptimizerScalars s) {
  WaitForPriorGrids();  // pdl.cuh: the gradients, the guard and the step are earlier launches' outputs
  LetDependentsLaunch();
  const bool skip = GuardTripped(s);
  if (!skip) PrepareOnce(op, s);  // skip is the same in every thread
  const Unscale<T> unscale = ReadUnscale<T>(s);
  EntryCursor cur;
  for (int64_t chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
    const MultiTensorEntry& e = table[cur.Find([&](int i) -> const MultiTensorEntry& { return table[i]; }, num, chunk)];
    const auto [begin, end] = ChunkRange(chunk - e.first_chunk, e.numel);
    if (skip) {
      PassThroughChunk<T, Elem>(e, begin, end);
    } else {
      ProcessChunk<T>(e, begin, end, op, unscale);
    }
  }
}

struct PackedTable {
  MultiTensorEntry e[kMaxPackedTensors];
  int num = 0;
  int64_t total_chunks = 0;
};

template <typename T, typename Elem>
__global__ void __launch_bounds__(256)
    MultiTensorPackedKernel(const __grid_constant__ PackedTable t, Elem op, OptimizerScalars s) {
  WaitForPriorGrids();  // pdl.cuh: the gradients, the guard and the step are earlier launches' outputs
  LetDependentsLaunch();
  const bool skip = GuardTripped(s);
  if (!skip) PrepareOnce(op, s);  // skip is the same in every thread
  const Unscale<T> unscale = ReadUnscale<T>(s);
  EntryCursor cur;
  for (int64_t chunk = blockIdx.x; chunk < t.total_chunks; chunk += gridDim.x) {
    const MultiTensorEntry& e = t.e[cur.Find([&](int i) -> const MultiTensorEntry& { return t.e[i]; }, t.num, chunk)];
    const auto [begin, end] = ChunkRange(chunk - e.first_chunk, e.numel);
    if (skip) {
      PassThroughChunk<T, Elem>(e, begin, end);
    } else {
      ProcessChunk<T>(e, begin, end, op, unscale);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ottr::AllFinite and ottr::LossScaleUpdate.

constexpr int kMaxFiniteTensors = 64;
struct FiniteTable {
  FiniteCheckEntry e[kMaxFiniteTensors];
  int64_t first_chunk[kMaxFiniteTensors];
  int num = 0;
  int64_t total_chunks = 0;
};

template <typename T>
__device__ __forceinline__ bool ChunkFinite(const void* data, int64_t begin, int64_t end) {
  const T* x = static_cast<const T*>(data);
  bool ok = true;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) ok &= isfinite(nl::ToC(x[i]));
  return ok;
}

__global__ void __launch_bounds__(256) AllFiniteKernel(const __grid_constant__ FiniteTable t, bool* ok) {
  int k = 0;
  for (int64_t chunk = blockIdx.x; chunk < t.total_chunks; chunk += gridDim.x) {
    while (k + 1 < t.num && t.first_chunk[k + 1] <= chunk) ++k;  // chunks rise within a block
    const FiniteCheckEntry& e = t.e[k];
    const auto [begin, end] = ChunkRange(chunk - t.first_chunk[k], e.numel);
    bool fine = true;
    switch (e.dtype) {
      case nl::kF32: fine = ChunkFinite<float>(e.data, begin, end); break;
      case nl::kF64: fine = ChunkFinite<double>(e.data, begin, end); break;
      case nl::kF16: fine = ChunkFinite<__half>(e.data, begin, end); break;
      case nl::kBF16: fine = ChunkFinite<__nv_bfloat16>(e.data, begin, end); break;
      default: fine = false;
    }
    if (!fine) *ok = false;
  }
}

__global__ void LossScaleUpdateKernel(const void* scale, int scale_dtype, const int64_t* good, const bool* ok,
                                      void* scale_out, int64_t* good_out, LossScaleHyper h) {
  const double s = nl::LoadAny(scale, scale_dtype, 0);
  const int64_t g = *good;
  const bool fine = *ok;
  int64_t new_good = 0;
  if (!fine) {
    nl::StoreAny(scale_out, scale_dtype, 0, s * h.backoff_factor);
  } else if (g + 1 >= h.growth_interval) {
    nl::StoreAny(scale_out, scale_dtype, 0, s * h.growth_factor);
    if (!isfinite(nl::LoadAny(scale_out, scale_dtype, 0))) nl::StoreAny(scale_out, scale_dtype, 0, s);
  } else {
    nl::StoreAny(scale_out, scale_dtype, 0, s);
    new_good = g + 1;
  }
  *good_out = new_good;
}

int GridForChunks(int64_t chunks) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(chunks, nl::SmCount() * 8)));
}

template <typename T, typename Elem>
cudaError_t LaunchPacked(const MultiTensorEntry* entries, int num, const Elem& op, const OptimizerScalars& s,
                         cudaStream_t stream, bool programmatic) {
  for (int first = 0; first < num; first += kMaxPackedTensors) {
    PackedTable t;
    t.num = std::min(kMaxPackedTensors, num - first);
    for (int i = 0; i < t.num; ++i) t.e[i] = entries[first + i];
    t.total_chunks = FillChunkOffsets(t.e, t.num);
    if (t.total_chunks == 0) continue;
    // A launch after the first follows it on the stream: programmatic whenever the first was.
    cudaError_t err = LaunchKernel(programmatic, MultiTensorPackedKernel<T, Elem>, dim3(GridForChunks(t.total_chunks)),
                                   dim3(256), 0, stream, t, op, s);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// ai.onnx.preview.training optimizers: per element in double (tensors float32 or float64).

__device__ __forceinline__ double LoadF(const void* p, bool f64, int64_t i) {
  return f64 ? static_cast<const double*>(p)[i] : static_cast<double>(static_cast<const float*>(p)[i]);
}
__device__ __forceinline__ void StoreF(void* p, bool f64, int64_t i, double v) {
  if (p == nullptr) return;
  if (f64) {
    static_cast<double*>(p)[i] = v;
  } else {
    static_cast<float*>(p)[i] = static_cast<float>(v);
  }
}

template <OnnxOptimizer K>
__global__ void __launch_bounds__(256)
    OnnxOptimizerKernel(const __grid_constant__ PackedTable t, OnnxOptimizerHyper h, const void* r_ptr, int r_dtype,
                        const int64_t* t_ptr) {
  const double r_in = nl::LoadAny(r_ptr, r_dtype, 0);
  const int64_t step = *t_ptr;
  double r = r_in, beta = h.beta;
  if constexpr (K == OnnxOptimizer::kAdam) {
    if (step > 0) {
      const double ts = static_cast<double>(step);
      r = r_in * sqrt(1.0 - pow(h.beta, ts)) / (1.0 - pow(h.alpha, ts));
    }
  } else if constexpr (K == OnnxOptimizer::kAdagrad) {
    r = r_in / (1.0 + static_cast<double>(step) * h.alpha);
  } else {
    beta = step > 0 ? h.beta : 1.0;
  }
  EntryCursor cur;
  for (int64_t chunk = blockIdx.x; chunk < t.total_chunks; chunk += gridDim.x) {
    const MultiTensorEntry& e = t.e[cur.Find([&](int i) -> const MultiTensorEntry& { return t.e[i]; }, t.num, chunk)];
    const bool fx = e.f64_mask & 1, fg = e.f64_mask & 2, f0 = e.f64_mask & 4, f1 = e.f64_mask & 8;
    const auto [begin, end] = ChunkRange(chunk - e.first_chunk, e.numel);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double x = LoadF(e.param, fx, i);
      const double g = h.norm_coefficient * x + LoadF(e.grad, fg, i);
      if constexpr (K == OnnxOptimizer::kAdam) {
        const double m = h.alpha * LoadF(e.state0, f0, i) + (1.0 - h.alpha) * g;
        const double hh = h.beta * LoadF(e.state1, f1, i) + (1.0 - h.beta) * g * g;
        StoreF(e.param_out, fx, i, (1.0 - h.norm_coefficient_post) * (x - r * m / (sqrt(hh) + h.epsilon)));
        StoreF(e.state0_out, f0, i, m);
        StoreF(e.state1_out, f1, i, hh);
      } else if constexpr (K == OnnxOptimizer::kAdagrad) {
        const double hh = LoadF(e.state0, f0, i) + g * g;
        StoreF(e.param_out, fx, i, x - r * g / (sqrt(hh) + h.epsilon));
        StoreF(e.state0_out, f0, i, hh);
      } else {
        const double v = h.alpha * LoadF(e.state0, f0, i) + beta * g;
        StoreF(e.param_out, fx, i, h.nesterov ? x - r * (g + h.alpha * v) : x - r * v);
        StoreF(e.state0_out, f0, i, v);
      }
    }
  }
}

}  // namespace

int64_t FillChunkOffsets(MultiTensorEntry* entries, int num_tensors) {
  int64_t total = 0;
  for (int i = 0; i < num_tensors; ++i) {
    entries[i].first_chunk = total;
    total += ChunkCount(entries[i].numel);
  }
  return total;
}

cudaError_t LaunchMultiTensorAdam(const MultiTensorEntry* device_table, int num_tensors, int64_t total_chunks,
                                  int dtype, const AdamHyper& h, const OptimizerScalars& s, cudaStream_t stream) {
  if (num_tensors <= 0 || total_chunks <= 0) return cudaSuccess;
  const int grid = GridForChunks(total_chunks);
  if (dtype == nl::kF32) {
    MultiTensorTableKernel<float><<<grid, 256, 0, stream>>>(device_table, num_tensors, total_chunks, MakeAdam<float>(h), s);
  } else if (dtype == nl::kF64) {
    MultiTensorTableKernel<double><<<grid, 256, 0, stream>>>(device_table, num_tensors, total_chunks, MakeAdam<double>(h), s);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchMultiTensorSgd(const MultiTensorEntry* device_table, int num_tensors, int64_t total_chunks,
                                 int dtype, const SgdHyper& h, const OptimizerScalars& s, cudaStream_t stream) {
  if (num_tensors <= 0 || total_chunks <= 0) return cudaSuccess;
  const int grid = GridForChunks(total_chunks);
  if (dtype == nl::kF32) {
    MultiTensorTableKernel<float><<<grid, 256, 0, stream>>>(device_table, num_tensors, total_chunks, MakeSgd<float>(h), s);
  } else if (dtype == nl::kF64) {
    MultiTensorTableKernel<double><<<grid, 256, 0, stream>>>(device_table, num_tensors, total_chunks, MakeSgd<double>(h), s);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchPackedAdam(const MultiTensorEntry* host_entries, int num_tensors, int dtype, const AdamHyper& h,
                             const OptimizerScalars& s, cudaStream_t stream, bool programmatic) {
  if (dtype == nl::kF32) return LaunchPacked<float>(host_entries, num_tensors, MakeAdam<float>(h), s, stream, programmatic);
  if (dtype == nl::kF64) return LaunchPacked<double>(host_entries, num_tensors, MakeAdam<double>(h), s, stream, programmatic);
  return cudaErrorInvalidValue;
}

cudaError_t LaunchPackedSgd(const MultiTensorEntry* host_entries, int num_tensors, int dtype, const SgdHyper& h,
                            const OptimizerScalars& s, cudaStream_t stream, bool programmatic) {
  if (dtype == nl::kF32) return LaunchPacked<float>(host_entries, num_tensors, MakeSgd<float>(h), s, stream, programmatic);
  if (dtype == nl::kF64) return LaunchPacked<double>(host_entries, num_tensors, MakeSgd<double>(h), s, stream, programmatic);
  return cudaErrorInvalidValue;
}

cudaError_t LaunchAllFinite(const FiniteCheckEntry* host_entries, int num_tensors, bool* ok, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(ok, 1, 1, stream);
  if (err != cudaSuccess) return err;
  for (int first = 0; first < num_tensors; first += kMaxFiniteTensors) {
    FiniteTable t;
    t.num = std::min(kMaxFiniteTensors, num_tensors - first);
    for (int i = 0; i < t.num; ++i) {
      t.e[i] = host_entries[first + i];
      t.first_chunk[i] = t.total_chunks;
      t.total_chunks += ChunkCount(t.e[i].numel);
    }
    if (t.total_chunks == 0) continue;
    AllFiniteKernel<<<GridForChunks(t.total_chunks), 256, 0, stream>>>(t, ok);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t LaunchLossScaleUpdate(const void* scale, int scale_dtype, const int64_t* good, const bool* ok,
                                  void* scale_out, int64_t* good_out, const LossScaleHyper& h, cudaStream_t stream) {
  LossScaleUpdateKernel<<<1, 1, 0, stream>>>(scale, scale_dtype, good, ok, scale_out, good_out, h);
  return cudaGetLastError();
}

cudaError_t LaunchOnnxOptimizer(OnnxOptimizer kind, const MultiTensorEntry* host_entries, int num_tensors,
                                const OnnxOptimizerHyper& h, const void* r, int r_dtype, const void* t,
                                cudaStream_t stream) {
  for (int first = 0; first < num_tensors; first += kMaxPackedTensors) {
    PackedTable table;
    table.num = std::min(kMaxPackedTensors, num_tensors - first);
    for (int i = 0; i < table.num; ++i) table.e[i] = host_entries[first + i];
    table.total_chunks = FillChunkOffsets(table.e, table.num);
    if (table.total_chunks == 0) continue;
    const int grid = GridForChunks(table.total_chunks);
    const int64_t* tp = static_cast<const int64_t*>(t);
    switch (kind) {
      case OnnxOptimizer::kAdam: OnnxOptimizerKernel<OnnxOptimizer::kAdam><<<grid, 256, 0, stream>>>(table, h, r, r_dtype, tp); break;
      case OnnxOptimizer::kAdagrad: OnnxOptimizerKernel<OnnxOptimizer::kAdagrad><<<grid, 256, 0, stream>>>(table, h, r, r_dtype, tp); break;
      case OnnxOptimizer::kMomentum: OnnxOptimizerKernel<OnnxOptimizer::kMomentum><<<grid, 256, 0, stream>>>(table, h, r, r_dtype, tp); break;
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace ottr::cuda::kernels
