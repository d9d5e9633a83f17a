// How long Adam's per-step scalars take on the GPU: AdamElem::Prepare (optimizer_elem.cuh) reads
// lr and the step from device memory and computes 1 - β1^t, 1 - β2^t (pow in double), their
// square root and lr / (1 - β1^t). Every Adam kernel does it before its first update. Each
// variant is launched 200 times in one CUDA graph; µs per launch is the median of 20 replays.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I. -o adam_scalars_bench bench/adam_scalars_bench.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "runtime/cuda/kernels/optimizer_elem.cuh"

namespace k = ottr::cuda::kernels;

// mode 0: nothing; 1: thread 0 of each block prepares; 2: every thread prepares.
__global__ void PrepareKernel(k::opt::AdamElem<float> op, k::OptimizerScalars s, int mode, float* out) {
  __shared__ float sh;
  if (mode == 2 || (mode == 1 && threadIdx.x == 0)) {
    op.Prepare(s);
    if (threadIdx.x == 0) sh = op.step_size;
  } else if (threadIdx.x == 0) {
    sh = 1.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = sh;
}

int main() {
  float* lr;
  long long* step;
  float* out;
  cudaMalloc(&lr, 4);
  cudaMalloc(&step, 8);
  cudaMalloc(&out, 4);
  const float lr_h = 1e-3f;
  const long long step_h = 347;
  cudaMemcpy(lr, &lr_h, 4, cudaMemcpyHostToDevice);
  cudaMemcpy(step, &step_h, 8, cudaMemcpyHostToDevice);
  k::AdamHyper h{};
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.epsilon = 1e-8;
  const k::opt::AdamElem<float> op = k::opt::MakeAdam<float>(h);
  k::OptimizerScalars s;
  s.lr = lr;
  s.step = step;
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  struct Variant {
    const char* name;
    int blocks, mode;
  };
  for (const Variant v : {Variant{"empty, 1 block", 1, 0}, Variant{"thread 0 prepares, 1 block", 1, 1},
                          Variant{"every thread prepares, 1 block", 1, 2}, Variant{"empty, 400 blocks", 400, 0},
                          Variant{"thread 0 prepares, 400 blocks", 400, 1},
                          Variant{"every thread prepares, 400 blocks", 400, 2}}) {
    cudaGraph_t g;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 200; ++i) PrepareKernel<<<v.blocks, 256, 0, st>>>(op, s, v.mode, out);
    cudaStreamEndCapture(st, &g);
    cudaGraphExec_t x;
    cudaGraphInstantiate(&x, g, 0);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> us;
    for (int r = 0; r < 21; ++r) {
      cudaEventRecord(a, st);
      cudaGraphLaunch(x, st);
      cudaEventRecord(b, st);
      cudaEventSynchronize(b);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (r > 0) us.push_back(ms * 1000.0f / 200.0f);
    }
    std::sort(us.begin(), us.end());
    float got = 0;
    cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost);
    std::printf("%-36s %7.2f us per launch (step_size %g)\n", v.name, us[us.size() / 2], got);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
