// CUDA ops of the convolution and pooling family: Conv, ConvTranspose, MaxPool, AveragePool,
// LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool and the ottr-domain backward ops
// ConvGradInput, ConvGradFilter, MaxPoolGrad, AveragePoolGrad, LpPoolGrad. Geometry (auto_pad,
// pads, ceil_mode, output_shape...) is resolved by the functions shape inference and the CPU
// reference use (ir/ops/conv_pool_geometry.h), so all three agree by construction; attribute and
// shape checks mirror runtime/cpu/conv_pool_kernels.cc and conv_pool_grad_kernels.cc.
//
// Convolutions run on cuDNN's legacy convolution API (cudnnConvolutionForward / BackwardData /
// BackwardFilter with descriptors). Why not the graph (frontend) API: these ops need only a
// single convolution per node (no fusion), the legacy API is stable across cuDNN 8 and 9,
// supports every group count, dilation and 1-D to 3-D shape here, and its algorithms are plain
// enums that serialise into the shared algorithm cache. The mapping:
//   Conv             Y  = Forward(X, W) (+ bias: in the convolution's epilogue through
//                    cudnnConvolutionBiasActivationForward with an identity activation when the
//                    chosen float32 algorithm is IMPLICIT_PRECOMP_GEMM, the only one cuDNN takes
//                    an identity activation with; else kernels::AddChannelBias after it)
//   ConvGradInput    dX = BackwardData(W, dY)            (the Conv's geometry)
//   ConvTranspose    Y  = BackwardData(W, X) (+ bias)    (ConvTranspose is Conv's adjoint: the
//                    Conv whose input is Y and output X, with ConvTranspose's pads)
//   ConvGradFilter   dW = BackwardFilter(X, dY)
// cuDNN pads symmetrically. ONNX pads may differ at the two ends (SAME_*, explicit pads) and
// ConvTranspose's may be negative or leave trailing outputs without any contribution
// (output_padding >= stride); then the convolution runs on an explicitly padded copy of the
// input (Forward, BackwardFilter) or into a full-size image (BackwardData, no padding: size
// stride·(P−1) + dilated kernel) that is then cropped / zero-extended into the output
// (kernels::Pad), all in the op's workspace.
//
// Algorithms: chosen once per shape at compile time. A cache miss autotunes with
// cudnnFind*AlgorithmEx (at most kRequestedAlgos candidates, on scratch buffers cudaMalloc'ed for
// the search and freed after it; compile runs outside the captured step) and falls back to the
// cudnnGet*Algorithm_v7 heuristics when the search cannot run. Deterministic algorithms are
// preferred (replays of a step give the same bits; cuDNN's atomics-based backward algorithms do
// not), then the fastest; the workspace is bounded by kMaxConvWorkspace. Measured on an H200
// (cuDNN 9, TF32, the benchmark CNN, batch 1024): the deterministic choice costs only the first
// Conv's filter gradient (C_in = 1: FFT_TILING 267 µs vs the atomics-based ALGO_0 168 µs); the
// others' fastest algorithms are deterministic.
// Layouts: the ONNX ops are channels-first (NCHW, KCRS filters); their channels-last forms
// (layout = "NHWC", ir/ops/channels_last.h, made by the nhwc-layout pass) hand cuDNN NHWC tensors
// and KRSC filters, where its fastest tensor-core kernels run (Conv 32→64 on the H200: 200 µs vs
// 339 µs forward, 294 vs 399 backward-data in a probe). The compile functions below work on
// channels-first dims (Channels::First) and convert at the edges; channels-last takes 2-D windows
// with symmetric pads only (no padded staging copy; the pass checks it). The choice (algorithm,
// math type, workspace) is stored in CudaLibraries' cache under a key with the direction, dtype,
// math mode, layout (packed NCHW), every dim, pad, stride, dilation and the group count; the
// cache file's header carries the cuDNN version and the device (CudaLibraries::VersionTag), so a
// second compile of the same shape, in this process or from --algo-cache, runs no search.
// Math: float32 with TF32 allowed, float16 and bfloat16 use CUDNN_TENSOR_OP_MATH (16-bit types
// with a CUDNN_DATA_FLOAT compute type: float32 accumulation; bfloat16 needs sm_80+); float32
// with TF32 off uses CUDNN_FMA_MATH (on Ampere and later CUDNN_DEFAULT_MATH still permits TF32
// for float32 — cuDNN API reference, cudnnMathType_t); float64 uses CUDNN_DEFAULT_MATH.
//
// Pooling runs on our own kernels (kernels/pool_kernels.cu), not cudnnPooling*: ONNX's
// semantics (the first maximum and NaN propagation, Indices with storage_order, ceil_mode
// windows, count_include_pad over the padded extent only, dilations, LpPool, any rank) and
// MaxPoolGrad's inputs (dY, X, without the forward's Y) do not match cuDNN's pooling.
//
// Every launch only enqueues work on the given stream (no allocation, no synchronisation), so
// the step can be captured in a CUDA Graph.
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/ops/channels_last.h"
#include "ir/ops/conv_pool_geometry.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/cudnn_graph_conv.h"
#include "runtime/cuda/kernels/pool_kernels.h"
#include "runtime/cuda/kernels/small_conv_kernels.h"
#include "runtime/cuda/kernels/tensor_kernels.h"

