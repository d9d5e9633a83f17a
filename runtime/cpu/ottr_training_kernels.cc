// CPU kernels of the ottr-domain training ops (see ir/ops/ottr_training_ops.cc for the math).
// The optimizer kernels follow PyTorch's single-tensor implementations operation by operation, in
// float32 with the scalar factors computed in double as Python does, so three steps match
// PyTorch to about 1e-6 relative.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ir/fused_gemm.h"
#include "ir/optimizer_update.h"
#include "runtime/cpu/elementwise_common.h"
#include "runtime/cpu/gemm.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_kernel_util.h"

namespace ottr::runtime::cpu {
namespace {

// Reads a label as int64 from an int32 or int64 tensor.
int64_t Label(const Tensor& labels, int64_t i) {
  return labels.dtype() == DType::kInt32 ? labels.data<int32_t>()[i] : labels.data<int64_t>()[i];
}

absl::Status CheckLabels(KernelContext& ctx, const Tensor& labels, int64_t classes, int64_t ignore) {
  for (int64_t i = 0; i < labels.num_elements(); ++i) {
    const int64_t y = Label(labels, i);
    if (y != ignore && (y < 0 || y >= classes)) {
      return ctx.Error(absl::StrCat("label ", y, " at position ", i, " is outside [0, ", classes,
                                    ") (ignore_index ", ignore, ")"));
    }
  }
  return absl::OkStatus();
}

// The SoftmaxCrossEntropy rows of `x` [n, c]: writes log_prob (rounded to T) to `lp` and
// returns the mean loss over the rows whose label is not `ignore` (labels already checked).
template <typename T>
T SceRows(const T* xs, const Tensor& labels, int64_t n, int64_t c, int64_t ignore, double eps, T* lp) {
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T* x = xs + i * c;
    T* out = lp + i * c;
    double mx = -INFINITY;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(x[j]));
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(x[j]) - mx);
    const double lse = mx + std::log(sum);
    double all = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      out[j] = static_cast<T>(static_cast<double>(x[j]) - lse);
      all += static_cast<double>(out[j]);
    }
    const int64_t y = Label(labels, i);
    if (y == ignore) continue;
    total += (1.0 - eps) * -static_cast<double>(out[y]) + eps / c * -all;
    ++count;
  }
  return static_cast<T>(total / static_cast<double>(count));
}

// The SoftmaxCrossEntropyGrad of log_prob `lp` [n, c] into `dx` (zero rows for ignored labels).
// The labels that are not `ignore` (the mean's divisor; ottr::CountLabels).
int64_t CountNotIgnored(const Tensor& labels, int64_t ignore) {
  int64_t count = 0;
  for (int64_t i = 0; i < labels.num_elements(); ++i) count += Label(labels, i) != ignore;
  return count;
}

template <typename T>
void SceGradRows(double dloss, const T* lp, const Tensor& labels, int64_t n, int64_t c, int64_t ignore, double eps,
                 T* dx) {
  const int64_t count = CountNotIgnored(labels, ignore);
  const double scale = dloss / static_cast<double>(count);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = Label(labels, i);
    T* d = dx + i * c;
    if (y == ignore) {
      std::fill(d, d + c, T(0));
      continue;
    }
    const T* l = lp + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const double target = (j == y ? 1.0 - eps : 0.0) + eps / c;
      d[j] = static_cast<T>((std::exp(static_cast<double>(l[j])) - target) * scale);
    }
  }
}

template <typename T>
absl::Status SceForward(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const int64_t ignore = ctx.attr_int("ignore_index", -100);
  const double eps = ctx.attr_float("label_smoothing", 0.0f);
  if (labels.num_elements() != n) return ctx.Error("labels and logits disagree on the batch size");
  absl::Status s = CheckLabels(ctx, labels, c, ignore);
  if (!s.ok()) return s;
  Tensor& lp = ctx.AllocateOutput(1, logits.dtype(), logits.dims());
  const T loss = SceRows<T>(logits.data<T>(), labels, n, c, ignore, eps, lp.data<T>());
  ctx.AllocateOutput(0, logits.dtype(), {}).data<T>()[0] = loss;
  return absl::OkStatus();
}

template <typename T>
absl::Status SceBackward(KernelContext& ctx) {
  const double dloss = ctx.input(0).GetAsDouble(0);
  const Tensor& lp = ctx.input(1);
  const Tensor& labels = ctx.input(2);
  const int64_t n = lp.dim(0), c = lp.dim(1);
  const int64_t ignore = ctx.attr_int("ignore_index", -100);
  const double eps = ctx.attr_float("label_smoothing", 0.0f);
  absl::Status s = CheckLabels(ctx, labels, c, ignore);
  if (!s.ok()) return s;
  Tensor& dx = ctx.AllocateOutput(0, lp.dtype(), lp.dims());
  SceGradRows<T>(dloss, lp.data<T>(), labels, n, c, ignore, eps, dx.data<T>());
  return absl::OkStatus();
}

