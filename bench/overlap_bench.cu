// Can a memory-bound optimizer update run beside a compute-bound TF32 GEMM on the H200?
//
// Times a cuBLASLt TF32 GEMM (both operands K-major) with CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET
// set to a number of SMs below the device's, an Adam update over N float32 parameters restricted
// to a number of blocks, each alone and both launched together on two streams (GEMM first).
//
//   nvcc -O3 -arch=sm_90 -o overlap_bench bench/overlap_bench.cu -lcublasLt
//   ./overlap_bench [M N K [PARAMS]]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    auto e_ = (x);                                                                   \
    if (e_ != 0) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, int(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

__global__ void AdamKernel(float4* p, const float4* g, float4* m, float4* v, long n4, float lr) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, c1 = 0.1f, c2 = 0.001f;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n4; i += long(gridDim.x) * blockDim.x) {
    float4 pp = p[i], gg = g[i], mm = m[i], vv = v[i];
    float* P = &pp.x; const float* G = &gg.x; float* M = &mm.x; float* V = &vv.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      M[j] = b1 * M[j] + (1 - b1) * G[j];
      V[j] = b2 * V[j] + (1 - b2) * G[j] * G[j];
      P[j] -= lr * (M[j] / c1) / (sqrtf(V[j] / c2) + eps);
    }
    p[i] = pp; m[i] = mm; v[i] = vv;
  }
}

__global__ void Fill(float* x, long n, unsigned seed) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    x[i] = (h & 0xffff) / 65536.0f - 0.5f;
  }
}

struct Gemm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  void* ws;
  size_t ws_bytes = 64 << 20;
};

int main(int argc, char** argv) {
  int M = argc > 3 ? atoi(argv[1]) : 4096, N = argc > 3 ? atoi(argv[2]) : 4096,
      K = argc > 3 ? atoi(argv[3]) : 4096;
  long params = argc > 4 ? atol(argv[4]) : 4096L * 4096;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  float *A, *B, *C;
  CK(cudaMalloc(&A, sizeof(float) * M * K));
  CK(cudaMalloc(&B, sizeof(float) * K * N));
  CK(cudaMalloc(&C, sizeof(float) * M * N));
  Fill<<<1024, 256>>>(A, long(M) * K, 1);
  Fill<<<1024, 256>>>(B, long(K) * N, 2);
  float *p, *g, *m, *v;
  for (float** q : {&p, &g, &m, &v}) CK(cudaMalloc(q, sizeof(float) * params));
  Fill<<<1024, 256>>>(p, params, 3);
  Fill<<<1024, 256>>>(g, params, 4);
  CK(cudaMemset(m, 0, sizeof(float) * params));
  CK(cudaMemset(v, 0, sizeof(float) * params));
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e2, e3;
  for (cudaEvent_t* e : {&e0, &e1, &e2, &e3}) CK(cudaEventCreate(e));

  auto make_gemm = [&](int target) {
    Gemm gm;
    CK(cublasLtMatmulDescCreate(&gm.desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    // Column-major C[M,N] = op(A)[M,K] * B[K,N], A stored [K,M] (K contiguous), B [K,N] (K contiguous).
    CK(cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    CK(cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    if (target > 0)
      CK(cublasLtMatmulDescSetAttribute(gm.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
    CK(cublasLtMatrixLayoutCreate(&gm.la, CUDA_R_32F, K, M, K));
    CK(cublasLtMatrixLayoutCreate(&gm.lb, CUDA_R_32F, K, N, K));
    CK(cublasLtMatrixLayoutCreate(&gm.lc, CUDA_R_32F, M, N, M));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &gm.ws_bytes,
                                            sizeof(gm.ws_bytes)));
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, gm.desc, gm.la, gm.lb, gm.lc, gm.lc, pref, 8, res, &found));
    if (found == 0) { std::fprintf(stderr, "no algo\n"); std::exit(1); }
    gm.algo = res[0].algo;
    CK(cudaMalloc(&gm.ws, gm.ws_bytes));
    return gm;
  };
  float one = 1, zero = 0;
  auto run_gemm = [&](Gemm& gm, cudaStream_t s) {
    CK(cublasLtMatmul(lt, gm.desc, &one, A, gm.la, B, gm.lb, &zero, C, gm.lc, C, gm.lc, &gm.algo, gm.ws,
                      gm.ws_bytes, s));
  };
  auto run_adam = [&](int blocks, cudaStream_t s) {
    AdamKernel<<<blocks, 256, 0, s>>>((float4*)p, (const float4*)g, (float4*)m, (float4*)v, params / 4, 1e-3f);
  };
  auto time_one = [&](auto&& f) {
    for (int i = 0; i < 3; ++i) f();
    CK(cudaStreamSynchronize(s0));
    CK(cudaStreamSynchronize(s1));
    std::vector<float> t;
    for (int r = 0; r < 7; ++r) {
      CK(cudaEventRecord(e0, s0));
      CK(cudaStreamWaitEvent(s1, e0));
      f();
      CK(cudaEventRecord(e1, s1));
      CK(cudaStreamWaitEvent(s0, e1));
      CK(cudaEventRecord(e2, s0));
      CK(cudaEventSynchronize(e2));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e2));
      t.push_back(ms * 1000);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double flop = 2.0 * M * N * K;
  std::printf("GEMM %dx%dx%d TF32, Adam over %ld params (%.0f MB), %d SMs\n", M, N, K, params,
              params * 28.0 / 1e6, sms);
  std::vector<int> blocks_list = {sms * 8, 64, 96, 128, 192};
  for (int b : blocks_list) {
    float us = time_one([&] { run_adam(b, s1); });
    std::printf("adam alone, %4d blocks: %8.1f us (%.2f TB/s)\n", b, us, params * 28.0 / us / 1e6);
  }
  for (int target : {0, sms - 4, sms - 8, sms - 12, sms - 16, sms - 24, sms - 32}) {
    Gemm gm = make_gemm(target);
    float g_us = time_one([&] { run_gemm(gm, s0); });
    std::printf("target %3d: gemm alone %8.1f us (%.0f TFLOP/s)", target, g_us, flop / g_us / 1e6);
    int free_sms = target > 0 ? sms - target : 0;
    for (int b : {free_sms * 4, free_sms * 8, sms * 8}) {
      if (b == 0) continue;
      float both = time_one([&] {
        run_gemm(gm, s0);
        run_adam(b, s1);
      });
      std::printf(" | +adam %d blk: %.1f", b, both);
    }
    float serial = time_one([&] {
      run_gemm(gm, s0);
      run_adam(sms * 8, s0);
    });
    std::printf(" | serial %.1f\n", serial);
  }
  return 0;
}