namespace ottr::cuda {
namespace {

using ir::DType;

// The largest workspace one convolution may ask for. Every op currently gets its own workspace
// region in the arena, so this bounds what autotuning may trade memory for speed.
constexpr int64_t kMaxConvWorkspace = int64_t{256} << 20;
// Candidates cudnnFind*AlgorithmEx times (each is run, so this bounds the compile time).
constexpr int kRequestedAlgos = 8;
constexpr int64_t kAlign = 256;

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

using TensorDesc = Handle<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = Handle<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = Handle<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc = Handle<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;

std::string DimsString(const std::vector<int64_t>& d) { return absl::StrCat("[", absl::StrJoin(d, ","), "]"); }

int64_t Product(const std::vector<int64_t>& v, size_t begin = 0) {
  int64_t p = 1;
  for (size_t i = begin; i < v.size(); ++i) p *= v[i];
  return p;
}

int64_t AlignUp(int64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

int Code(DType t) { return static_cast<int>(ir::DTypeToOnnx(t)); }

// ---------------------------------------------------------------------------------------------
// Geometry.

// One window geometry resolved for an input: for Conv, its gradients and the pools the image is
// the input and the positions the output; for ConvTranspose the image is the output and the
// positions the input (runtime/cpu/im2col.h).
struct Geometry {
  int64_t nd = 0;
  std::vector<int64_t> image, positions, kernel, stride, dilation, pad_begin, pad_end;

  int64_t EffectiveKernel(int64_t d) const { return (kernel[d] - 1) * dilation[d] + 1; }
};

enum class WindowOp { kConv, kConvTranspose, kPool };

// The CPU's conv_pool::ResolveGeometry, with errors naming the node.
absl::StatusOr<Geometry> ResolveGeometry(const OpCompileContext& ctx, const std::vector<int64_t>& x_dims,
                                         const std::vector<int64_t>* w_dims, WindowOp op) {
  if (x_dims.size() < 3) {
    return ctx.Error(absl::StrCat("input X ", DimsString(x_dims), " must have rank >= 3 (N x C x D1 x ... x Dn)"));
  }
  const int64_t nd = static_cast<int64_t>(x_dims.size()) - 2;
  auto attrs = ir::ReadWindowAttrs(ctx.node(), nd, op == WindowOp::kPool, op == WindowOp::kConvTranspose);
  if (!attrs.ok()) return ctx.Error(attrs.status().message());
  if (w_dims != nullptr) {
    if (w_dims->size() != x_dims.size()) {
      return ctx.Error(absl::StrCat("W ", DimsString(*w_dims), " must have the rank of X ", DimsString(x_dims)));
    }
    const std::vector<int64_t> ws(w_dims->begin() + 2, w_dims->end());
    if (absl::Status s = ir::SetKernelFromWeights(*attrs, ws); !s.ok()) return ctx.Error(s.message());
  }
  if (attrs->kernel.empty()) return ctx.Error("attribute 'kernel_shape' is required");
  Geometry g;
  g.nd = nd;
  g.kernel = attrs->kernel;
  g.stride = attrs->strides;
  g.dilation = attrs->dilations;
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t in = x_dims[2 + i];
    auto axis = op == WindowOp::kConvTranspose ? ir::ResolveConvTransposeAxis(*attrs, i, in)
                                               : ir::ResolveWindowAxis(*attrs, i, in);
    if (!axis.ok()) return ctx.Error(absl::StrCat("X ", DimsString(x_dims), ": ", axis.status().message()));
    g.pad_begin.push_back(axis->pad_begin);
    g.pad_end.push_back(axis->pad_end);
    g.image.push_back(op == WindowOp::kConvTranspose ? axis->out : in);
    g.positions.push_back(op == WindowOp::kConvTranspose ? in : axis->out);
  }
  return g;
}

// [n, channels, dims...]
std::vector<int64_t> WithBatch(int64_t n, int64_t channels, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out = {n, channels};
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

// The computed output dims must be those shape inference gave the output (they come from the
// same functions, so a difference is our bug).
absl::Status CheckOutputDims(const OpCompileContext& ctx, int i, const std::vector<int64_t>& dims) {
  if (ctx.output_dims(i) == dims) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(ctx.node().Describe(), " (CUDA): output ", i, " has static shape ",
                                          DimsString(ctx.output_dims(i)), " but the geometry gives ",
                                          DimsString(dims)));
}

// The node's layout (ir/ops/channels_last.h): First gives an operand's dims channels-first (what the
// compile functions work on), Last an output's dims as stored.
struct Channels {
  bool last = false;
  explicit Channels(const OpCompileContext& ctx) : last(ir::IsChannelsLast(ctx.node())) {}
  std::vector<int64_t> First(const std::vector<int64_t>& d) const {
    return last && d.size() >= 3 ? ir::PermuteDims(d, ir::ToChannelsFirstPerm(static_cast<int64_t>(d.size()))) : d;
  }
  std::vector<int64_t> Last(const std::vector<int64_t>& d) const {
    return last && d.size() >= 3 ? ir::PermuteDims(d, ir::ToChannelsLastPerm(static_cast<int64_t>(d.size()))) : d;
  }
  // Channels-last runs 2-D windows, and the convolutions symmetric pads only (no staging copy).
  absl::Status Supports(const OpCompileContext& ctx, const Geometry& g, bool symmetric) const {
    if (!last) return absl::OkStatus();
    if (g.nd != 2) return ctx.Unsupported(absl::StrCat("channels-last over ", g.nd, " spatial axes (2 only)"));
    if (!symmetric) return ctx.Unsupported("a channels-last convolution whose pads are not symmetric");
    return absl::OkStatus();
  }
};

// The direct kernels for few input channels (kernels/small_conv_kernels.h): channels-last, 2-D,
// group 1, symmetric pads. x [N, C, H, W] and y [N, K, OH, OW] channels-first dims.
std::optional<kernels::SmallConvGeometry> SmallConv(DType t, const Channels& layout, const std::vector<int64_t>& x,
                                                    const std::vector<int64_t>& y, const Geometry& g, int64_t group) {
  if (!layout.last || group != 1 || g.nd != 2 || x.size() != 4) return std::nullopt;
  kernels::SmallConvGeometry s;
  s.n = x[0];
  s.c = x[1];
  s.h = x[2];
  s.w = x[3];
  s.k = y[1];
  s.oh = y[2];
  s.ow = y[3];
  s.kh = g.kernel[0];
  s.kw = g.kernel[1];
  s.stride_h = g.stride[0];
  s.stride_w = g.stride[1];
  s.pad_h = g.pad_begin[0];
  s.pad_w = g.pad_begin[1];
  s.dil_h = g.dilation[0];
  s.dil_w = g.dilation[1];
  if (!kernels::SmallConvSupported(Code(t), s)) return std::nullopt;
  return s;
}

// Every input a float type, all the same (the CPU's CheckFloatInputs / CheckConvDTypes).
absl::Status CheckFloatInputs(const OpCompileContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  if (!ir::IsFloat(t)) {
    return ctx.Unsupported(
        absl::StrCat("element type ", ir::DTypeName(t), " is not supported (float16, bfloat16, float, double)"));
  }
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.has_input(i) && ctx.input_type(i).dtype != t) {
      return ctx.Error(absl::StrCat("input ", i, " is ", ir::DTypeName(ctx.input_type(i).dtype), " but input 0 is ",
                                    ir::DTypeName(t)));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Explicit padding / cropping through kernels::Pad (constant zero, negative pads crop).

// Pads the spatial axes of a contiguous [N, C, spatial...] tensor by begin/end (either sign).
kernels::PadParams SpatialPad(const std::vector<int64_t>& src, const std::vector<int64_t>& begin,
                              const std::vector<int64_t>& end, int elem_bytes) {
  kernels::PadParams p;
  p.mode = kernels::PadMode::kConstant;
  p.elem_bytes = elem_bytes;
  p.value_bytes = elem_bytes;
  // N and C move together as one axis.
  std::vector<int64_t> in = {src[0] * src[1]};
  in.insert(in.end(), src.begin() + 2, src.end());
  p.rank = static_cast<int>(in.size());
  int64_t stride = 1, out_numel = 1;
  for (int a = p.rank - 1; a >= 0; --a) {
    const int64_t b = a == 0 ? 0 : begin[a - 1];
    const int64_t e = a == 0 ? 0 : end[a - 1];
    p.out_dims[a] = in[a] + b + e;
    p.in_strides[a] = stride;
    p.pad_begin[a] = std::max<int64_t>(b, 0);
    p.crop[a] = std::max<int64_t>(-b, 0);
    p.len[a] = std::max<int64_t>(0, in[a] - p.crop[a] - std::max<int64_t>(-e, 0));
    stride *= in[a];
    out_numel *= p.out_dims[a];
  }
  p.numel = out_numel;
  p.index32 = out_numel < (int64_t{1} << 30) && Product(src) < (int64_t{1} << 30);
  return p;
}

// ---------------------------------------------------------------------------------------------
// cuDNN convolutions.

enum class ConvKind { kForward, kBackwardData, kBackwardFilter };

const char* KindName(ConvKind k) {
  switch (k) {
    case ConvKind::kForward: return "fwd";
    case ConvKind::kBackwardData: return "bwd-data";
    case ConvKind::kBackwardFilter: return "bwd-filter";
  }
  return "?";
}

// A convolution as cuDNN sees it: x [N, C, image...] (already padded where ONNX's pads are not
// symmetric), w [K, C/group, kernel...], y [N, K, positions...], symmetric pads.
struct ConvShape {
  ConvKind kind = ConvKind::kForward;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> x, w, y;
  std::vector<int64_t> pad, stride, dilation;
  int64_t group = 1;
  bool channels_last = false;  // NHWC tensors and a KRSC filter (dims above stay channels-first)
  bool bias = false;           // forward: a bias follows (the graph path adds it in the same kernel)
  bool relu = false;           // forward: then ReLU (ottr::Conv's activation)
};

absl::StatusOr<cudnnDataType_t> DnnType(const OpCompileContext& ctx, DType t) {
  switch (t) {
    case DType::kFloat32: return CUDNN_DATA_FLOAT;
    case DType::kFloat16: return CUDNN_DATA_HALF;
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::kFloat64: return CUDNN_DATA_DOUBLE;
    default:
      return ctx.Unsupported(absl::StrCat("convolution of element type ", ir::DTypeName(t),
                                          " on CUDA (float16, bfloat16, float, double)"));
  }
}

// One cuDNN convolution with its algorithm chosen; Run only enqueues it.
class CudnnConv {
 public:
  static absl::StatusOr<std::shared_ptr<CudnnConv>> Create(OpCompileContext& ctx, const ConvShape& s);

  int64_t workspace_bytes() const { return workspace_bytes_; }
  // kForward: (x, w) -> y; kBackwardData: (w, dy) -> dx; kBackwardFilter: (x, dy) -> dw.
  absl::Status Run(const void* a, const void* b, void* out, void* workspace, cudaStream_t stream) const;
  // A float32 forward whose chosen algorithm is IMPLICIT_PRECOMP_GEMM, the one algorithm with
  // which cudnnConvolutionBiasActivationForward takes an identity activation: then the bias is
  // added in the convolution's epilogue (RunWithBias) instead of by a second pass over y.
  bool CanFuseBias() const {
    if (graph_ != nullptr) return graph_bias_;
    return shape_.kind == ConvKind::kForward && shape_.dtype == DType::kFloat32 &&
           algo_ == static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  }
  // Requires CanFuseBias(): y = conv(x, w) + bias[channel] (then ReLU when FusesRelu()).
  absl::Status RunWithBias(const void* x, const void* w, const void* bias, void* y, void* workspace,
                           cudaStream_t stream) const;
  // The graph plan's measured time (µs), -1 for the legacy path or an untimed plan.
  float graph_us() const { return graph_ != nullptr ? graph_->time_us() : -1.0f; }
  // The forward's ReLU runs inside Run / RunWithBias (else the caller runs RunRelu after the bias).
  bool FusesRelu() const { return graph_ != nullptr ? graph_relu_ : legacy_relu_; }
  // y = relu(y) in place (cudnnActivationForward, NaN propagated), on the forward's output.
  absl::Status RunRelu(void* y, cudaStream_t stream) const;

 private:
  CudnnConv() = default;
  absl::Status ChooseAlgorithm(OpCompileContext& ctx, cudnnMathType_t math, bool fma_only);
  // The graph-API path (cudnn_graph_conv.h) for 2-D convolutions on tensor cores; false when it
  // does not apply or no plan builds (the legacy algorithms are chosen then).
  bool TryGraph(OpCompileContext& ctx, cudnnDataType_t t);
  template <typename Perf>
  absl::StatusOr<bool> Pick(const std::vector<Perf>& perfs, bool fma_only);
  absl::StatusOr<int64_t> WorkspaceFor(int algo) const;

  ConvShape shape_;
  cudnnHandle_t handle_ = nullptr;
  bool double_scale_ = false;
  TensorDesc x_desc_, y_desc_;
  TensorDesc bias_desc_;  // [1, K, 1...], made when CanFuseBias()
  ActivationDesc identity_;
  FilterDesc w_desc_;
  ConvDesc conv_desc_;
  int algo_ = 0;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  int64_t workspace_bytes_ = 0;
  std::unique_ptr<GraphConv> graph_;
  bool graph_bias_ = false;
  bool graph_relu_ = false;
  bool legacy_relu_ = false;  // the legacy bias epilogue's activation is ReLU
  ActivationDesc relu_;       // for RunRelu
};

absl::StatusOr<TensorDesc> MakeTensorDesc(cudnnDataType_t t, const std::vector<int64_t>& dims,
                                          bool channels_last = false) {
  std::vector<int> d(dims.begin(), dims.end()), strides(dims.size());
  if (channels_last) {
    cudnnTensorDescriptor_t desc;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&desc));
    TensorDesc owner(desc);
    OTTR_CUDA_RETURN_IF_ERROR(
        cudnnSetTensorNdDescriptorEx(desc, CUDNN_TENSOR_NHWC, t, static_cast<int>(d.size()), d.data()));
    return owner;
  }
  int s = 1;
  for (int i = static_cast<int>(d.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max(d[i], 1);
  }
  cudnnTensorDescriptor_t desc;
  OTTR_CUDA_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&desc));
  TensorDesc owner(desc);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(desc, t, static_cast<int>(d.size()), d.data(), strides.data()));
  return owner;
}