// ottr::SoftmaxCrossEntropyWithGrad: the two above through a local log_prob, then dlogits
// rounded to grad_type (the composition SoftmaxCrossEntropy -> SoftmaxCrossEntropyGrad -> Cast).
// {classes = K}: the same over logits[:, :K], dlogits as wide as the logits with zeros past K.
template <typename T>
absl::Status SceWithGrad(KernelContext& ctx) {
  const Tensor& wide = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  const double dloss = ctx.input(2).GetAsDouble(0);
  const int64_t n = wide.dim(0), ld = wide.dim(1);
  const int64_t classes = ctx.attr_int("classes", 0);
  if (classes < 0 || classes > ld) {
    return ctx.Error(absl::StrCat("classes ", classes, " is outside [1, ", ld, "] (the logits' columns)"));
  }
  const int64_t c = classes > 0 ? classes : ld;
  Tensor narrow;
  if (c != ld) {
    narrow = Tensor(wide.dtype(), {n, c});
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(narrow.data<T>() + i * c, wide.data<T>() + i * ld, c * sizeof(T));
    }
  }
  const Tensor& logits = c != ld ? narrow : wide;
  const int64_t ignore = ctx.attr_int("ignore_index", -100);
  const double eps = ctx.attr_float("label_smoothing", 0.0f);
  if (labels.num_elements() != n) return ctx.Error("labels and logits disagree on the batch size");
  absl::Status s = CheckLabels(ctx, labels, c, ignore);
  if (!s.ok()) return s;
  if (ctx.has_input(3)) {  // the count made before (count-labels-early) is this one
    const int64_t given = ctx.input(3).GetAsInt64(0), count = CountNotIgnored(labels, ignore);
    if (given != count) {
      return ctx.Error(absl::StrCat("count (input 3) is ", given, " but ", count, " labels are not ignore_index ",
                                    ignore));
    }
  }
  Tensor lp(logits.dtype(), logits.dims());
  const T loss = SceRows<T>(logits.data<T>(), labels, n, c, ignore, eps, lp.data<T>());
  ctx.AllocateOutput(0, logits.dtype(), {}).data<T>()[0] = loss;
  Tensor d(logits.dtype(), logits.dims());
  SceGradRows<T>(dloss, lp.data<T>(), labels, n, c, ignore, eps, d.data<T>());
  DType g = logits.dtype();
  if (ctx.attr_int("grad_type", 0) != 0) {
    absl::StatusOr<DType> o = ir::DTypeFromOnnx(static_cast<int32_t>(ctx.attr_int("grad_type", 0)));
    if (!o.ok()) return ctx.Error(absl::StrCat("grad_type: ", o.status().message()));
    g = *o;
  }
  OTTR_ASSIGN_OR_RETURN(Tensor out, ew::CastTensor(d, g));
  Tensor& dx = ctx.AllocateOutput(1, g, wide.dims());
  if (c == ld) {
    std::memcpy(dx.raw_data(), out.raw_data(), out.nbytes());
  } else {
    const size_t es = ir::DTypeSize(g);
    std::memset(dx.raw_data(), 0, dx.nbytes());  // +0 in every float type
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(static_cast<char*>(dx.raw_data()) + i * ld * es, static_cast<const char*>(out.raw_data()) + i * c * es,
                  c * es);
    }
  }
  if (ctx.num_outputs() > 2) {
    // dbias = ReduceSum(dlogits, [0]) (fuse-sce-bgrad): the rows in order, in double, rounded
    // once to the gradient's type, as the CPU ReduceSum does.
    if (g != DType::kFloat32 && g != DType::kFloat64) {
      return ctx.Unsupported(absl::StrCat("the column sums of ", ir::DTypeName(g), " dlogits"));
    }
    OTTR_ASSIGN_OR_RETURN(Tensor wide_d, ew::CastTensor(dx, DType::kFloat64));
    const std::vector<double> sums = ColumnSumsInDouble(wide_d.data<double>(), n, ld, [](double v) { return v; });
    Tensor& db = ctx.AllocateOutput(2, g, {ld});
    for (int64_t j = 0; j < ld; ++j) {
      if (g == DType::kFloat32) {
        db.data<float>()[j] = static_cast<float>(sums[j]);
      } else {
        db.data<double>()[j] = sums[j];
      }
    }
  }
  return absl::OkStatus();
}

