// How much do the operand layouts cost a TF32 GEMM on Hopper? (The weight gradients of the small
// MLP at batch 8192 read both operands batch-major, i.e. MN-major, and Hopper's TF32 tensor-core
// instructions read shared memory K-major only.)
//
// For each shape m x n x k (column-major, cuBLASLt's convention) times the best of cuBLASLt's
// heuristic candidates for the four operand layouts (A: N = MN-major, T = K-major; B: N =
// K-major, T = MN-major), then a tiled transpose of a k x n float32 matrix: what making an
// operand K-major would cost.
//
//   nvcc -O3 -gencode=arch=compute_90,code=sm_90 -o layout_gemm_bench bench/layout_gemm_bench.cu -lcublasLt
//   ./layout_gemm_bench [M N K]...
#include <cublasLt.h>
#include <cuda_runtime.h>

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

__global__ void Fill(float* p, long n, unsigned seed) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    p[i] = float(h & 0xffff) / 65536.0f - 0.5f;
  }
}

// out[c][r] = in[r][c], in: rows x cols row-major. 32 x 32 tiles through shared memory.
__global__ void Transpose(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[32][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  for (int i = threadIdx.y; i < 32; i += 8) {
    int r = blockIdx.y * 32 + i;
    if (r < rows && c < cols) tile[i][threadIdx.x] = in[long(r) * cols + c];
  }
  __syncthreads();
  int r = blockIdx.y * 32 + threadIdx.x;
  for (int i = threadIdx.y; i < 32; i += 8) {
    int cc = blockIdx.x * 32 + i;
    if (r < rows && cc < cols) out[long(cc) * rows + r] = tile[threadIdx.x][i];
  }
}

template <class F>
float TimeUs(F f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1000.0f / reps;
}

int main(int argc, char** argv) {
  std::vector<long> shapes;
  for (int i = 1; i + 2 < argc; i += 3)
    for (int j = 0; j < 3; ++j) shapes.push_back(std::atol(argv[i + j]));
  if (shapes.empty()) shapes = {512, 512, 8192, 784, 512, 8192, 512, 8192, 512, 512, 8192, 784};
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t ws_bytes = 64u << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  for (size_t s = 0; s < shapes.size(); s += 3) {
    const long m = shapes[s], n = shapes[s + 1], k = shapes[s + 2];
    float *a, *b, *d, *t;
    CK(cudaMalloc(&a, m * k * 4));
    CK(cudaMalloc(&b, k * n * 4));
    CK(cudaMalloc(&d, m * n * 4));
    CK(cudaMalloc(&t, k * n * 4));
    Fill<<<256, 256>>>(a, m * k, 1);
    Fill<<<256, 256>>>(b, k * n, 2);
    const double gflop = 2.0 * m * n * k * 1e-9;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        cublasLtMatmulDesc_t op;
        CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
        cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
        cublasLtMatrixLayout_t la, lb, ld;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? k : m, ta ? m : k, ta ? k : m));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? n : k, tb ? k : n, tb ? n : k));
        CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
        cublasLtMatmulPreference_t pref;
        CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                sizeof(ws_bytes)));
        cublasLtMatmulHeuristicResult_t res[16];
        int got = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, res, &got));
        const float alpha = 1, beta = 0;
        float best = 1e30f;
        int best_i = -1;
        for (int i = 0; i < got; ++i) {
          auto run = [&] {
            cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &res[i].algo, ws, ws_bytes, 0);
          };
          if (cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &res[i].algo, ws, ws_bytes, 0) != 0)
            continue;
          float us = TimeUs(run, 50);
          if (us < best) best = us, best_i = i;
        }
        CK(cudaDeviceSynchronize());
        std::printf("m%ld n%ld k%ld A=%s B=%s: best %.1f us (%.0f TFLOP/s, candidate %d of %d; first %s)\n", m, n,
                    k, ta ? "K-major" : "MN-major", tb ? "MN-major" : "K-major", best, gflop / best * 1e3,
                    best_i, got, best_i == 0 ? "best" : "not best");
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatmulDescDestroy(op);
      }
    // Making B K-major: B is stored MN-major as a k x n row-major matrix (batch-major activations).
    dim3 grid((n + 31) / 32, (k + 31) / 32), block(32, 8);
    float us = TimeUs([&] { Transpose<<<grid, block>>>(b, t, int(k), int(n)); }, 50);
    CK(cudaDeviceSynchronize());
    std::printf("transpose %ld x %ld float32: %.1f us (%.2f TB/s)\n", k, n, us, 2.0 * k * n * 4 / us * 1e-6);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    cudaFree(t);
  }
  return 0;
}