// cuDNN wants at least 4-D tensors: a 1-D convolution runs as a 2-D one of height 1.
void PromoteTo2D(ConvShape& s) {
  if (s.x.size() != 3) return;
  s.x.insert(s.x.begin() + 2, 1);
  s.w.insert(s.w.begin() + 2, 1);
  s.y.insert(s.y.begin() + 2, 1);
  s.pad.insert(s.pad.begin(), 0);
  s.stride.insert(s.stride.begin(), 1);
  s.dilation.insert(s.dilation.begin(), 1);
}

absl::StatusOr<std::shared_ptr<CudnnConv>> CudnnConv::Create(OpCompileContext& ctx, const ConvShape& shape) {
  auto c = std::shared_ptr<CudnnConv>(new CudnnConv());
  c->shape_ = shape;
  ConvShape& s = c->shape_;
  PromoteTo2D(s);
  for (const std::vector<int64_t>* v : {&s.x, &s.w, &s.y}) {
    if (Product(*v) >= INT_MAX) {
      return ctx.Unsupported(absl::StrCat("a cuDNN convolution tensor of ", Product(*v), " elements (2^31 or more)"));
    }
  }
  for (const std::vector<int64_t>* v : {&s.pad, &s.stride, &s.dilation}) {
    for (int64_t e : *v) {
      if (e > INT_MAX || e < 0) return ctx.Unsupported("a convolution attribute beyond cuDNN's int range");
    }
  }
  OTTR_ASSIGN_OR_RETURN(cudnnDataType_t t, DnnType(ctx, s.dtype));
  OTTR_ASSIGN_OR_RETURN(c->handle_, ctx.libs().dnn());
  c->double_scale_ = s.dtype == DType::kFloat64;
  OTTR_ASSIGN_OR_RETURN(c->x_desc_, MakeTensorDesc(t, s.x, s.channels_last));
  OTTR_ASSIGN_OR_RETURN(c->y_desc_, MakeTensorDesc(t, s.y, s.channels_last));
  {
    cudnnFilterDescriptor_t f;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&f));
    c->w_desc_ = FilterDesc(f);
    std::vector<int> wd(s.w.begin(), s.w.end());
    OTTR_CUDA_RETURN_IF_ERROR(cudnnSetFilterNdDescriptor(f, t, s.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                         static_cast<int>(wd.size()), wd.data()));
  }
  const cudnnDataType_t compute = s.dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  {
    cudnnConvolutionDescriptor_t cd;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&cd));
    c->conv_desc_ = ConvDesc(cd);
    std::vector<int> pad(s.pad.begin(), s.pad.end()), stride(s.stride.begin(), s.stride.end()),
        dil(s.dilation.begin(), s.dilation.end());
    OTTR_CUDA_RETURN_IF_ERROR(cudnnSetConvolutionNdDescriptor(cd, static_cast<int>(pad.size()), pad.data(),
                                                              stride.data(), dil.data(), CUDNN_CROSS_CORRELATION,
                                                              compute));
    OTTR_CUDA_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(cd, static_cast<int>(s.group)));
    // The output dims cuDNN derives must be ours.
    std::vector<int> out(s.y.size());
    OTTR_CUDA_RETURN_IF_ERROR(cudnnGetConvolutionNdForwardOutputDim(cd, c->x_desc_.get(), c->w_desc_.get(),
                                                                   static_cast<int>(out.size()), out.data()));
    if (std::vector<int64_t>(out.begin(), out.end()) != s.y) {
      return absl::InternalError(absl::StrCat(ctx.node().Describe(), " (CUDA): cuDNN derives the convolution output ",
                                              DimsString(std::vector<int64_t>(out.begin(), out.end())), " from x ",
                                              DimsString(s.x), ", w ", DimsString(s.w), "; expected ",
                                              DimsString(s.y)));
    }
  }
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool fma_only = false;
  if (s.dtype == DType::kFloat16 || s.dtype == DType::kBFloat16 ||
      (s.dtype == DType::kFloat32 && ctx.libs().tf32())) {
    math = CUDNN_TENSOR_OP_MATH;
  } else if (s.dtype == DType::kFloat32) {
    math = CUDNN_FMA_MATH;  // CUDNN_DEFAULT_MATH would still allow TF32 on sm_80+
    fma_only = true;
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetConvolutionMathType(c->conv_desc_.get(), math));
  if (s.relu) {
    cudnnActivationDescriptor_t act;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnCreateActivationDescriptor(&act));
    c->relu_ = ActivationDesc(act);
    OTTR_CUDA_RETURN_IF_ERROR(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  }
  if (!fma_only && c->TryGraph(ctx, t)) return c;
  OTTR_RETURN_IF_ERROR(c->ChooseAlgorithm(ctx, math, fma_only));
  if (c->CanFuseBias()) {
    std::vector<int64_t> b(s.y.size(), 1);
    b[1] = s.y[1];
    OTTR_ASSIGN_OR_RETURN(c->bias_desc_, MakeTensorDesc(t, b, s.channels_last));
    cudnnActivationDescriptor_t act;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnCreateActivationDescriptor(&act));
    c->identity_ = ActivationDesc(act);
    // cudnnConvolutionBiasActivationForward takes RELU with any algorithm (IDENTITY only with
    // IMPLICIT_PRECOMP_GEMM, which CanFuseBias requires).
    c->legacy_relu_ = s.bias && s.relu;
    OTTR_CUDA_RETURN_IF_ERROR(cudnnSetActivationDescriptor(
        act, c->legacy_relu_ ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN, 0.0));
  }
  return c;
}

absl::Status CudnnConv::RunRelu(void* y, cudaStream_t stream) const {
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetStream(handle_, stream));
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* one = double_scale_ ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* zero = double_scale_ ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnActivationForward(handle_, relu_.get(), one, y_desc_.get(), y, zero, y_desc_.get(), y));
  return absl::OkStatus();
}

bool CudnnConv::TryGraph(OpCompileContext& ctx, cudnnDataType_t t) {
  const ConvShape& s = shape_;
  if (std::getenv("OTTR_CONV_LEGACY") != nullptr || s.x.size() != 4 || s.group != 1 ||
      (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_HALF && t != CUDNN_DATA_BFLOAT16)) {
    return false;
  }
  GraphConvSpec g;
  g.kind = s.kind == ConvKind::kForward        ? GraphConvKind::kForward
           : s.kind == ConvKind::kBackwardData ? GraphConvKind::kBackwardData
                                               : GraphConvKind::kBackwardFilter;
  g.io_type = t;
  g.channels_last = s.channels_last;
  g.x = s.x;
  g.w = s.w;
  g.y = s.y;
  g.pad = s.pad;
  g.stride = s.stride;
  g.dilation = s.dilation;
  // The most fused graph first (bias and ReLU in the convolution's epilogue), then less.
  const bool fwd = s.kind == ConvKind::kForward;
  std::vector<std::pair<bool, bool>> variants;  // (bias, relu)
  if (fwd && s.bias && s.relu) variants.push_back({true, true});
  if (fwd && s.bias) variants.push_back({true, false});
  if (fwd && s.relu && !s.bias) variants.push_back({false, true});
  variants.push_back({false, false});
  for (auto [bias, relu] : variants) {
    g.bias = bias;
    g.relu = relu;
    const std::string key = absl::StrCat("cudnn-graph ", KindName(s.kind), " ", ir::DTypeName(s.dtype),
                                         s.channels_last ? " nhwc x" : " nchw x", DimsString(s.x), " w", DimsString(s.w),
                                         " y", DimsString(s.y), " pad", DimsString(s.pad), " stride",
                                         DimsString(s.stride), " dil", DimsString(s.dilation), bias ? " bias" : "",
                                         relu ? " relu" : "");
    auto conv = GraphConv::Create(ctx.libs(), g, kMaxConvWorkspace, key);
    if (conv.ok()) {
      graph_ = std::move(*conv);
      graph_bias_ = bias;
      graph_relu_ = relu;
      workspace_bytes_ = graph_->workspace_bytes();
      return true;
    }
    if (std::getenv("OTTR_LOG_CONV_ALGOS") != nullptr) {
      std::fprintf(stderr, "%s: %s\n", key.c_str(), std::string(conv.status().message()).c_str());
    }
  }
  return false;
}