// ottr::LinearSoftmaxCrossEntropyWithGrad (fuse-linear-sce): the three nodes it replaces, with
// their arithmetic: the FusedGemm bias (or none) epilogue (bias rows, then GemmGeneric with beta
// 1), SoftmaxCrossEntropyWithGrad {classes} (SceRows, SceGradRows of the first `classes` columns,
// zeros past them), the FusedGemm drelu (or none, or ONNX Gemm) of dlogits (GemmGeneric, then zero
// where the mask bit is clear), and with relu_x ReluGrad(dx, x) / ReluGradBiasGrad's column sums
// in double. Same bits as the unfused step.
absl::Status LinearSceWithGrad(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& labels = ctx.input(3);
  const bool tb = ctx.attr_int("transB", 0) != 0;
  if (x.dtype() != DType::kFloat32 || w.dtype() != DType::kFloat32) {
    return ctx.Unsupported(absl::StrCat("x ", ir::DTypeName(x.dtype()), " and w ", ir::DTypeName(w.dtype()),
                                        " (float32 only)"));
  }
  if (x.rank() != 2 || w.rank() != 2) return ctx.Error("x and w must be matrices");
  const int64_t n = x.dim(0), k = x.dim(1);
  const int64_t c = tb ? w.dim(0) : w.dim(1);  // the GEMM's columns (padded ones included)
  if ((tb ? w.dim(1) : w.dim(0)) != k) {
    return ctx.Error(absl::StrCat("x [", n, ", ", k, "] and w [", w.dim(0), ", ", w.dim(1), "] (transB = ", tb ? 1 : 0,
                                  ") disagree on K"));
  }
  const int64_t classes_attr = ctx.attr_int("classes", 0);
  if (classes_attr < 0 || classes_attr > c) {
    return ctx.Error(absl::StrCat("classes ", classes_attr, " is outside [0, ", c, "] (the weight's classes)"));
  }
  const int64_t classes = classes_attr > 0 ? classes_attr : c;
  if (labels.num_elements() != n) return ctx.Error("labels and x disagree on the batch size");
  const bool has_bias = ctx.has_input(2);
  if (has_bias && ctx.input(2).num_elements() != c) {
    return ctx.Error(absl::StrCat("the bias has ", ctx.input(2).num_elements(), " elements for ", c, " classes"));
  }
  const bool has_mask = ctx.has_input(5);
  const bool relu_x = ctx.attr_int("relu_x", 0) != 0;
  if (has_mask && relu_x) return ctx.Error("relu_x = 1 and a ReLU mask: dx goes through one activation");
  const int64_t mask_row = ir::ReluMaskRowBytes(k);
  if (has_mask && ctx.input(5).num_elements() != n * mask_row) {
    return ctx.Error(absl::StrCat("the ReLU mask has ", ctx.input(5).num_elements(), " bytes, expected ", n, " x ",
                                  mask_row));
  }
  const int64_t ignore = ctx.attr_int("ignore_index", -100);
  const double eps = ctx.attr_float("label_smoothing", 0.0f);
  absl::Status s = CheckLabels(ctx, labels, classes, ignore);
  if (!s.ok()) return s;
  Tensor logits(DType::kFloat32, {n, c});
  if (has_bias) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(logits.data<float>() + i * c, ctx.input(2).data<float>(), c * 4);
  }
  if (n > 0 && c > 0) {
    GemmGeneric<float>(false, tb, n, c, k, 1.0, x.data<float>(), k, w.data<float>(), w.dim(1), has_bias ? 1.0 : 0.0,
                       logits.data<float>(), c);
  }
  // The loss of the first `classes` columns (SoftmaxCrossEntropyWithGrad {classes}).
  Tensor narrow(DType::kFloat32, {n, classes});
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(narrow.data<float>() + i * classes, logits.data<float>() + i * c, classes * 4);
  }
  Tensor lp(DType::kFloat32, {n, classes});
  const float loss = SceRows<float>(narrow.data<float>(), labels, n, classes, ignore, eps, lp.data<float>());
  ctx.AllocateOutput(0, DType::kFloat32, {}).data<float>()[0] = loss;
  Tensor dn(DType::kFloat32, {n, classes});
  SceGradRows<float>(ctx.input(4).GetAsDouble(0), lp.data<float>(), labels, n, classes, ignore, eps, dn.data<float>());
  Tensor& d = ctx.AllocateOutput(1, DType::kFloat32, {n, c});
  std::memset(d.raw_data(), 0, d.nbytes());
  for (int64_t i = 0; i < n; ++i) std::memcpy(d.data<float>() + i * c, dn.data<float>() + i * classes, classes * 4);
  Tensor& dx = ctx.AllocateOutput(2, DType::kFloat32, {n, k});
  float* dp = dx.data<float>();
  if (n > 0 && k > 0) GemmGeneric<float>(false, !tb, n, k, c, 1.0, d.data<float>(), c, w.data<float>(), w.dim(1), 0.0, dp, k);
  if (has_mask) {
    const uint8_t* mp = ctx.input(5).data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        if (!((mp[i * mask_row + j / 8] >> (j % 8)) & 1u)) dp[i * k + j] = 0.0f;
      }
    }
  }
  if (relu_x) {  // ReluGrad(dx, x): dx where x > 0, else 0 (NaN x included)
    const float* xp = x.data<float>();
    for (int64_t i = 0; i < n * k; ++i) dp[i] = xp[i] > 0.0f ? dp[i] : 0.0f;
  }
  if (ctx.num_outputs() > 3) {  // ReluGradBiasGrad's bias gradient: the rows in order, in double
    const std::vector<double> acc = ColumnSumsInDouble(dp, n, k, [](float v) { return static_cast<double>(v); });
    float* db = ctx.AllocateOutput(3, DType::kFloat32, {k}).data<float>();
    for (int64_t j = 0; j < k; ++j) db[j] = static_cast<float>(acc[j]);
  }
  return absl::OkStatus();
}

