// TF32 tensor-core helpers shared by ottr's kernels (activation_grad.cu's LinearReluGrad,
// linear_sce_relu_grad.cu): rounding a float to TF32 and one mma.sync m16n8k8 tile.
#ifndef OTTR_RUNTIME_CUDA_KERNELS_MMA_TF32_CUH_
#define OTTR_RUNTIME_CUDA_KERNELS_MMA_TF32_CUH_

#include <cstdint>

namespace ottr::cuda::kernels {

// x rounded to TF32 (nearest, ties away), as the bits the MMA reads.
__device__ __forceinline__ uint32_t ToTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// x's bits with half a TF32 unit in the last place added: the MMA reads only the top 19 bits
// (sign, exponent, 10 bits of mantissa) of a .tf32 operand, so this rounds to nearest with ties
// away from zero, as ToTf32, in one integer add instead of cvt.rna's three instructions on sm_90
// (for finite x; an infinity reads as NaN).
__device__ __forceinline__ uint32_t ToTf32Fast(float x) { return __float_as_uint(x) + 0x1000u; }

// d += a · b for one m16n8k8 TF32 tile (fragments as the PTX ISA lays them out: a0 (g, t), a1
// (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k t, n g), b1 (k t + 4, n g); d0, d1 (g, 2t,
// 2t + 1), d2, d3 (g + 8, ...); g = lane / 4, t = lane % 4).
__device__ __forceinline__ void MmaTf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace ottr::cuda::kernels

#endif  // OTTR_RUNTIME_CUDA_KERNELS_MMA_TF32_CUH_