absl::StatusOr<int64_t> CudnnConv::WorkspaceFor(int algo) const {
  size_t bytes = 0;
  switch (shape_.kind) {
    case ConvKind::kForward:
      OTTR_CUDA_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
          handle_, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes));
      break;
    case ConvKind::kBackwardData:
      OTTR_CUDA_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle_, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes));
      break;
    case ConvKind::kBackwardFilter:
      OTTR_CUDA_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle_, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes));
      break;
  }
  return static_cast<int64_t>(bytes);
}

// Device scratch for the search, freed when it goes out of scope.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (void* p : ptrs_) cudaFree(p);
  }
  // Zero-filled; null (and the error cleared) when the allocation fails.
  void* Alloc(int64_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1))) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    ptrs_.push_back(p);
    if (cudaMemset(p, 0, static_cast<size_t>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }

 private:
  std::vector<void*> ptrs_;
};

// Picks, among successful results within the workspace bound (and of FMA math when TF32 is
// off), the first deterministic one, else the first one; results come fastest first (Find) or
// in heuristic preference order (Get_v7). Returns whether one was found.
template <typename Perf>
absl::StatusOr<bool> CudnnConv::Pick(const std::vector<Perf>& perfs, bool fma_only) {
  const Perf* chosen = nullptr;
  for (bool need_deterministic : {true, false}) {
    for (const Perf& p : perfs) {
      if (p.status != CUDNN_STATUS_SUCCESS || static_cast<int64_t>(p.memory) > kMaxConvWorkspace) continue;
      if (fma_only && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
      if (need_deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      chosen = &p;
      break;
    }
    if (chosen != nullptr) break;
  }
  if (chosen == nullptr) return false;
  algo_ = static_cast<int>(chosen->algo);
  // The algorithm and the math type together select the kernel (cuDNN: "cudnnFind and cudnnGet
  // return a math type with each result"); without TF32 the descriptor stays FMA.
  math_ = fma_only ? CUDNN_FMA_MATH : chosen->mathType;
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv_desc_.get(), math_));
  auto ws = WorkspaceFor(algo_);
  if (!ws.ok() || *ws > kMaxConvWorkspace) return false;
  workspace_bytes_ = *ws;
  return true;
}

absl::Status CudnnConv::ChooseAlgorithm(OpCompileContext& ctx, cudnnMathType_t math, bool fma_only) {
  CudaLibraries& libs = ctx.libs();
  const ConvShape& s = shape_;
  const std::string key =
      absl::StrCat("cudnn-conv ", KindName(s.kind), " ", ir::DTypeName(s.dtype), " math", static_cast<int>(math),
                   (s.channels_last ? " nhwc x" : " nchw x"), DimsString(s.x), " w", DimsString(s.w), " y", DimsString(s.y), " pad",
                   DimsString(s.pad), " stride", DimsString(s.stride), " dil", DimsString(s.dilation), " g", s.group);
  std::string cached;
  if (libs.LookupAlgo(key, &cached)) {
    std::vector<std::string> parts = absl::StrSplit(cached, ' ');
    int algo = 0, m = 0;
    int64_t ws = 0;
    if (parts.size() == 3 && absl::SimpleAtoi(parts[0], &algo) && absl::SimpleAtoi(parts[1], &m) &&
        absl::SimpleAtoi(parts[2], &ws)) {
      const cudnnMathType_t cached_math = static_cast<cudnnMathType_t>(m);
      if (cudnnSetConvolutionMathType(conv_desc_.get(), cached_math) == CUDNN_STATUS_SUCCESS) {
        auto need = WorkspaceFor(algo);
        if (need.ok() && *need <= kMaxConvWorkspace) {
          algo_ = algo;
          math_ = cached_math;
          workspace_bytes_ = *need;
          return absl::OkStatus();
        }
      }
      // A stale entry (another cuDNN build would have another header): search again.
      OTTR_CUDA_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv_desc_.get(), math));
    }
  }
  libs.CountAlgoSearch();
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetStream(handle_, nullptr));
  const int64_t es = static_cast<int64_t>(ir::DTypeSize(s.dtype));
  // Heuristics first: they bound the search's workspace and are the fallback.
  int64_t max_heuristic_ws = 0;
  bool chosen = false;
  auto run = [&](auto& heur, auto& found, auto get_count, auto get_v7, auto find) -> absl::Status {
    int count = 0;
    OTTR_CUDA_RETURN_IF_ERROR(get_count(&count));
    heur.resize(std::max(count, 1));
    int returned = 0;
    OTTR_CUDA_RETURN_IF_ERROR(get_v7(static_cast<int>(heur.size()), &returned, heur.data()));
    heur.resize(returned);
    for (const auto& p : heur) {
      if (p.status == CUDNN_STATUS_SUCCESS) {
        max_heuristic_ws = std::max<int64_t>(max_heuristic_ws, static_cast<int64_t>(p.memory));
      }
    }
    // Autotune on scratch buffers (the search writes the output; the inputs are zeros).
    Scratch scratch;
    void* x = scratch.Alloc(Product(s.x) * es);
    void* w = scratch.Alloc(Product(s.w) * es);
    void* y = scratch.Alloc(Product(s.y) * es);
    const int64_t ws_bytes = std::min(max_heuristic_ws, kMaxConvWorkspace);
    void* ws = scratch.Alloc(ws_bytes);
    if (x != nullptr && w != nullptr && y != nullptr && ws != nullptr) {
      found.resize(kRequestedAlgos);
      returned = 0;
      if (find(x, w, y, ws, ws_bytes, static_cast<int>(found.size()), &returned, found.data()) ==
          CUDNN_STATUS_SUCCESS) {
        found.resize(returned);
        // OTTR_LOG_CONV_ALGOS=1: what the search measured, to see why an algorithm was chosen.
        if (std::getenv("OTTR_LOG_CONV_ALGOS") != nullptr) {
          for (const auto& p : found) {
            std::fprintf(stderr, "%s: algo %d status %d %.1f us ws %zu determinism %d math %d\n", key.c_str(),
                         static_cast<int>(p.algo), static_cast<int>(p.status), p.time * 1000.0, p.memory,
                         static_cast<int>(p.determinism), static_cast<int>(p.mathType));
          }
        }
        OTTR_ASSIGN_OR_RETURN(chosen, Pick(found, fma_only));
      }
      cudaGetLastError();
    }
    if (!chosen) {
      OTTR_CUDA_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv_desc_.get(), math));
      OTTR_ASSIGN_OR_RETURN(chosen, Pick(heur, fma_only));
    }
    return absl::OkStatus();
  };
  cudnnHandle_t h = handle_;
  cudnnTensorDescriptor_t xd = x_desc_.get(), yd = y_desc_.get();
  cudnnFilterDescriptor_t wd = w_desc_.get();
  cudnnConvolutionDescriptor_t cd = conv_desc_.get();
  switch (s.kind) {
    case ConvKind::kForward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> heur, found;
      OTTR_RETURN_IF_ERROR(run(
          heur, found, [&](int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); },
          [&](int req, int* n, cudnnConvolutionFwdAlgoPerf_t* p) {
            return cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, req, n, p);
          },
          [&](void* x, void* w, void* y, void* ws, int64_t ws_bytes, int req, int* n,
              cudnnConvolutionFwdAlgoPerf_t* p) {
            return cudnnFindConvolutionForwardAlgorithmEx(h, xd, x, wd, w, cd, yd, y, req, n, p, ws,
                                                          static_cast<size_t>(ws_bytes));
          }));
      break;
    }
    case ConvKind::kBackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> heur, found;
      OTTR_RETURN_IF_ERROR(run(
          heur, found, [&](int* n) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n); },
          [&](int req, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, req, n, p);
          },
          [&](void* x, void* w, void* y, void* ws, int64_t ws_bytes, int req, int* n,
              cudnnConvolutionBwdDataAlgoPerf_t* p) {
            return cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd, w, yd, y, cd, xd, x, req, n, p, ws,
                                                               static_cast<size_t>(ws_bytes));
          }));
      break;
    }
    case ConvKind::kBackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> heur, found;
      OTTR_RETURN_IF_ERROR(run(
          heur, found, [&](int* n) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n); },
          [&](int req, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, req, n, p);
          },
          [&](void* x, void* w, void* y, void* ws, int64_t ws_bytes, int req, int* n,
              cudnnConvolutionBwdFilterAlgoPerf_t* p) {
            return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd, x, yd, y, cd, wd, w, req, n, p, ws,
                                                                 static_cast<size_t>(ws_bytes));
          }));
      break;
    }
  }
  if (!chosen) {
    return ctx.Unsupported(absl::StrCat("cuDNN offers no algorithm within ", kMaxConvWorkspace >> 20,
                                        " MiB of workspace for ", key));
  }
  libs.StoreAlgo(key, absl::StrCat(algo_, " ", static_cast<int>(math_), " ", workspace_bytes_));
  return absl::OkStatus();
}