// ottr::LinearSceReluGrad (ir/ops/fused_ops.cc): the nodes it replaces, in their order and with
// their arithmetic: the classifier's logits as the bias FusedGemm computes them (the bias, then
// GemmGeneric's products added), the loss and dlogits of SoftmaxCrossEntropyWithGrad {classes}
// given the count (checked against the labels), then LinearReluGrad's sums: the same bits.
absl::Status LinearSceReluGrad(KernelContext& ctx) {
  const Tensor& y = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& labels = ctx.input(3);
  if (y.dtype() != DType::kFloat32 || w.dtype() != DType::kFloat32 || y.rank() != 2 || w.rank() != 2 ||
      y.dim(1) != w.dim(1)) {
    return ctx.Error(absl::StrCat("Y ", ir::DTypeName(y.dtype()), " rank ", y.rank(), " and W ", ir::DTypeName(w.dtype()),
                                  " rank ", w.rank(), " must be f32 [R, N] and [K, N] with the same N"));
  }
  const int64_t n = y.dim(0), cols = y.dim(1), k = w.dim(0);
  const bool has_bias = ctx.has_input(2);
  if (has_bias && (ctx.input(2).dtype() != DType::kFloat32 || ctx.input(2).num_elements() != k)) {
    return ctx.Error(absl::StrCat("the bias must be f32 with ", k, " elements"));
  }
  const int64_t classes_attr = ctx.attr_int("classes", 0), rows_attr = ctx.attr_int("weight_rows", 0);
  if (classes_attr < 0 || classes_attr > k || rows_attr < 0 || rows_attr > k) {
    return ctx.Error(absl::StrCat("classes = ", classes_attr, " and weight_rows = ", rows_attr, " must be 0 to K = ", k));
  }
  const int64_t c = classes_attr > 0 ? classes_attr : k;
  const int64_t m = rows_attr > 0 ? rows_attr : k;
  if (labels.num_elements() != n) return ctx.Error("labels and Y disagree on the batch size");
  const int64_t ignore = ctx.attr_int("ignore_index", -100);
  const double eps = ctx.attr_float("label_smoothing", 0.0f);
  absl::Status s = CheckLabels(ctx, labels, c, ignore);
  if (!s.ok()) return s;
  const int64_t given = ctx.input(5).GetAsInt64(0), count = CountNotIgnored(labels, ignore);
  if (given != count) {
    return ctx.Error(absl::StrCat("count (input 5) is ", given, " but ", count, " labels are not ignore_index ", ignore));
  }
  std::vector<float> logits(n * k, 0.0f);
  if (has_bias) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(logits.data() + i * k, ctx.input(2).data<float>(), k * 4);
  }
  if (n > 0) {
    GemmGeneric<float>(false, true, n, k, cols, 1.0, y.data<float>(), cols, w.data<float>(), cols,
                       has_bias ? 1.0 : 0.0, logits.data(), k);
  }
  std::vector<float> narrow(n * c);
  for (int64_t i = 0; i < n; ++i) std::memcpy(narrow.data() + i * c, logits.data() + i * k, c * 4);
  std::vector<float> lp(n * c), dn(n * c);
  const float loss = SceRows<float>(narrow.data(), labels, n, c, ignore, eps, lp.data());
  SceGradRows<float>(ctx.input(4).GetAsDouble(0), lp.data(), labels, n, c, ignore, eps, dn.data());
  std::vector<float> dz(n * k, 0.0f);
  for (int64_t i = 0; i < n; ++i) std::memcpy(dz.data() + i * k, dn.data() + i * c, c * 4);
  // dX may take Y's buffer: the logits above and LinearReluGradRows' weight gradient read Y first,
  // and its dX loop reads each element of Y before it writes the element of dX in its place.
  ctx.AllocateOutput(0, DType::kFloat32, {}).data<float>()[0] = loss;
  float* dx = ctx.AllocateOutput(1, DType::kFloat32, {n, cols}).data<float>();
  float* db = ctx.AllocateOutput(2, DType::kFloat32, {cols}).data<float>();
  float* dw = ctx.AllocateOutput(3, DType::kFloat32, {m, cols}).data<float>();
  float* dbz = ctx.AllocateOutput(4, DType::kFloat32, {m}).data<float>();
  LinearReluGradRows(dz.data(), w.data<float>(), y.data<float>(), n, cols, k, m, dx, db, dw, dbz);
  return absl::OkStatus();
}

template <template <typename> class F>
absl::Status DispatchFloat(KernelContext& ctx, DType t) {
  if (t == DType::kFloat32) return F<float>::Run(ctx);
  if (t == DType::kFloat64) return F<double>::Run(ctx);
  return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t)));
}
template <typename T> struct SceForwardOp { static absl::Status Run(KernelContext& c) { return SceForward<T>(c); } };
template <typename T> struct SceBackwardOp { static absl::Status Run(KernelContext& c) { return SceBackward<T>(c); } };
template <typename T> struct SceWithGradOp { static absl::Status Run(KernelContext& c) { return SceWithGrad<T>(c); } };

// Input/output slots of one tensor's update: the single-tensor ops use fixed slots, the N-ary
// ops (lr, step, params.., grads.., states..) -> (params'.., states'..) one set per tensor.
struct UpdateSlots {
  int p, g, lr, step, s0, s1;  // s0/s1: state inputs (-1: none)
  int po, s0o, s1o;
  int grad_scale = -1;  // the loss scale S (-1: none): gradients are multiplied by T(1 / S)
};

// The factor a gradient is multiplied by: T(1 / S) for a loss scale S, computed in double and
// rounded once (PyTorch's GradScaler: scale.double().reciprocal().float()).
template <typename T>
T InverseScale(KernelContext& ctx, int grad_scale) {
  return grad_scale < 0 ? T(1) : static_cast<T>(1.0 / ctx.input(grad_scale).GetAsDouble(0));
}

