// Gemm and MatMul on cuBLASLt (lt_gemm.h). Gemm's C becomes the BIAS epilogue when it is a row
// vector and beta is 1; otherwise C is broadcast into the output and accumulated with beta.
// MatMul folds batch dimensions into M when B is a plain matrix, uses strided-batched GEMM when
// the batch dimensions match (or one side has none), and otherwise runs one GEMM per batch.
#include <cublas_v2.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/gemm_helpers.h"
#include "runtime/cuda/lt_gemm.h"

namespace ottr::cuda {
namespace {

// The product's launch from the node's (inputs 0 and 1 are A and B); the ready operands matter
// only to a programmatic launch.
GemmLaunch GemmLaunchOf(const LaunchArgs& a, bool programmatic) {
  GemmLaunch l;
  l.programmatic = programmatic;
  l.a_ready = programmatic && a.ready(0);
  l.b_ready = programmatic && a.ready(1);
  return l;
}

absl::StatusOr<CompiledOp> CompileGemm(OpCompileContext& ctx) {
  const ir::Node& n = ctx.node();
  const bool ta = n.GetInt("transA", 0) != 0;
  const bool tb = n.GetInt("transB", 0) != 0;
  const float alpha = n.GetFloat("alpha", 1.0f);
  const float beta = n.GetFloat("beta", 1.0f);
  const std::vector<int64_t> ad = ctx.input_dims(0), bd = ctx.input_dims(1);
  if (ad.size() != 2 || bd.size() != 2) return ctx.Error("Gemm needs 2-D A and B");
  GemmConfig c;
  c.dtype = ctx.input_type(0).dtype;
  c.trans_a = ta;
  c.trans_b = tb;
  c.m = ta ? ad[1] : ad[0];
  c.k = ta ? ad[0] : ad[1];
  c.n = tb ? bd[0] : bd[1];
  c.alpha = alpha;
  const bool has_c = ctx.has_input(2) && beta != 0.0f;
  std::vector<int64_t> cd = has_c ? ctx.input_dims(2) : std::vector<int64_t>();
  const int64_t c_numel = has_c ? ir::NumElements(cd) : 0;
  // A row vector [N] / [1, N] with beta 1 is the bias epilogue.
  const bool bias = has_c && beta == 1.0f && c_numel == c.n && (cd.size() == 1 || (cd.size() == 2 && cd[0] == 1)) && c.n > 1;
  if (bias) {
    c.epilogue = GemmEpilogue::kBias;
  } else if (has_c) {
    c.beta = beta;
  }
  OTTR_ASSIGN_OR_RETURN(std::shared_ptr<LtGemm> gemm, LtGemm::Create(ctx.libs(), c));
  // Strides of C broadcast to [M, N].
  int64_t rs = 0, cs = 0;
  if (has_c && !bias) {
    std::vector<int64_t> c2 = cd;
    while (c2.size() < 2) c2.insert(c2.begin(), 1);
    rs = c2[0] == 1 ? 0 : c2[1];
    cs = c2[1] == 1 ? 0 : 1;
  }
  const int elem = static_cast<int>(ir::DTypeSize(c.dtype));
  const int64_t m = c.m, nn = c.n;
  CompiledOp op;
  op.workspace_bytes = gemm->workspace_bytes();
  op.launch = [gemm, has_c, bias, rs, cs, elem, m, nn](const LaunchArgs& a) -> absl::Status {
    nvtxRangePushA("Gemm");
    if (has_c && !bias) {
      OTTR_CUDA_RETURN_IF_ERROR(kernels::BroadcastToMatrix(a.inputs[2], a.outputs[0], m, nn, rs, cs, elem, a.stream));
    }
    // After the broadcast of C the product follows a kernel of this launch.
    absl::Status s = gemm->Run(a.inputs[0], a.inputs[1], a.outputs[0], bias ? a.inputs[2] : nullptr, nullptr,
                               a.workspace, a.stream, nullptr, GemmLaunchOf(a, a.programmatic || (has_c && !bias)));
    nvtxRangePop();
    return s;
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileMatMul(OpCompileContext& ctx) {
  std::vector<int64_t> ad = ctx.input_dims(0), bd = ctx.input_dims(1);
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  if (bd[bd.size() - 2] != k) return ctx.Error("MatMul inner dimensions differ");
  std::vector<int64_t> abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  const int64_t na = ir::NumElements(abatch), nb = ir::NumElements(bbatch);
  GemmConfig c;
  c.dtype = ctx.input_type(0).dtype;
  c.n = n;
  c.k = k;
  CompiledOp op;
  if (nb == 1) {
    // B is one matrix: fold every batch of A into the rows.
    c.m = na * m;
    OTTR_ASSIGN_OR_RETURN(std::shared_ptr<LtGemm> g, LtGemm::Create(ctx.libs(), c));
    op.workspace_bytes = g->workspace_bytes();
    op.launch = [g](const LaunchArgs& a) {
      return g->Run(a.inputs[0], a.inputs[1], a.outputs[0], nullptr, nullptr, a.workspace, a.stream, nullptr,
                    GemmLaunchOf(a, a.programmatic));
    };
    return op;
  }
  c.m = m;
  if (na == nb && abatch.size() == bbatch.size() && abatch == bbatch) {
    c.batch = na;
    c.stride_a = m * k;
    c.stride_b = k * n;
    c.stride_c = m * n;
  } else if (na == 1) {
    c.batch = nb;
    c.stride_a = 0;
    c.stride_b = k * n;
    c.stride_c = m * n;
  } else {
    // General broadcasting: one GEMM per output batch, offsets computed now.
    std::vector<int64_t> out = ctx.output_dims(0);
    std::vector<int64_t> obatch(out.begin(), out.end() - 2);
    if (ctx.input_dims(1).size() == 1) obatch.assign(out.begin(), out.end() - 1);
    const int64_t rank = static_cast<int64_t>(obatch.size());
    while (static_cast<int64_t>(abatch.size()) < rank) abatch.insert(abatch.begin(), 1);
    while (static_cast<int64_t>(bbatch.size()) < rank) bbatch.insert(bbatch.begin(), 1);
    std::vector<std::pair<int64_t, int64_t>> offsets;  // element offsets of A and B per batch
    const int64_t total = ir::NumElements(obatch);
    for (int64_t i = 0; i < total; ++i) {
      int64_t rem = i, oa = 0, ob = 0, sa = 1, sb = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t idx = rem % obatch[d];
        rem /= obatch[d];
        oa += (abatch[d] == 1 ? 0 : idx) * sa;
        ob += (bbatch[d] == 1 ? 0 : idx) * sb;
        sa *= abatch[d];
        sb *= bbatch[d];
      }
      offsets.emplace_back(oa * m * k, ob * k * n);
    }
    OTTR_ASSIGN_OR_RETURN(std::shared_ptr<LtGemm> g, LtGemm::Create(ctx.libs(), c));
    const int64_t es = static_cast<int64_t>(ir::DTypeSize(c.dtype));
    const int64_t mn = m * n;
    op.workspace_bytes = g->workspace_bytes();
    op.launch = [g, offsets, es, mn](const LaunchArgs& a) -> absl::Status {
      for (size_t i = 0; i < offsets.size(); ++i) {
        OTTR_RETURN_IF_ERROR(g->Run(static_cast<const char*>(a.inputs[0]) + offsets[i].first * es,
                                    static_cast<const char*>(a.inputs[1]) + offsets[i].second * es,
                                    static_cast<char*>(a.outputs[0]) + i * mn * es, nullptr, nullptr,
                                    a.workspace, a.stream));
      }
      return absl::OkStatus();
    };
    return op;
  }
  OTTR_ASSIGN_OR_RETURN(std::shared_ptr<LtGemm> g, LtGemm::Create(ctx.libs(), c));
  op.workspace_bytes = g->workspace_bytes();
  op.launch = [g](const LaunchArgs& a) {
    return g->Run(a.inputs[0], a.inputs[1], a.outputs[0], nullptr, nullptr, a.workspace, a.stream);
  };
  return op;
}

// ottr::FusedGemm (ir/fused_gemm.h): one cublasLtMatmul with the node's epilogue. The bias is
// CUBLASLT_MATMUL_DESC_BIAS_POINTER (input 2, or output 1 for the bias gradients), the ReLU mask or
// GELU pre-activation CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER (output 1 forward, input 3
// backward) with CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = RoundUp(N, 128) bits for the mask and N
// elements for the pre-activation, both in cuBLASLt's column-major view where the row-major
// [M, N] output is N x M. ottr's A is cuBLASLt's B (lt_gemm.h), so bgrada is BGRADB and bgradb
// BGRADA. An extra output nobody reads is not written (the epilogue without it runs instead).
absl::StatusOr<CompiledOp> CompileFusedGemm(OpCompileContext& ctx) {
  const ir::Node& n = ctx.node();
  const std::string name = n.GetString("epilogue", "bias");
  const std::optional<ir::FusedEpilogue> fe = ir::ParseFusedEpilogue(name);
  if (!fe) return ctx.Error(absl::StrCat("unknown epilogue \"", name, "\""));
  const std::vector<int64_t> ad = ctx.input_dims(0), bd = ctx.input_dims(1);
  if (ad.size() != 2 || bd.size() != 2) return ctx.Error("FusedGemm needs 2-D A and B");
  GemmConfig c;
  c.dtype = ctx.input_type(0).dtype;
  c.trans_a = n.GetInt("transA", 0) != 0;
  c.trans_b = n.GetInt("transB", 0) != 0;
  c.m = c.trans_a ? ad[1] : ad[0];
  c.k = c.trans_a ? ad[0] : ad[1];
  c.n = c.trans_b ? bd[0] : bd[1];
  c.alpha = n.GetFloat("alpha", 1.0f);
  // Y (and the bias, aux and bias gradient) in output_type: f32 from bf16/f16 operands.
  c.out_dtype = static_cast<ir::DType>(n.GetInt("output_type", ir::DTypeToOnnx(c.dtype)));
  const bool out1 = ctx.num_outputs() > 1 && ctx.output_needed(1);
  using E = ir::FusedEpilogue;
  switch (*fe) {
    case E::kNone: c.epilogue = GemmEpilogue::kDefault; break;
    case E::kBias: c.epilogue = GemmEpilogue::kBias; break;
    case E::kReluBias: c.epilogue = GemmEpilogue::kReluBias; break;
    case E::kReluAuxBias: c.epilogue = out1 ? GemmEpilogue::kReluAuxBias : GemmEpilogue::kReluBias; break;
    case E::kGeluBias: c.epilogue = GemmEpilogue::kGeluBias; break;
    case E::kGeluAuxBias: c.epilogue = out1 ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kGeluBias; break;
    case E::kDRelu: c.epilogue = GemmEpilogue::kDRelu; break;
    case E::kDReluBgrad: c.epilogue = out1 ? GemmEpilogue::kDReluBgrad : GemmEpilogue::kDRelu; break;
    case E::kDGelu: c.epilogue = GemmEpilogue::kDGelu; break;
    case E::kDGeluBgrad: c.epilogue = out1 ? GemmEpilogue::kDGeluBgrad : GemmEpilogue::kDGelu; break;
    case E::kBgradA: c.epilogue = out1 ? GemmEpilogue::kBgradB : GemmEpilogue::kDefault; break;
    case E::kBgradB: c.epilogue = out1 ? GemmEpilogue::kBgradA : GemmEpilogue::kDefault; break;
  }
  const bool relu = ir::EpilogueIsRelu(*fe);
  if (ir::EpilogueWritesAux(*fe) || ir::EpilogueTakesAux(*fe)) {
    c.aux_ld = relu ? (c.n + 127) / 128 * 128 : c.n;  // bits for the mask, elements otherwise
    if (!relu && c.n % 8 != 0) {
      return ctx.Unsupported(absl::StrCat("the GELU aux leading dimension ", c.n,
                                          " is not a multiple of 8 (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)"));
    }
  }
  OTTR_ASSIGN_OR_RETURN(std::shared_ptr<LtGemm> gemm, LtGemm::Create(ctx.libs(), c));
  const bool bias_in = ir::EpilogueTakesBias(*fe);
  const bool bias_out = ir::EpilogueWritesBiasGrad(*fe) && out1;
  const bool aux_in = ir::EpilogueTakesAux(*fe);
  const bool aux_out = ir::EpilogueWritesAux(*fe) && out1;
  CompiledOp op;
  op.workspace_bytes = gemm->workspace_bytes();
  op.counter_bytes = gemm->counter_bytes();
  op.launch = [gemm, bias_in, bias_out, aux_in, aux_out](const LaunchArgs& a) -> absl::Status {
    nvtxRangePushA("FusedGemm");
    const void* bias = bias_in ? a.inputs[2] : bias_out ? a.outputs[1] : nullptr;
    void* aux = aux_in ? a.inputs[3] : aux_out ? a.outputs[1] : nullptr;
    absl::Status s =
        gemm->Run(a.inputs[0], a.inputs[1], a.outputs[0], bias, aux, a.workspace, a.stream, a.counters,
                  GemmLaunchOf(a, a.programmatic));
    nvtxRangePop();
    return s;
  };
  return op;
}

// ottr::GroupedGemm (ir/ops/fused_ops.cc): Yi = alpha[i] · op(Ai) · op(Bi) as one
// cublasGemmGroupedBatchedEx call (a group of one product per problem shape), or as one cuBLASLt
// GEMM per product on the node's stream, whichever the compile times faster (kept in the
// algorithm cache: "grouped" / "separate"). OTTR_GROUPED_GEMM=grouped|separate forces the choice
// (tests). cuBLAS reads the operand pointers from device memory: the node's state holds them
// (CompiledOp::state_bytes), written once by init.
struct GroupedProduct {
  int m = 0, n = 0, k = 0;  // row-major Y [m, n] = op(A) [m, k] · op(B) [k, n]
  int lda = 0, ldb = 0;     // row lengths of A and B as stored
  bool ta = false, tb = false;
  float alpha = 1.0f;
};

struct GroupedPlan {
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  std::vector<GroupedProduct> products;
  // cuBLAS's column-major view: C [n, m] = op'(B) · op'(A), one group per product.
  std::vector<cublasOperation_t> trans_b, trans_a;
  std::vector<int> ms, ns, ks, ldbs, ldas, ldcs, sizes;
  std::vector<float> alphas, betas;
};

absl::Status RunGrouped(cublasHandle_t h, const GroupedPlan& p, void* const* table, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream) {
  const int count = static_cast<int>(p.products.size());
  OTTR_CUDA_RETURN_IF_ERROR(cublasSetStream_v2(h, stream));
  OTTR_CUDA_RETURN_IF_ERROR(cublasSetWorkspace_v2(h, workspace, static_cast<size_t>(workspace_bytes)));
  // table: B pointers, then A pointers, then the outputs (cuBLAS's A, B and C).
  OTTR_CUDA_RETURN_IF_ERROR(cublasGemmGroupedBatchedEx(
      h, p.trans_b.data(), p.trans_a.data(), p.ns.data(), p.ms.data(), p.ks.data(), p.alphas.data(),
      const_cast<const void* const*>(table), p.type, p.ldbs.data(), const_cast<const void* const*>(table + count),
      p.type, p.ldas.data(), p.betas.data(), table + 2 * count, p.type, p.ldcs.data(), count, p.sizes.data(),
      p.compute));
  return absl::OkStatus();
}

// The pointer table RunGrouped reads, for the given operands and outputs.
std::vector<void*> GroupedTable(const std::vector<void*>& inputs, const std::vector<void*>& outputs) {
  const size_t count = outputs.size();
  std::vector<void*> t(3 * count);
  for (size_t i = 0; i < count; ++i) {
    t[i] = inputs[2 * i + 1];
    t[count + i] = inputs[2 * i];
    t[2 * count + i] = outputs[i];
  }
  return t;
}

constexpr int64_t kGroupedWorkspace = 4ll << 20;

absl::StatusOr<CompiledOp> CompileGroupedGemm(OpCompileContext& ctx) {
  const ir::Node& n = ctx.node();
  const int count = ctx.num_outputs();
  const std::vector<int64_t> ta = n.GetInts("transA"), tb = n.GetInts("transB");
  const std::vector<float> alpha = n.GetFloats("alpha");
  if (count < 2 || ctx.num_inputs() != 2 * count || static_cast<int>(ta.size()) != count ||
      static_cast<int>(tb.size()) != count || static_cast<int>(alpha.size()) != count) {
    return ctx.Error("GroupedGemm needs 2 inputs per output and one transA, transB and alpha per output");
  }
  auto plan = std::make_shared<GroupedPlan>();
  const ir::DType dtype = ctx.input_type(0).dtype;
  if (dtype == ir::DType::kFloat32) {
    plan->type = CUDA_R_32F;
    plan->compute = ctx.libs().tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  } else if (dtype == ir::DType::kFloat16) {
    plan->type = CUDA_R_16F;
  } else if (dtype == ir::DType::kBFloat16) {
    plan->type = CUDA_R_16BF;
  } else {
    return ctx.Unsupported(absl::StrCat("GroupedGemm of ", ir::DTypeName(dtype), " (f32, f16 or bf16)"));
  }
  std::vector<std::shared_ptr<LtGemm>> separate;
  int64_t separate_ws = 0;
  std::string key = absl::StrCat("grouped ", ir::DTypeName(dtype), ctx.libs().tf32() ? " tf32" : "");
  for (int i = 0; i < count; ++i) {
    const std::vector<int64_t> ad = ctx.input_dims(2 * i), bd = ctx.input_dims(2 * i + 1);
    if (ad.size() != 2 || bd.size() != 2 || ctx.input_type(2 * i).dtype != dtype ||
        ctx.input_type(2 * i + 1).dtype != dtype) {
      return ctx.Error(absl::StrCat("product ", i, " is not two 2-D ", ir::DTypeName(dtype), " matrices"));
    }
    GroupedProduct p;
    p.ta = ta[i] != 0;
    p.tb = tb[i] != 0;
    p.m = static_cast<int>(p.ta ? ad[1] : ad[0]);
    p.k = static_cast<int>(p.ta ? ad[0] : ad[1]);
    p.n = static_cast<int>(p.tb ? bd[0] : bd[1]);
    p.lda = static_cast<int>(ad[1]);
    p.ldb = static_cast<int>(bd[1]);
    p.alpha = alpha[i];
    plan->products.push_back(p);
    plan->trans_b.push_back(p.tb ? CUBLAS_OP_T : CUBLAS_OP_N);
    plan->trans_a.push_back(p.ta ? CUBLAS_OP_T : CUBLAS_OP_N);
    plan->ms.push_back(p.m);
    plan->ns.push_back(p.n);
    plan->ks.push_back(p.k);
    plan->ldbs.push_back(p.ldb);
    plan->ldas.push_back(p.lda);
    plan->ldcs.push_back(p.n);
    plan->sizes.push_back(1);
    plan->alphas.push_back(p.alpha);
    plan->betas.push_back(0.0f);
    absl::StrAppend(&key, " | m", p.m, " n", p.n, " k", p.k, " t", p.ta, p.tb, " a", p.alpha);
    GemmConfig c;
    c.dtype = dtype;
    c.trans_a = p.ta;
    c.trans_b = p.tb;
    c.m = p.m;
    c.n = p.n;
    c.k = p.k;
    c.alpha = p.alpha;
    OTTR_ASSIGN_OR_RETURN(std::shared_ptr<LtGemm> g, LtGemm::Create(ctx.libs(), c));
    separate_ws = std::max(separate_ws, g->workspace_bytes());
    separate.push_back(std::move(g));
  }
  OTTR_ASSIGN_OR_RETURN(cublasHandle_t blas, ctx.libs().blas());
  // Grouped or separate: forced, cached, or timed now (each way captured kRuns times into a CUDA
  // graph on scratch operands, as the executor replays the step).
  std::string choice;
  if (const char* env = std::getenv("OTTR_GROUPED_GEMM")) choice = env;
  if (choice != "grouped" && choice != "separate" && !ctx.libs().LookupAlgo(key, &choice)) {
    ctx.libs().CountAlgoSearch();
    GraphTimer timer;
    std::vector<void*> ins, outs;
    const int64_t es = static_cast<int64_t>(ir::DTypeSize(dtype));
    bool ok = timer.ok();
    for (int i = 0; i < count; ++i) {
      ins.push_back(timer.Alloc(ir::NumElements(ctx.input_dims(2 * i)) * es));
      ins.push_back(timer.Alloc(ir::NumElements(ctx.input_dims(2 * i + 1)) * es));
      outs.push_back(timer.Alloc(ir::NumElements(ctx.output_dims(i)) * es));
    }
    void* workspace = timer.Alloc(std::max(separate_ws, kGroupedWorkspace));
    const std::vector<void*> host_table = GroupedTable(ins, outs);
    void* table = timer.Alloc(static_cast<int64_t>(host_table.size() * sizeof(void*)));
    for (void* p : ins) ok &= p != nullptr;
    for (void* p : outs) ok &= p != nullptr;
    ok = ok && workspace != nullptr && table != nullptr &&
         cudaMemcpy(table, host_table.data(), host_table.size() * sizeof(void*), cudaMemcpyHostToDevice) == cudaSuccess;
    const cudaStream_t stream = timer.stream();
    constexpr int kRuns = GraphTimer::kRuns;
    float grouped_ms = -1, separate_ms = -1;
    if (ok) {
      grouped_ms = timer.Time([&] {
        return RunGrouped(blas, *plan, static_cast<void* const*>(table), workspace, kGroupedWorkspace, stream).ok();
      });
      separate_ms = timer.Time([&] {
        for (int i = 0; i < count; ++i) {
          if (!separate[i]->Run(ins[2 * i], ins[2 * i + 1], outs[i], nullptr, nullptr, workspace, stream).ok()) return false;
        }
        return true;
      });
    }
    if (grouped_ms < 0 && separate_ms < 0) {
      return ctx.Error(absl::StrCat("neither the grouped launch nor the separate GEMMs ran (", key, ")"));
    }
    choice = grouped_ms >= 0 && (separate_ms < 0 || grouped_ms < separate_ms) ? "grouped" : "separate";
    if (std::getenv("OTTR_LOG_GEMM_ALGOS") != nullptr) {
      std::fprintf(stderr, "gemm %s: grouped %.2f us, separate %.2f us, chose %s\n", key.c_str(),
                   grouped_ms * 1000.0f / kRuns, separate_ms * 1000.0f / kRuns, choice.c_str());
    }
    ctx.libs().StoreAlgo(key, choice);
  }
  CompiledOp op;
  if (choice == "grouped") {
    op.workspace_bytes = kGroupedWorkspace;
    op.state_bytes = static_cast<int64_t>(3 * count * sizeof(void*));
    op.init = [](const LaunchArgs& a) -> absl::Status {
      const std::vector<void*> t = GroupedTable(a.inputs, a.outputs);
      for (void* p : t) {
        if (p == nullptr) return absl::InternalError("GroupedGemm: an operand or output has no buffer");
      }
      OTTR_CUDA_RETURN_IF_ERROR(cudaMemcpy(a.state, t.data(), t.size() * sizeof(void*), cudaMemcpyHostToDevice));
      return absl::OkStatus();
    };
    op.launch = [plan, blas](const LaunchArgs& a) -> absl::Status {
      nvtxRangePushA("GroupedGemm");
      absl::Status s = RunGrouped(blas, *plan, static_cast<void* const*>(a.state), a.workspace, kGroupedWorkspace, a.stream);
      nvtxRangePop();
      return s;
    };
    return op;
  }
  op.workspace_bytes = separate_ws;
  op.launch = [separate](const LaunchArgs& a) -> absl::Status {
    nvtxRangePushA("GroupedGemm (separate)");
    absl::Status s;
    for (size_t i = 0; i < separate.size() && s.ok(); ++i) {
      // An output nobody reads has no buffer: its product is skipped.
      if (a.outputs[i] == nullptr) continue;
      s = separate[i]->Run(a.inputs[2 * i], a.inputs[2 * i + 1], a.outputs[i], nullptr, nullptr, a.workspace, a.stream);
    }
    nvtxRangePop();
    return s;
  };
  return op;
}

}  // namespace

void RegisterGemmCudaOps(CudaOpRegistry& r) {
  r.Register(std::string(ir::kOttrDomain), ir::kGroupedGemmOp, CompileGroupedGemm);
  r.Register("", "Gemm", CompileGemm);
  r.Register("", "MatMul", CompileMatMul);
  r.Register(std::string(ir::kOttrDomain), ir::kFusedGemmOp, CompileFusedGemm);
}

}  // namespace ottr::cuda