absl::Status CudnnConv::Run(const void* a, const void* b, void* out, void* workspace, cudaStream_t stream) const {
  if (graph_ != nullptr) {
    switch (shape_.kind) {
      case ConvKind::kForward: return graph_->Run(a, b, out, nullptr, workspace, stream);
      case ConvKind::kBackwardData: return graph_->Run(out, a, b, nullptr, workspace, stream);
      case ConvKind::kBackwardFilter: return graph_->Run(a, out, b, nullptr, workspace, stream);
    }
  }
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetStream(handle_, stream));
  const double alpha_d = 1.0, beta_d = 0.0;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const void* alpha = double_scale_ ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = double_scale_ ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  const size_t ws = static_cast<size_t>(workspace_bytes_);
  switch (shape_.kind) {
    case ConvKind::kForward:
      OTTR_CUDA_RETURN_IF_ERROR(cudnnConvolutionForward(handle_, alpha, x_desc_.get(), a, w_desc_.get(), b,
                                                        conv_desc_.get(), static_cast<cudnnConvolutionFwdAlgo_t>(algo_),
                                                        workspace, ws, beta, y_desc_.get(), out));
      break;
    case ConvKind::kBackwardData:
      OTTR_CUDA_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
          handle_, alpha, w_desc_.get(), a, y_desc_.get(), b, conv_desc_.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_), workspace, ws, beta, x_desc_.get(), out));
      break;
    case ConvKind::kBackwardFilter:
      OTTR_CUDA_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
          handle_, alpha, x_desc_.get(), a, y_desc_.get(), b, conv_desc_.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo_), workspace, ws, beta, w_desc_.get(), out));
      break;
  }
  return absl::OkStatus();
}

absl::Status CudnnConv::RunWithBias(const void* x, const void* w, const void* bias, void* y, void* workspace,
                                     cudaStream_t stream) const {
  if (graph_ != nullptr) return graph_->Run(x, w, y, bias, workspace, stream);
  OTTR_CUDA_RETURN_IF_ERROR(cudnnSetStream(handle_, stream));
  // y = identity(1 · conv(x, w) + 0 · z + bias) with z = y: cuDNN does not read z when its
  // scale is 0 (the arena-poisoning tests would see NaN otherwise).
  const float one = 1.0f, zero = 0.0f;
  OTTR_CUDA_RETURN_IF_ERROR(cudnnConvolutionBiasActivationForward(
      handle_, &one, x_desc_.get(), x, w_desc_.get(), w, conv_desc_.get(),
      static_cast<cudnnConvolutionFwdAlgo_t>(algo_), workspace, static_cast<size_t>(workspace_bytes_), &zero,
      y_desc_.get(), y, bias_desc_.get(), bias, identity_.get(), y_desc_.get(), y));
  return absl::OkStatus();
}

bool Symmetric(const Geometry& g) {
  for (int64_t d = 0; d < g.nd; ++d) {
    if (g.pad_begin[d] != g.pad_end[d] || g.pad_begin[d] < 0) return false;
  }
  return true;
}

// Workspace layout: [staging buffer (padded input or full image), aligned][cuDNN workspace].
struct Staging {
  bool used = false;
  kernels::PadParams pad;  // staging -> output (BackwardData) or input -> staging (Forward/Filter)
  int64_t bytes = 0;       // aligned
};

// ---------------------------------------------------------------------------------------------
// Conv.

absl::Status CheckGroups(const OpCompileContext& ctx, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                         int64_t group) {
  const int64_t c = x[1], m = w[0];
  if (group < 1 || c % group != 0 || m % group != 0 || w[1] * group != c) {
    return ctx.Error(absl::StrCat("X ", DimsString(x), " and W ", DimsString(w), " do not agree with group ", group,
                                  " (need C = W[1] * group and W[0] divisible by group)"));
  }
  return absl::OkStatus();
}

absl::Status CheckBias(const OpCompileContext& ctx, int64_t channels) {
  if (!ctx.has_input(2)) return absl::OkStatus();
  const std::vector<int64_t> b = ctx.input_dims(2);
  if (b.size() != 1 || b[0] != channels) {
    return ctx.Error(absl::StrCat("bias B ", DimsString(b), " must be [", channels, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CompiledOp> CompileConv(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const Channels layout(ctx);
  const std::vector<int64_t> x = layout.First(ctx.input_dims(0)), w = layout.First(ctx.input_dims(1));
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, &w, WindowOp::kConv));
  OTTR_RETURN_IF_ERROR(layout.Supports(ctx, g, Symmetric(g)));
  const int64_t group = ctx.node().GetInt("group", 1);
  OTTR_RETURN_IF_ERROR(CheckGroups(ctx, x, w, group));
  const int64_t m = w[0];
  OTTR_RETURN_IF_ERROR(CheckBias(ctx, m));
  const std::vector<int64_t> y = WithBatch(x[0], m, g.positions);
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, layout.Last(y)));
  const int es = static_cast<int>(ir::DTypeSize(t));
  CompiledOp op;
  if (Product(y) == 0) {
    op.launch = [](const LaunchArgs&) { return absl::OkStatus(); };
    return op;
  }
  const std::string activation = ctx.node().GetString("activation", "");
  if (!activation.empty() && activation != "relu") {
    return ctx.Unsupported(absl::StrCat("activation '", activation, "' (relu only)"));
  }
  const bool relu = activation == "relu";
  if (auto sc = SmallConv(t, layout, x, y, g, group)) {
    const bool has_bias = ctx.has_input(2);
    const int dtype = Code(t);
    op.launch = [sc = *sc, has_bias, relu, dtype](const LaunchArgs& a) -> absl::Status {
      if (a.outputs[0] == nullptr) return absl::OkStatus();
      NvtxRange range("Conv");
      OTTR_CUDA_RETURN_IF_ERROR(kernels::SmallConvForward(dtype, sc, a.inputs[0], a.inputs[1],
                                                          has_bias ? a.inputs[2] : nullptr, relu, a.outputs[0],
                                                          a.stream));
      return absl::OkStatus();
    };
    return op;
  }
  ConvShape s;
  s.channels_last = layout.last;
  s.bias = ctx.has_input(2);
  s.relu = relu;
  s.kind = ConvKind::kForward;
  s.dtype = t;
  s.x = x;
  s.w = w;
  s.y = y;
  s.stride = g.stride;
  s.dilation = g.dilation;
  s.group = group;
  Staging st;
  if (Symmetric(g)) {
    s.pad = g.pad_begin;
  } else {
    std::vector<int64_t> padded(g.nd);
    for (int64_t d = 0; d < g.nd; ++d) padded[d] = g.image[d] + g.pad_begin[d] + g.pad_end[d];
    s.x = WithBatch(x[0], x[1], padded);
    s.pad.assign(g.nd, 0);
    st.used = true;
    st.pad = SpatialPad(x, g.pad_begin, g.pad_end, es);
    st.bytes = AlignUp(Product(s.x) * es);
  }
  OTTR_ASSIGN_OR_RETURN(std::shared_ptr<CudnnConv> conv, CudnnConv::Create(ctx, s));
  op.workspace_bytes = st.bytes + conv->workspace_bytes();
  const bool bias = ctx.has_input(2);
  // The bias over [batch, m, spatial]; channels-last: over [batch · spatial, m, 1].
  const int64_t batch = layout.last ? y[0] * Product(y, 2) : y[0], spatial = layout.last ? 1 : Product(y, 2);
  const int dtype = Code(t);
  op.launch = [conv, st, bias, relu, batch, m, spatial, dtype](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("Conv");
    char* ws = static_cast<char*>(a.workspace);
    const void* xin = a.inputs[0];
    if (st.used) {
      OTTR_CUDA_RETURN_IF_ERROR(kernels::Pad(st.pad, a.inputs[0], nullptr, ws, a.stream));
      xin = ws;
    }
    if (bias && conv->CanFuseBias()) {
      OTTR_RETURN_IF_ERROR(conv->RunWithBias(xin, a.inputs[1], a.inputs[2], a.outputs[0], ws + st.bytes, a.stream));
    } else {
      OTTR_RETURN_IF_ERROR(conv->Run(xin, a.inputs[1], a.outputs[0], ws + st.bytes, a.stream));
      if (bias) {
        OTTR_CUDA_RETURN_IF_ERROR(
            kernels::AddChannelBias(dtype, batch, m, spatial, a.inputs[2], a.outputs[0], a.stream));
      }
    }
    // Unfused ReLU: after the bias, in place.
    if (relu && !(conv->FusesRelu() && (!bias || conv->CanFuseBias()))) {
      OTTR_RETURN_IF_ERROR(conv->RunRelu(a.outputs[0], a.stream));
    }
    return absl::OkStatus();
  };
  return op;
}