template <typename T>
absl::Status SgdApply(KernelContext& ctx, const UpdateSlots& s) {
  const Tensor& p = ctx.input(s.p);
  const Tensor& g = ctx.input(s.g);
  const T lr = static_cast<T>(ctx.input(s.lr).GetAsDouble(0));
  const int64_t step = ctx.input(s.step).GetAsInt64(0);
  const T momentum = static_cast<T>(ctx.attr_float("momentum", 0.0f));
  const T dampening = static_cast<T>(ctx.attr_float("dampening", 0.0f));
  const bool nesterov = ctx.attr_int("nesterov", 0) != 0;
  const T wd = static_cast<T>(ctx.attr_float("weight_decay", 0.0f));
  const bool has_buf = s.s0 >= 0 && ctx.has_input(s.s0);
  if (p.dtype() != g.dtype() || p.num_elements() != g.num_elements()) {
    return ctx.Error(absl::StrCat("gradient ", g.type().ToString(), " does not match param ", p.type().ToString()));
  }
  const bool unscale = s.grad_scale >= 0;
  const T inv = InverseScale<T>(ctx, s.grad_scale);
  Tensor& out = ctx.AllocateOutput(s.po, p.dtype(), p.dims());
  Tensor* buf_out = has_buf ? &ctx.AllocateOutput(s.s0o, p.dtype(), p.dims()) : nullptr;
  for (int64_t i = 0; i < p.num_elements(); ++i) {
    const T x = p.data<T>()[i];
    T d = g.data<T>()[i];
    if (unscale) d = d * inv;
    if (wd != 0) d = d + wd * x;
    if (has_buf) {
      T b = step <= 1 ? d : momentum * ctx.input(s.s0).data<T>()[i] + (1 - dampening) * d;
      buf_out->data<T>()[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    out.data<T>()[i] = x - lr * d;
  }
  return absl::OkStatus();
}

// Adam's per-step constants of one node (attributes, lr, step), rounded to T as torch.optim.Adam
// computes them from Python floats.
template <typename T>
struct AdamConsts {
  T step_size, bc2_sqrt, decay, w1, b2, w2, wdt, eps;
  bool wd = false, decoupled = false;
};

template <typename T>
absl::StatusOr<AdamConsts<T>> ReadAdamConsts(KernelContext& ctx, int lr_input, int step_input) {
  const double lr = ctx.input(lr_input).GetAsDouble(0);
  const int64_t step = ctx.input(step_input).GetAsInt64(0);
  if (step < 1) return ctx.Error(absl::StrCat("step must be >= 1, got ", step));
  const double beta1 = ctx.attr_float("beta1", 0.9f);
  const double beta2 = ctx.attr_float("beta2", 0.999f);
  const double wd = ctx.attr_float("weight_decay", 0.0f);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  AdamConsts<T> c;
  c.step_size = static_cast<T>(lr / bc1);
  c.bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  c.decay = static_cast<T>(1.0 - lr * wd);
  c.w1 = static_cast<T>(1.0 - beta1);
  c.b2 = static_cast<T>(beta2);
  c.w2 = static_cast<T>(1.0 - beta2);
  c.wdt = static_cast<T>(wd);
  c.eps = static_cast<T>(ctx.attr_float("epsilon", 1e-8f));
  c.wd = wd != 0.0;
  c.decoupled = ctx.attr_int("decoupled", 0) != 0;
  return c;
}

// The update of `count` elements; each element is read before it is written, so po/mo/vo may be
// p/m/v. `inv` multiplies each gradient when `unscale`.
template <typename T>
void AdamElements(const AdamConsts<T>& c, int64_t count, const T* p, const T* g, const T* m, const T* v,
                  bool unscale, T inv, T* po, T* mo, T* vo) {
  for (int64_t i = 0; i < count; ++i) {
    T x = p[i];
    T d = g[i];
    if (unscale) d = d * inv;
    if (c.wd) {
      if (c.decoupled) {
        x = x * c.decay;
      } else {
        d = d + c.wdt * x;
      }
    }
    const T mi = m[i];
    const T mn = mi + c.w1 * (d - mi);  // lerp(m, g, 1 - beta1)
    const T vn = v[i] * c.b2 + c.w2 * d * d;
    const T denom = std::sqrt(vn) / c.bc2_sqrt + c.eps;
    po[i] = x - c.step_size * (mn / denom);
    mo[i] = mn;
    vo[i] = vn;
  }
}

template <typename T>
absl::Status AdamApply(KernelContext& ctx, const UpdateSlots& s) {
  const Tensor& p = ctx.input(s.p);
  const Tensor& g = ctx.input(s.g);
  const Tensor& m = ctx.input(s.s0);
  const Tensor& v = ctx.input(s.s1);
  OTTR_ASSIGN_OR_RETURN(const AdamConsts<T> c, ReadAdamConsts<T>(ctx, s.lr, s.step));
  for (const Tensor* t : {&g, &m, &v}) {
    if (t->dtype() != p.dtype() || t->num_elements() != p.num_elements()) {
      return ctx.Error(absl::StrCat("gradient/state ", t->type().ToString(), " does not match param ",
                                    p.type().ToString()));
    }
  }
  const T inv = InverseScale<T>(ctx, s.grad_scale);
  Tensor& po = ctx.AllocateOutput(s.po, p.dtype(), p.dims());
  Tensor& mo = ctx.AllocateOutput(s.s0o, m.dtype(), m.dims());
  Tensor& vo = ctx.AllocateOutput(s.s1o, v.dtype(), v.dims());
  AdamElements<T>(c, p.num_elements(), p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), s.grad_scale >= 0, inv,
                  po.data<T>(), mo.data<T>(), vo.data<T>());
  return absl::OkStatus();
}

// ottr::GemmAdamUpdate(lr, step, A [K, M], B [K, N], p.., m.., v..): the gradients as the
// unfused step makes them (the FusedGemm kernel's product, its bgrada / bgradb sums), then
// AdamUpdateN's update of each tensor: the same bits as FusedGemm + AdamUpdateN.
absl::Status GemmAdamUpdate(KernelContext& ctx) {
  const int n = (ctx.num_inputs() - 4) / 3;
  const Tensor& a = ctx.input(2);
  const Tensor& b = ctx.input(3);
  if (a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32 || a.rank() != 2 || b.rank() != 2 ||
      a.dim(0) != b.dim(0)) {
    return ctx.Error(absl::StrCat("A ", a.type().ToString(), " and B ", b.type().ToString(),
                                  " must be float32 [K, M] and [K, N]"));
  }
  const int64_t k = a.dim(0), m = a.dim(1), nn = b.dim(1);
  const std::string bias = ctx.attr_string("bias", "");
  std::vector<std::vector<float>> grads(n);
  grads[0].assign(m * nn, 0.0f);
  if (m > 0 && nn > 0) GemmGeneric<float>(true, false, m, nn, k, 1.0f, a.data<float>(), m, b.data<float>(), nn, 0.0, grads[0].data(), nn);
  if (n == 2) {
    // Σ_k over the rows of A [K, M] or B [K, N], in double, increasing k (FusedGemm's bgrada/bgradb).
    const Tensor& src = bias == "a" ? a : b;
    std::vector<double> acc(src.dim(1), 0.0);
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t c = 0; c < src.dim(1); ++c) acc[c] += src.data<float>()[r * src.dim(1) + c];
    }
    grads[1].resize(acc.size());
    for (size_t c = 0; c < acc.size(); ++c) grads[1][c] = static_cast<float>(acc[c]);
  }
  OTTR_ASSIGN_OR_RETURN(const AdamConsts<float> c, ReadAdamConsts<float>(ctx, 0, 1));
  for (int t = 0; t < n; ++t) {
    const Tensor& p = ctx.input(4 + t);
    const Tensor& mt = ctx.input(4 + n + t);
    const Tensor& vt = ctx.input(4 + 2 * n + t);
    if (p.dtype() != DType::kFloat32 || p.num_elements() != static_cast<int64_t>(grads[t].size()) ||
        mt.type() != p.type() || vt.type() != p.type()) {
      return ctx.Error(absl::StrCat("parameter ", t, " ", p.type().ToString(), " or its state does not match its ",
                                    grads[t].size(), "-element gradient"));
    }
    Tensor& po = ctx.AllocateOutput(t, p.dtype(), p.dims());
    Tensor& mo = ctx.AllocateOutput(n + t, p.dtype(), p.dims());
    Tensor& vo = ctx.AllocateOutput(2 * n + t, p.dtype(), p.dims());
    AdamElements<float>(c, p.num_elements(), p.data<float>(), grads[t].data(), mt.data<float>(), vt.data<float>(),
                        false, 1.0f, po.data<float>(), mo.data<float>(), vo.data<float>());
  }
  return absl::OkStatus();
}

// ottr::MlpStep(lr, step, x, labels, p.., m.., v..) -> (loss, p'.., m'.., v'..): the step as the
// unfused graph computes it: each layer's Gemm (bias broadcast, then x·Wᵀ added) and ReLU, the
// SoftmaxCrossEntropy rows and their gradient, the weight gradients dzᵀ·y, the bias gradients
// summed in double in increasing rows, the data gradients dz·W through the ReLU's mask, then
// AdamUpdateN's update of every parameter.
absl::Status MlpStep(KernelContext& ctx) {
  const int n = (ctx.num_inputs() - 4) / 3;
  const int layers = n / 2;
  const Tensor& x = ctx.input(2);
  const Tensor& labels = ctx.input(3);
  if (layers < 1 || x.dtype() != DType::kFloat32 || x.rank() != 2 || labels.num_elements() != x.dim(0)) {
    return ctx.Error(absl::StrCat("x ", x.type().ToString(), " and labels ", labels.type().ToString(),
                                  " must be float32 [B, D] and [B]"));
  }
  const int64_t rows = x.dim(0);
  std::vector<int64_t> in(layers), out(layers);
  for (int l = 0; l < layers; ++l) {
    const Tensor& w = ctx.input(4 + 2 * l);
    const Tensor& b = ctx.input(5 + 2 * l);
    in[l] = l == 0 ? x.dim(1) : out[l - 1];
    if (w.dtype() != DType::kFloat32 || w.rank() != 2 || w.dim(1) != in[l] || b.dtype() != DType::kFloat32 ||
        b.num_elements() != w.dim(0)) {
      return ctx.Error(absl::StrCat("layer ", l, ": W ", w.type().ToString(), " and b ", b.type().ToString(),
                                    " must be float32 [out, ", in[l], "] and [out]"));
    }
    out[l] = w.dim(0);
  }
  for (int k = 0; k < n; ++k) {
    for (int s = 1; s <= 2; ++s) {
      if (ctx.input(4 + s * n + k).type() != ctx.input(4 + k).type()) {
        return ctx.Error(absl::StrCat("state ", ctx.input(4 + s * n + k).type().ToString(), " does not match parameter ",
                                      ctx.input(4 + k).type().ToString()));
      }
    }
  }
  const int64_t classes = out[layers - 1];
  const int64_t ignore = ctx.attr_int("ignore_index", -100);
  absl::Status st = CheckLabels(ctx, labels, classes, ignore);
  if (!st.ok()) return st;
  auto w = [&](int l) { return ctx.input(4 + 2 * l).data<float>(); };
  // y[l] = layer l's output (the logits last); layer l reads act(l): x, then y[l - 1].
  std::vector<std::vector<float>> y(layers);
  auto act = [&](int l) { return l == 0 ? x.data<float>() : y[l - 1].data(); };
  for (int l = 0; l < layers; ++l) {
    std::vector<float>& z = y[l];
    z.resize(rows * out[l]);
    const float* b = ctx.input(5 + 2 * l).data<float>();
    for (int64_t i = 0; i < rows; ++i) std::memcpy(z.data() + i * out[l], b, out[l] * 4);
    if (rows > 0) GemmGeneric<float>(false, true, rows, out[l], in[l], 1.0, act(l), in[l], w(l), in[l], 1.0, z.data(), out[l]);
    if (l + 1 < layers) {
      for (float& v : z) v = v > 0.0f ? v : 0.0f;
    }
  }
  std::vector<float> lp(rows * classes), dz(rows * classes);
  const float loss = SceRows<float>(y[layers - 1].data(), labels, rows, classes, ignore, 0.0, lp.data());
  SceGradRows<float>(1.0, lp.data(), labels, rows, classes, ignore, 0.0, dz.data());
  std::vector<std::vector<float>> grads(n);
  for (int l = layers - 1; l >= 0; --l) {
    std::vector<float>& dw = grads[2 * l];
    std::vector<float>& db = grads[2 * l + 1];
    dw.assign(out[l] * in[l], 0.0f);
    if (rows > 0) GemmGeneric<float>(true, false, out[l], in[l], rows, 1.0, dz.data(), out[l], act(l), in[l], 0.0, dw.data(), in[l]);
    std::vector<double> acc(out[l], 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < out[l]; ++j) acc[j] += dz[i * out[l] + j];
    }
    db.assign(acc.begin(), acc.end());
    if (l == 0) break;
    std::vector<float> dy(rows * in[l], 0.0f);
    if (rows > 0) GemmGeneric<float>(false, false, rows, in[l], out[l], 1.0, dz.data(), out[l], w(l), in[l], 0.0, dy.data(), in[l]);
    for (int64_t i = 0; i < rows * in[l]; ++i) dy[i] = y[l - 1][i] > 0.0f ? dy[i] : 0.0f;
    dz = std::move(dy);
  }
  OTTR_ASSIGN_OR_RETURN(const AdamConsts<float> c, ReadAdamConsts<float>(ctx, 0, 1));
  ctx.AllocateOutput(0, DType::kFloat32, {}).data<float>()[0] = loss;
  for (int k = 0; k < n; ++k) {
    const Tensor& p = ctx.input(4 + k);
    Tensor& po = ctx.AllocateOutput(1 + k, p.dtype(), p.dims());
    Tensor& mo = ctx.AllocateOutput(1 + n + k, p.dtype(), p.dims());
    Tensor& vo = ctx.AllocateOutput(1 + 2 * n + k, p.dtype(), p.dims());
    AdamElements<float>(c, p.num_elements(), p.data<float>(), grads[k].data(), ctx.input(4 + n + k).data<float>(),
                        ctx.input(4 + 2 * n + k).data<float>(), false, 1.0f, po.data<float>(), mo.data<float>(),
                        vo.data<float>());
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status SgdUpdate(KernelContext& ctx) {
  return SgdApply<T>(ctx, {0, 1, 2, 3, 4, -1, 0, 1, -1});
}
template <typename T> struct SgdOp { static absl::Status Run(KernelContext& c) { return SgdUpdate<T>(c); } };

template <typename T>
absl::Status AdamUpdate(KernelContext& ctx) {
  return AdamApply<T>(ctx, {0, 1, 2, 3, 4, 5, 0, 1, 2});
}

// With `guarded`, the guard (the last input) skips the update: a float guard (the loss) when it
// is not finite, a bool guard (every gradient finite) when it is false. Every output then takes
// its input's value (a copy unless the executor placed it in place).
bool GuardTripped(KernelContext& ctx, const ir::UpdateNLayout& l) {
  if (l.guard < 0) return false;
  const Tensor& g = ctx.input(l.guard);
  if (g.dtype() == DType::kBool) return !g.data<bool>()[0];
  return !std::isfinite(g.GetAsDouble(0));
}

// Copies input `in` to output `out` (skipped update).
void PassThrough(KernelContext& ctx, int out, int in) {
  const Tensor& x = ctx.input(in);
  Tensor& y = ctx.AllocateOutput(out, x.dtype(), x.dims());
  if (y.raw_data() != x.raw_data()) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
}

// The low-precision copies (ir/optimizer_update.h): Cast(p'_k) into output first_low + j, written
// after every update (p'_k is output k; in place over p_k or not).
absl::Status WriteLowCopies(KernelContext& ctx, const ir::UpdateNLayout& l) {
  if (l.low_copies.empty()) return absl::OkStatus();
  const DType low = static_cast<DType>(ctx.attr_int("low_type", 0));
  for (size_t j = 0; j < l.low_copies.size(); ++j) {
    const Tensor& p = ctx.output(static_cast<int>(l.low_copies[j]));
    OTTR_ASSIGN_OR_RETURN(Tensor c, ew::CastTensor(p, low));
    Tensor& out = ctx.AllocateOutput(l.first_low + static_cast<int>(j), low, p.dims());
    std::memcpy(out.raw_data(), c.raw_data(), c.nbytes());
  }
  return absl::OkStatus();
}

// N-ary forms: each tensor in turn, in place where the executor placed outputs over inputs
// (every element is read before the same element is written).
template <typename T>
absl::Status AdamUpdateN(KernelContext& ctx) {
  const ir::UpdateNLayout l = ir::UpdateNLayoutOf(ctx.node(), true);
  if (!l.valid) return ctx.Error("unexpected arity");
  const int n = l.n;
  const bool skip = GuardTripped(ctx, l);
  for (int k = 0; k < n; ++k) {
    if (skip) {
      PassThrough(ctx, k, 2 + k);
      PassThrough(ctx, n + k, 2 + 2 * n + k);
      PassThrough(ctx, 2 * n + k, 2 + 3 * n + k);
      continue;
    }
    UpdateSlots s{2 + k, 2 + n + k, 0, 1, 2 + 2 * n + k, 2 + 3 * n + k, k, n + k, 2 * n + k};
    s.grad_scale = l.grad_scale;
    OTTR_RETURN_IF_ERROR(AdamApply<T>(ctx, s));
  }
  return WriteLowCopies(ctx, l);
}
template <typename T>
absl::Status SgdUpdateN(KernelContext& ctx) {
  const ir::UpdateNLayout l = ir::UpdateNLayoutOf(ctx.node(), false);
  if (!l.valid) return ctx.Error("unexpected arity");
  const bool buf = l.states == 1;
  const int n = l.n;
  const bool skip = GuardTripped(ctx, l);
  for (int k = 0; k < n; ++k) {
    if (skip) {
      PassThrough(ctx, k, 2 + k);
      if (buf) PassThrough(ctx, n + k, 2 + 2 * n + k);
      continue;
    }
    UpdateSlots s{2 + k, 2 + n + k, 0, 1, buf ? 2 + 2 * n + k : -1, -1, k, buf ? n + k : -1, -1};
    s.grad_scale = l.grad_scale;
    OTTR_RETURN_IF_ERROR(SgdApply<T>(ctx, s));
  }
  return WriteLowCopies(ctx, l);
}

// ottr::AllFinite: a bool scalar, true when no input holds a NaN or an infinity.
absl::Status AllFinite(KernelContext& ctx) {
  bool ok = true;
  for (int i = 0; i < ctx.num_inputs() && ok; ++i) {
    const Tensor& x = ctx.input(i);
    if (!ir::IsFloat(x.dtype())) return ctx.Error(absl::StrCat("input ", i, " is not a float tensor"));
    for (int64_t j = 0; j < x.num_elements() && ok; ++j) ok = std::isfinite(x.GetAsDouble(j));
  }
  ctx.AllocateOutput(0, DType::kBool, {}).data<bool>()[0] = ok;
  return absl::OkStatus();
}

// ottr::LossScaleUpdate (torch.amp's _amp_update_scale_): the new scale is computed in the
// scale's type; inputs are read before outputs are written (safe in place).
absl::Status LossScaleUpdate(KernelContext& ctx) {
  const double scale = ctx.input(0).GetAsDouble(0);
  const int64_t good = ctx.input(1).GetAsInt64(0);
  const bool ok = ctx.input(2).data<bool>()[0];
  const double growth = ctx.attr_float("growth_factor", 2.0f);
  const double backoff = ctx.attr_float("backoff_factor", 0.5f);
  const int64_t interval = ctx.attr_int("growth_interval", 2000);
  const DType t = ctx.input(0).dtype();
  Tensor& so = ctx.AllocateOutput(0, t, {});
  auto store = [&](double v) {
    ir::VisitDType(t, [&]<typename T>() {
      if constexpr (!std::is_void_v<T>) so.data<T>()[0] = ir::FromDouble<T>(v);
    });
  };
  int64_t new_good = 0;
  if (!ok) {
    store(scale * backoff);
  } else if (good + 1 >= interval) {
    store(scale * growth);
    if (!std::isfinite(so.GetAsDouble(0))) store(scale);  // growth overflowed the type: keep
  } else {
    store(scale);
    new_good = good + 1;
  }
  ctx.AllocateOutput(1, DType::kInt64, {}).data<int64_t>()[0] = new_good;
  return absl::OkStatus();
}

template <typename T> struct AdamNOp { static absl::Status Run(KernelContext& c) { return AdamUpdateN<T>(c); } };
template <typename T> struct SgdNOp { static absl::Status Run(KernelContext& c) { return SgdUpdateN<T>(c); } };
template <typename T> struct AdamOp { static absl::Status Run(KernelContext& c) { return AdamUpdate<T>(c); } };

}  // namespace