// Out[N, channels, g.image] = the adjoint of the convolution with geometry g applied to
// In[N, in_channels, g.positions] with weight W [in_channels, channels/group, kernel...]
// (BackwardData), plus an optional bias (input `bias_input`). ConvTranspose and ConvGradInput.
absl::StatusOr<CompiledOp> CompileBackwardData(OpCompileContext& ctx, const char* name, DType t,
                                               const std::vector<int64_t>& in, const std::vector<int64_t>& w,
                                               int64_t channels, const Geometry& g, int64_t group, int bias_input,
                                               const Channels& layout) {
  const std::vector<int64_t> out = WithBatch(in[0], channels, g.image);
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, layout.Last(out)));
  const int es = static_cast<int>(ir::DTypeSize(t));
  CompiledOp op;
  if (Product(out) == 0) {
    op.launch = [](const LaunchArgs&) { return absl::OkStatus(); };
    return op;
  }
  const bool bias = bias_input >= 0 && ctx.has_input(bias_input);
  const int64_t batch = out[0], spatial = Product(out, 2);
  const int dtype = Code(t);
  if (Product(in) == 0) {  // no contributions: zeros (+ bias)
    op.launch = [out, es, bias, bias_input, batch, channels, spatial, dtype](const LaunchArgs& a) -> absl::Status {
      if (a.outputs[0] == nullptr) return absl::OkStatus();
      OTTR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.outputs[0], 0, Product(out) * es, a.stream));
      if (bias) {
        OTTR_CUDA_RETURN_IF_ERROR(kernels::AddChannelBias(dtype, batch, channels, spatial, a.inputs[bias_input],
                                                          a.outputs[0], a.stream));
      }
      return absl::OkStatus();
    };
    return op;
  }
  ConvShape s;
  s.channels_last = layout.last;
  s.kind = ConvKind::kBackwardData;
  s.dtype = t;
  s.w = w;
  s.y = in;
  s.stride = g.stride;
  s.dilation = g.dilation;
  s.group = group;
  // Direct when cuDNN's symmetric padding of the image yields exactly these positions.
  bool direct = Symmetric(g);
  for (int64_t d = 0; direct && d < g.nd; ++d) {
    const int64_t span = g.image[d] + 2 * g.pad_begin[d] - g.EffectiveKernel(d);
    direct = span >= 0 && span / g.stride[d] + 1 == g.positions[d];
  }
  OTTR_RETURN_IF_ERROR(layout.Supports(ctx, g, direct));
  Staging st;
  if (direct) {
    s.x = out;
    s.pad = g.pad_begin;
  } else {
    // The full image every window fits in without padding, then out[j] = full[j + pad_begin]
    // (0 where that falls outside).
    std::vector<int64_t> full(g.nd), begin(g.nd), end(g.nd);
    for (int64_t d = 0; d < g.nd; ++d) {
      full[d] = g.stride[d] * (g.positions[d] - 1) + g.EffectiveKernel(d);
      begin[d] = -g.pad_begin[d];
      end[d] = g.image[d] - full[d] + g.pad_begin[d];
    }
    s.x = WithBatch(out[0], channels, full);
    s.pad.assign(g.nd, 0);
    st.used = true;
    st.pad = SpatialPad(s.x, begin, end, es);
    st.bytes = AlignUp(Product(s.x) * es);
  }
  OTTR_ASSIGN_OR_RETURN(std::shared_ptr<CudnnConv> conv, CudnnConv::Create(ctx, s));
  // A stride-1 data gradient is also a forward convolution of In with the filter transposed
  // (K <-> C) and flipped, padded by k − 1 − pad (kernels::FlipFilterForDataGrad writes that
  // filter into the workspace each run: a few KB). cuDNN's forward engines are faster than its
  // data-gradient ones for some shapes (the benchmark CNN's Conv 32→64 at batch 1024, TF32:
  // 112 µs forward against 213 µs data gradient): both are timed, the faster by 10% runs.
  // OTTR_CONV_DGRAD_AS_FORWARD=1 takes the forward form whenever it applies (tests), =0 never.
  const char* force = std::getenv("OTTR_CONV_DGRAD_AS_FORWARD");
  const bool always = force != nullptr && std::string(force) == "1";
  const bool never = force != nullptr && std::string(force) == "0";
  bool unit = !never && group == 1 && g.nd == 2 && !st.used && bias_input < 0 && (always || conv->graph_us() > 0);
  for (int64_t d = 0; unit && d < g.nd; ++d) {
    unit = g.stride[d] == 1 && g.dilation[d] == 1 && g.pad_begin[d] <= g.kernel[d] - 1;
  }
  if (unit) {
    ConvShape f;
    f.kind = ConvKind::kForward;
    f.dtype = t;
    f.channels_last = layout.last;
    f.x = in;
    f.w = {channels, in[1], g.kernel[0], g.kernel[1]};
    f.y = out;
    f.pad = {g.kernel[0] - 1 - g.pad_begin[0], g.kernel[1] - 1 - g.pad_begin[1]};
    f.stride = {1, 1};
    f.dilation = {1, 1};
    f.group = 1;
    auto fwd = CudnnConv::Create(ctx, f);
    if (fwd.ok() && (always || ((*fwd)->graph_us() > 0 && (*fwd)->graph_us() < 0.9f * conv->graph_us()))) {
      std::shared_ptr<CudnnConv> as_forward = *fwd;
      const int64_t wbytes = AlignUp(Product(f.w) * es);
      op.workspace_bytes = wbytes + as_forward->workspace_bytes();
      const int64_t k = in[1], c = channels, kh = g.kernel[0], kw = g.kernel[1];
      const bool cl = layout.last;
      op.launch = [as_forward, name, wbytes, es, k, c, kh, kw, cl](const LaunchArgs& a) -> absl::Status {
        if (a.outputs[0] == nullptr) return absl::OkStatus();
        NvtxRange range(name);
        char* ws = static_cast<char*>(a.workspace);
        OTTR_CUDA_RETURN_IF_ERROR(kernels::FlipFilterForDataGrad(es, k, c, kh, kw, cl, a.inputs[1], ws, a.stream));
        return as_forward->Run(a.inputs[0], ws, a.outputs[0], ws + wbytes, a.stream);
      };
      return op;
    }
  }
  op.workspace_bytes = st.bytes + conv->workspace_bytes();
  // Inputs: (In, W) for ConvTranspose (X, W, B), (dY, W) for ConvGradInput.
  op.launch = [conv, st, name, bias, bias_input, batch, channels, spatial, dtype](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range(name);
    char* ws = static_cast<char*>(a.workspace);
    void* target = st.used ? static_cast<void*>(ws) : a.outputs[0];
    OTTR_RETURN_IF_ERROR(conv->Run(a.inputs[1], a.inputs[0], target, ws + st.bytes, a.stream));
    if (st.used) OTTR_CUDA_RETURN_IF_ERROR(kernels::Pad(st.pad, ws, nullptr, a.outputs[0], a.stream));
    if (bias) {
      OTTR_CUDA_RETURN_IF_ERROR(kernels::AddChannelBias(dtype, batch, channels, spatial, a.inputs[bias_input],
                                                        a.outputs[0], a.stream));
    }
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileConvTranspose(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const std::vector<int64_t> x = ctx.input_dims(0), w = ctx.input_dims(1);
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, &w, WindowOp::kConvTranspose));
  const int64_t group = ctx.node().GetInt("group", 1);
  const int64_t c = x[1];
  if (group < 1 || c % group != 0 || w[0] != c) {
    return ctx.Error(absl::StrCat("X ", DimsString(x), " and W ", DimsString(w), " do not agree with group ", group,
                                  " (need W[0] = C divisible by group)"));
  }
  const int64_t m = w[1] * group;
  OTTR_RETURN_IF_ERROR(CheckBias(ctx, m));
  return CompileBackwardData(ctx, "ConvTranspose", t, x, w, m, g, group, 2, Channels(ctx));
}

// The `input_shape` attribute of ConvGradInput / AveragePoolGrad: X's dims (batch = dY's).
absl::StatusOr<std::vector<int64_t>> ReadInputShape(const OpCompileContext& ctx, const std::vector<int64_t>& dy) {
  std::vector<int64_t> shape = ctx.node().GetInts("input_shape");
  if (shape.size() != dy.size() || shape.size() < 3) {
    return ctx.Error(absl::StrCat("attribute 'input_shape' = ", DimsString(shape), " must have the rank of dY ",
                                  DimsString(dy), " (at least 3)"));
  }
  for (int64_t d : shape) {
    if (d < 0) return ctx.Error(absl::StrCat("attribute 'input_shape' = ", DimsString(shape), " has a negative dim"));
  }
  if (shape[0] != dy[0]) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy), " and input_shape ", DimsString(shape),
                                  " disagree on the batch"));
  }
  return shape;
}

absl::Status CheckDy(const OpCompileContext& ctx, const std::vector<int64_t>& dy, const std::vector<int64_t>& expected) {
  if (dy == expected) return absl::OkStatus();
  return ctx.Error(absl::StrCat("dY ", DimsString(dy), " does not match the forward's output ", DimsString(expected)));
}

// ottr::ConvGradInput(dY, W) {Conv's attrs, input_shape} -> dX = BackwardData(W, dY).
absl::StatusOr<CompiledOp> CompileConvGradInput(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const Channels layout(ctx);
  const std::vector<int64_t> dy = layout.First(ctx.input_dims(0)), w = layout.First(ctx.input_dims(1));
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x, ReadInputShape(ctx, dy));
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, &w, WindowOp::kConv));
  const int64_t group = ctx.node().GetInt("group", 1);
  OTTR_RETURN_IF_ERROR(CheckGroups(ctx, x, w, group));
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WithBatch(x[0], w[0], g.positions)));
  return CompileBackwardData(ctx, "ConvGradInput", t, dy, w, x[1], g, group, -1, layout);
}

// ottr::ConvGradFilter(dY, X) {Conv's attrs, kernel_shape} -> dW = BackwardFilter(X, dY).
absl::StatusOr<CompiledOp> CompileConvGradFilter(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const Channels layout(ctx);
  const std::vector<int64_t> dy = layout.First(ctx.input_dims(0)), x = layout.First(ctx.input_dims(1));
  if (ctx.node().GetInts("kernel_shape").empty()) return ctx.Error("attribute 'kernel_shape' is required");
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kConv));
  OTTR_RETURN_IF_ERROR(layout.Supports(ctx, g, Symmetric(g)));
  const int64_t group = ctx.node().GetInt("group", 1);
  if (dy.size() != x.size()) {
    return ctx.Error(absl::StrCat("dY ", DimsString(dy), " must have the rank of X ", DimsString(x)));
  }
  const int64_t c = x[1], m = dy[1];
  if (group < 1 || c % group != 0 || m % group != 0) {
    return ctx.Error(absl::StrCat("X ", DimsString(x), " and dY ", DimsString(dy), ": channels not divisible by group ",
                                  group));
  }
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WithBatch(x[0], m, g.positions)));
  const std::vector<int64_t> dw = WithBatch(m, c / group, g.kernel);
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, layout.Last(dw)));
  const int es = static_cast<int>(ir::DTypeSize(t));
  CompiledOp op;
  if (Product(dw) == 0) {
    op.launch = [](const LaunchArgs&) { return absl::OkStatus(); };
    return op;
  }
  if (Product(x) == 0 || Product(dy) == 0) {  // an empty batch: dW = 0
    const int64_t bytes = Product(dw) * es;
    op.launch = [bytes](const LaunchArgs& a) -> absl::Status {
      if (a.outputs[0] != nullptr) OTTR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.outputs[0], 0, bytes, a.stream));
      return absl::OkStatus();
    };
    return op;
  }
  if (auto sc = SmallConv(t, layout, x, dy, g, group)) {
    const int dtype = Code(t);
    op.workspace_bytes = kernels::SmallConvFilterGradWorkspace(*sc);
    op.launch = [sc = *sc, dtype](const LaunchArgs& a) -> absl::Status {
      if (a.outputs[0] == nullptr) return absl::OkStatus();
      NvtxRange range("ConvGradFilter");
      OTTR_CUDA_RETURN_IF_ERROR(
          kernels::SmallConvFilterGrad(dtype, sc, a.inputs[0], a.inputs[1], a.outputs[0], a.workspace, a.stream));
      return absl::OkStatus();
    };
    return op;
  }
  ConvShape s;
  s.channels_last = layout.last;
  s.kind = ConvKind::kBackwardFilter;
  s.dtype = t;
  s.x = x;
  s.w = dw;
  s.y = dy;
  s.stride = g.stride;
  s.dilation = g.dilation;
  s.group = group;
  Staging st;
  if (Symmetric(g)) {
    s.pad = g.pad_begin;
  } else {
    std::vector<int64_t> padded(g.nd);
    for (int64_t d = 0; d < g.nd; ++d) padded[d] = g.image[d] + g.pad_begin[d] + g.pad_end[d];
    s.x = WithBatch(x[0], x[1], padded);
    s.pad.assign(g.nd, 0);
    st.used = true;
    st.pad = SpatialPad(x, g.pad_begin, g.pad_end, es);
    st.bytes = AlignUp(Product(s.x) * es);
  }
  OTTR_ASSIGN_OR_RETURN(std::shared_ptr<CudnnConv> conv, CudnnConv::Create(ctx, s));
  op.workspace_bytes = st.bytes + conv->workspace_bytes();
  op.launch = [conv, st](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("ConvGradFilter");
    char* ws = static_cast<char*>(a.workspace);
    const void* xin = a.inputs[1];
    if (st.used) {
      OTTR_CUDA_RETURN_IF_ERROR(kernels::Pad(st.pad, a.inputs[1], nullptr, ws, a.stream));
      xin = ws;
    }
    return conv->Run(xin, a.inputs[0], a.outputs[0], ws + st.bytes, a.stream);
  };
  return op;
}

// ---------------------------------------------------------------------------------------------
// Pooling.

absl::StatusOr<kernels::PoolGeometry> ToPoolGeometry(const OpCompileContext& ctx, const std::vector<int64_t>& x,
                                                     const Geometry& g) {
  if (g.nd > kernels::kPoolMaxDims) {
    return ctx.Unsupported(absl::StrCat("pooling over ", g.nd, " spatial axes (at most ", kernels::kPoolMaxDims, ")"));
  }
  kernels::PoolGeometry p;
  p.nd = static_cast<int>(g.nd);
  p.planes = x[0] * x[1];
  for (int64_t d = 0; d < g.nd; ++d) {
    p.image[d] = g.image[d];
    p.positions[d] = g.positions[d];
    p.kernel[d] = g.kernel[d];
    p.stride[d] = g.stride[d];
    p.dilation[d] = g.dilation[d];
    p.pad_begin[d] = g.pad_begin[d];
    p.pad_end[d] = g.pad_end[d];
  }
  return p;
}

absl::Status CheckFloat(const OpCompileContext& ctx, DType t) {
  if (ir::IsFloat(t)) return absl::OkStatus();
  return ctx.Unsupported(
      absl::StrCat("element type ", ir::DTypeName(t), " is not supported (float16, bfloat16, float, double)"));
}

absl::StatusOr<int64_t> ReadP(const OpCompileContext& ctx) {
  const int64_t p = ctx.node().GetInt("p", 2);
  if (p < 1) return ctx.Error(absl::StrCat("attribute 'p' = ", p, " must be >= 1"));
  return p;
}