void RegisterOttrTrainingKernels(KernelRegistry& r) {
  const std::string d(ir::kOttrDomain);
  r.Register(d, "SoftmaxCrossEntropy", [](KernelContext& c) {
    return DispatchFloat<SceForwardOp>(c, c.input(0).dtype());
  });
  r.Register(d, "SoftmaxCrossEntropyGrad", [](KernelContext& c) {
    return DispatchFloat<SceBackwardOp>(c, c.input(1).dtype());
  });
  r.Register(d, "SoftmaxCrossEntropyWithGrad", [](KernelContext& c) {
    return DispatchFloat<SceWithGradOp>(c, c.input(0).dtype());
  });
  r.Register(d, "LinearSoftmaxCrossEntropyWithGrad", LinearSceWithGrad);
  r.Register(d, "LinearSceReluGrad", LinearSceReluGrad);
  r.Register(d, "SGDUpdate", [](KernelContext& c) { return DispatchFloat<SgdOp>(c, c.input(0).dtype()); });
  r.Register(d, "AdamUpdate", [](KernelContext& c) { return DispatchFloat<AdamOp>(c, c.input(0).dtype()); });
  r.Register(d, "SGDUpdateN", [](KernelContext& c) { return DispatchFloat<SgdNOp>(c, c.input(2).dtype()); });
  r.Register(d, "AdamUpdateN", [](KernelContext& c) { return DispatchFloat<AdamNOp>(c, c.input(2).dtype()); });
  r.Register(d, "GemmAdamUpdate", GemmAdamUpdate);
  r.Register(d, "MlpStep", MlpStep);
  r.Register(d, "AllFinite", AllFinite);
  r.Register(d, "CountLabels", [](KernelContext& c) {
    const Tensor& labels = c.input(0);
    if (labels.dtype() != DType::kInt32 && labels.dtype() != DType::kInt64) {
      return c.Unsupported(absl::StrCat("labels of ", ir::DTypeName(labels.dtype())));
    }
    c.AllocateOutput(0, DType::kInt64, {}).data<int64_t>()[0] = CountNotIgnored(labels, c.attr_int("ignore_index", -100));
    return absl::OkStatus();
  });
  r.Register(d, "LossScaleUpdate", LossScaleUpdate);
}

}  // namespace ottr::runtime::cpu