absl::StatusOr<CompiledOp> CompileMaxPool(OpCompileContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  if (!kernels::MaxPoolSupported(Code(t))) {
    return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), " is not supported"));
  }
  const Channels layout(ctx);
  const std::vector<int64_t> x = layout.First(ctx.input_dims(0));
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
  OTTR_RETURN_IF_ERROR(layout.Supports(ctx, g, true));
  const int64_t storage_order = ctx.node().GetInt("storage_order", 0);
  if (storage_order != 0 && storage_order != 1) {
    return ctx.Error(absl::StrCat("attribute 'storage_order' = ", storage_order, " must be 0 or 1"));
  }
  const std::vector<int64_t> y = WithBatch(x[0], x[1], g.positions);
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, layout.Last(y)));
  if (ctx.num_outputs() > 1) OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 1, y));
  OTTR_ASSIGN_OR_RETURN(kernels::PoolGeometry pg, ToPoolGeometry(ctx, x, g));
  const int dtype = Code(t);
  const bool column_major = storage_order == 1;
  CompiledOp op;
  if (layout.last) {
    if (ctx.num_outputs() > 1) return ctx.Error("a channels-last MaxPool has no Indices output");
    pg.planes = x[0];
    const int64_t channels = x[1];
    op.launch = [pg, dtype, channels](const LaunchArgs& a) -> absl::Status {
      if (a.outputs[0] == nullptr) return absl::OkStatus();
      NvtxRange range("MaxPool");
      OTTR_CUDA_RETURN_IF_ERROR(kernels::MaxPoolChannelsLast(dtype, pg, channels, a.inputs[0], a.outputs[0], a.stream));
      return absl::OkStatus();
    };
    return op;
  }
  op.launch = [pg, dtype, column_major](const LaunchArgs& a) -> absl::Status {
    int64_t* indices = a.outputs.size() > 1 ? static_cast<int64_t*>(a.outputs[1]) : nullptr;
    if (a.outputs[0] == nullptr && indices == nullptr) return absl::OkStatus();
    NvtxRange range("MaxPool");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::MaxPool(dtype, pg, column_major, a.inputs[0], a.outputs[0], indices, a.stream));
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileAverageOrLpPool(OpCompileContext& ctx, bool lp) {
  const DType t = ctx.input_type(0).dtype;
  OTTR_RETURN_IF_ERROR(CheckFloat(ctx, t));
  const std::vector<int64_t> x = ctx.input_dims(0);
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
  const bool count_include_pad = ctx.node().GetInt("count_include_pad", 0) != 0;
  int64_t p = 2;
  if (lp) {
    OTTR_ASSIGN_OR_RETURN(p, ReadP(ctx));
  }
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, WithBatch(x[0], x[1], g.positions)));
  OTTR_ASSIGN_OR_RETURN(kernels::PoolGeometry pg, ToPoolGeometry(ctx, x, g));
  const int dtype = Code(t);
  CompiledOp op;
  op.launch = [pg, dtype, lp, p, count_include_pad](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range(lp ? "LpPool" : "AveragePool");
    if (lp) {
      OTTR_CUDA_RETURN_IF_ERROR(kernels::LpPool(dtype, pg, p, a.inputs[0], a.outputs[0], a.stream));
    } else {
      OTTR_CUDA_RETURN_IF_ERROR(
          kernels::AveragePool(dtype, pg, count_include_pad, a.inputs[0], a.outputs[0], a.stream));
    }
    return absl::OkStatus();
  };
  return op;
}

absl::StatusOr<CompiledOp> CompileGlobalPool(OpCompileContext& ctx, kernels::GlobalPoolKind kind) {
  const DType t = ctx.input_type(0).dtype;
  OTTR_RETURN_IF_ERROR(CheckFloat(ctx, t));
  const std::vector<int64_t> x = ctx.input_dims(0);
  if (x.size() < 2) {
    return ctx.Error(absl::StrCat("input X ", DimsString(x), " must have rank >= 2 (N x C x ...)"));
  }
  int64_t p = 2;
  if (kind == kernels::GlobalPoolKind::kLp) {
    OTTR_ASSIGN_OR_RETURN(p, ReadP(ctx));
  }
  std::vector<int64_t> y(x.size(), 1);
  y[0] = x[0];
  y[1] = x[1];
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, y));
  const int64_t planes = x[0] * x[1];
  const int64_t size = planes == 0 ? 0 : Product(x) / planes;
  const int dtype = Code(t);
  CompiledOp op;
  op.launch = [dtype, kind, p, planes, size](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("GlobalPool");
    OTTR_CUDA_RETURN_IF_ERROR(kernels::GlobalPool(dtype, kind, p, planes, size, a.inputs[0], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::MaxPoolGrad(dY, X) {MaxPool's attrs} -> dX.
absl::StatusOr<CompiledOp> CompileMaxPoolGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const Channels layout(ctx);
  const std::vector<int64_t> dy = layout.First(ctx.input_dims(0)), x = layout.First(ctx.input_dims(1));
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
  OTTR_RETURN_IF_ERROR(layout.Supports(ctx, g, true));
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WithBatch(x[0], x[1], g.positions)));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, layout.Last(x)));
  OTTR_ASSIGN_OR_RETURN(kernels::PoolGeometry pg, ToPoolGeometry(ctx, x, g));
  const int dtype = Code(t);
  CompiledOp op;
  const bool relu_mask = ctx.node().GetInt("relu_mask", 0) != 0;
  if (layout.last) {
    pg.planes = x[0];
    const int64_t channels = x[1];
    op.launch = [pg, dtype, channels, relu_mask](const LaunchArgs& a) -> absl::Status {
      if (a.outputs[0] == nullptr) return absl::OkStatus();
      NvtxRange range("MaxPoolGrad");
      OTTR_CUDA_RETURN_IF_ERROR(kernels::MaxPoolGradChannelsLast(dtype, pg, channels, a.inputs[0], a.inputs[1],
                                                                 a.outputs[0], relu_mask, a.stream));
      return absl::OkStatus();
    };
    return op;
  }
  op.launch = [pg, dtype, relu_mask](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("MaxPoolGrad");
    OTTR_CUDA_RETURN_IF_ERROR(
        kernels::MaxPoolGrad(dtype, pg, a.inputs[0], a.inputs[1], a.outputs[0], relu_mask, a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::AveragePoolGrad(dY) {AveragePool's attrs, input_shape} -> dX.
absl::StatusOr<CompiledOp> CompileAveragePoolGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const std::vector<int64_t> dy = ctx.input_dims(0);
  OTTR_ASSIGN_OR_RETURN(std::vector<int64_t> x, ReadInputShape(ctx, dy));
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, WithBatch(x[0], x[1], g.positions)));
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  const bool count_include_pad = ctx.node().GetInt("count_include_pad", 0) != 0;
  OTTR_ASSIGN_OR_RETURN(kernels::PoolGeometry pg, ToPoolGeometry(ctx, x, g));
  const int dtype = Code(t);
  CompiledOp op;
  op.launch = [pg, dtype, count_include_pad](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("AveragePoolGrad");
    OTTR_CUDA_RETURN_IF_ERROR(
        kernels::AveragePoolGrad(dtype, pg, count_include_pad, a.inputs[0], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

// ottr::LpPoolGrad(dY, X, Y) {LpPool's attrs} -> dX.
absl::StatusOr<CompiledOp> CompileLpPoolGrad(OpCompileContext& ctx) {
  OTTR_RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const DType t = ctx.input_type(0).dtype;
  const std::vector<int64_t> dy = ctx.input_dims(0), x = ctx.input_dims(1), y = ctx.input_dims(2);
  OTTR_ASSIGN_OR_RETURN(int64_t p, ReadP(ctx));
  OTTR_ASSIGN_OR_RETURN(Geometry g, ResolveGeometry(ctx, x, nullptr, WindowOp::kPool));
  const std::vector<int64_t> y_dims = WithBatch(x[0], x[1], g.positions);
  OTTR_RETURN_IF_ERROR(CheckDy(ctx, dy, y_dims));
  if (y != y_dims) {
    return ctx.Error(absl::StrCat("Y ", DimsString(y), " does not match the forward's output ", DimsString(y_dims)));
  }
  OTTR_RETURN_IF_ERROR(CheckOutputDims(ctx, 0, x));
  OTTR_ASSIGN_OR_RETURN(kernels::PoolGeometry pg, ToPoolGeometry(ctx, x, g));
  const int dtype = Code(t);
  CompiledOp op;
  op.launch = [pg, dtype, p](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr) return absl::OkStatus();
    NvtxRange range("LpPoolGrad");
    OTTR_CUDA_RETURN_IF_ERROR(
        kernels::LpPoolGrad(dtype, pg, p, a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0], a.stream));
    return absl::OkStatus();
  };
  return op;
}

}  // namespace

void RegisterConvPoolCudaOps(CudaOpRegistry& r) {
  using kernels::GlobalPoolKind;
  r.Register("", "Conv", CompileConv);
  r.Register("", "ConvTranspose", CompileConvTranspose);
  r.Register("", "MaxPool", CompileMaxPool);
  r.Register("", "AveragePool", [](OpCompileContext& ctx) { return CompileAverageOrLpPool(ctx, false); });
  r.Register("", "LpPool", [](OpCompileContext& ctx) { return CompileAverageOrLpPool(ctx, true); });
  r.Register("", "GlobalAveragePool",
             [](OpCompileContext& ctx) { return CompileGlobalPool(ctx, GlobalPoolKind::kAverage); });
  r.Register("", "GlobalMaxPool", [](OpCompileContext& ctx) { return CompileGlobalPool(ctx, GlobalPoolKind::kMax); });
  r.Register("", "GlobalLpPool", [](OpCompileContext& ctx) { return CompileGlobalPool(ctx, GlobalPoolKind::kLp); });
  const std::string ottr(ir::kOttrDomain);
  r.Register(ottr, "Conv", CompileConv);  // channels-last forms (ir/ops/channels_last.h)
  r.Register(ottr, "MaxPool", CompileMaxPool);
  r.Register(ottr, "ConvGradInput", CompileConvGradInput);
  r.Register(ottr, "ConvGradFilter", CompileConvGradFilter);
  r.Register(ottr, "MaxPoolGrad", CompileMaxPoolGrad);
  r.Register(ottr, "AveragePoolGrad", CompileAveragePoolGrad);
  r.Register(ottr, "LpPoolGrad", CompileLpPoolGrad);
}

}  // namespace ottr::cuda
