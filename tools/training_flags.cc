#include "tools/training_flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ir/status.h"

namespace ottr::tools {

std::set<std::string> TrainingValueFlags() {
  return {"loss", "logits", "loss-output", "ignore-index", "label-smoothing", "optimizer", "lr",
          "momentum", "dampening", "weight-decay", "beta1", "beta2", "eps", "clip-grad-norm",
          "batch", "freeze", "dim", "multi-tensor-optimizer", "fuse-epilogues", "fuse-relu-grad-bgrad", "pad-gemm-dims", "pad-gemm-min-macs", "pad-gemm-min-rows", "large-relu-epilogue", "large-relu-epilogue-tf32", "tf32-bgrad-in-weight-gemm", "group-gemms", "fuse-gemm-adam", "fuse-mlp-step", "layout",
          "disable-passes", "precision", "keep-fp32", "loss-scale",
          "loss-scale-growth-interval"};
}

namespace {

// --NAME on|off: calls set(true / false) when the flag is given.
template <typename Set>
absl::Status OnOff(const Args& args, const std::string& name, Set set) {
  if (!args.has(name)) return absl::OkStatus();
  const std::string m = args.get(name);
  if (m != "on" && m != "off") return absl::InvalidArgumentError("--" + name + " must be on or off");
  set(m == "on");
  return absl::OkStatus();
}

}  // namespace

std::set<std::string> TrainingSwitchFlags() { return {"nesterov", "no-tf32"}; }

absl::StatusOr<passes::TrainingSpec> ParseTrainingSpec(const Args& args, int64_t default_batch) {
  passes::TrainingSpec spec;
  OTTR_ASSIGN_OR_RETURN(spec.batch, args.get_int("batch", default_batch));
  if (spec.batch <= 0) return absl::InvalidArgumentError("--batch must be positive");
  const std::string loss = args.get("loss", args.has("loss-output") ? "output" : "softmax_cross_entropy");
  if (args.has("loss-output")) {
    spec.loss.kind = passes::LossSpec::Kind::kModelOutput;
    spec.loss.output = args.get("loss-output");
  } else if (loss == "softmax_cross_entropy" || loss == "cross_entropy" || loss == "sce") {
    spec.loss.kind = passes::LossSpec::Kind::kSoftmaxCrossEntropy;
  } else if (loss == "mse") {
    spec.loss.kind = passes::LossSpec::Kind::kMse;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--loss ", loss,
                                                   ": expected softmax_cross_entropy or mse (or "
                                                   "--loss-output NAME)"));
  }
  if (args.has("logits")) spec.loss.output = args.get("logits");
  // --multi-tensor-optimizer on|off (default: on for the CUDA executor, set by the commands).
  OTTR_RETURN_IF_ERROR(OnOff(args, "multi-tensor-optimizer", [&](bool on) { spec.multi_tensor_updates = on; }));
  // --fuse-epilogues on|off (default: on for the CUDA executor and `ottr passes`, set by the commands).
  OTTR_RETURN_IF_ERROR(OnOff(args, "fuse-epilogues", [&](bool on) { spec.fuse_epilogues = on; }));
  // --fuse-relu-grad-bgrad on|off (default: on for bf16/fp16, passes/training.h, TrainingSpec::fuse_relu_grad_bgrad).
  OTTR_RETURN_IF_ERROR(OnOff(args, "fuse-relu-grad-bgrad", [&](bool on) { spec.fuse_relu_grad_bgrad = on; }));
  // --large-relu-epilogue on|off (default: passes/training.h, TrainingSpec::large_relu_epilogue).
  OTTR_RETURN_IF_ERROR(OnOff(args, "large-relu-epilogue", [&](bool on) { spec.large_relu_epilogue = on; }));
  // --large-relu-epilogue-tf32 on|off: the same for float32 GEMMs (TrainingSpec::large_relu_epilogue_tf32).
  OTTR_RETURN_IF_ERROR(
      OnOff(args, "large-relu-epilogue-tf32", [&](bool on) { spec.large_relu_epilogue_tf32 = on; }));
  // --tf32-bgrad-in-weight-gemm on|off: TF32 bias gradients in the weight-gradient GEMMs rather
  // than the data gradients' DRELU_BGRAD (TrainingSpec::tf32_bgrad_in_weight_gemm).
  OTTR_RETURN_IF_ERROR(
      OnOff(args, "tf32-bgrad-in-weight-gemm", [&](bool on) { spec.tf32_bgrad_in_weight_gemm = on; }));
  // --group-gemms on|off (default off: passes/training.h, TrainingSpec::group_gemms).
  OTTR_RETURN_IF_ERROR(OnOff(args, "group-gemms", [&](bool on) { spec.group_gemms = on; }));
  // --fuse-gemm-adam on|off (passes/training.h, TrainingSpec::fuse_gemm_adam).
  OTTR_RETURN_IF_ERROR(OnOff(args, "fuse-gemm-adam", [&](bool on) { spec.fuse_gemm_adam = on; }));
  // --fuse-mlp-step on|off (passes/training.h, TrainingSpec::fuse_mlp_step).
  OTTR_RETURN_IF_ERROR(OnOff(args, "fuse-mlp-step", [&](bool on) { spec.fuse_mlp_step = on; }));
  // --pad-gemm-dims on|off (default on: passes/training.h, TrainingSpec::pad_gemm_dims).
  OTTR_RETURN_IF_ERROR(OnOff(args, "pad-gemm-dims", [&](bool on) { spec.pad_gemm_dims = on; }));
  // --pad-gemm-min-macs N: pad-gemm-dims leaves GEMMs of fewer than N multiply-adds (m·n·k) alone.
  if (args.has("pad-gemm-min-macs")) {
    double v = 0;
    if (!absl::SimpleAtod(args.get("pad-gemm-min-macs"), &v) || !(v >= 0)) {
      return absl::InvalidArgumentError("--pad-gemm-min-macs must be a number >= 0, got '" +
                                        args.get("pad-gemm-min-macs") + "'");
    }
    spec.pad_gemm_min_macs = v;
  }
  // --pad-gemm-min-rows N: nor GEMMs of fewer than N rows.
  if (args.has("pad-gemm-min-rows")) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(args.get("pad-gemm-min-rows"), &v) || v < 0) {
      return absl::InvalidArgumentError("--pad-gemm-min-rows must be an integer >= 0, got '" +
                                        args.get("pad-gemm-min-rows") + "'");
    }
    spec.pad_gemm_min_rows = v;
  }
  // --layout nchw|nhwc (default: nhwc for the CUDA executor and `ottr passes`, set by the commands).
  if (args.has("layout")) {
    const std::string m = args.get("layout");
    if (m != "nchw" && m != "nhwc") return absl::InvalidArgumentError("--layout must be nchw or nhwc");
    spec.channels_last = m == "nhwc";
  }
  // --disable-passes NAME[,NAME...]: pipeline passes to skip (e.g. fuse-gemm-bgrad).
  for (absl::string_view p : absl::StrSplit(args.get("disable-passes"), ',', absl::SkipEmpty())) {
    spec.disabled_passes.insert(std::string(p));
  }
  // --precision fp32|tf32|bf16|fp16 (default tf32: float32 with TF32 GEMMs/convolutions on CUDA);
  // --no-tf32 is --precision fp32.
  const std::string precision = args.get("precision", args.has("no-tf32") ? "fp32" : "tf32");
  if (precision == "fp32") {
    spec.precision = passes::Precision::kFp32;
  } else if (precision == "tf32") {
    spec.precision = passes::Precision::kTf32;
  } else if (precision == "bf16") {
    spec.precision = passes::Precision::kBf16;
  } else if (precision == "fp16") {
    spec.precision = passes::Precision::kFp16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--precision ", precision, ": expected fp32, tf32, bf16 or fp16"));
  }
  if (args.has("no-tf32") && spec.precision == passes::Precision::kTf32) {
    return absl::InvalidArgumentError("--no-tf32 contradicts --precision tf32");
  }
  spec.keep_fp32 = args.get("keep-fp32");
  if (!spec.keep_fp32.empty() && spec.precision != passes::Precision::kBf16 &&
      spec.precision != passes::Precision::kFp16) {
    return absl::InvalidArgumentError("--keep-fp32 applies to --precision bf16 or fp16");
  }
  // --loss-scale auto|dynamic|none|S (default auto: dynamic for fp16, none otherwise; a number is
  // a static scale S); --loss-scale-growth-interval N (dynamic: finite steps before the scale
  // doubles, default 2000). The initial dynamic scale is 65536 (torch.amp.GradScaler's).
  const std::string ls = args.get("loss-scale", "auto");
  if (ls == "auto") {
    spec.loss_scale.kind = passes::LossScaleSpec::Kind::kAuto;
  } else if (ls == "dynamic") {
    spec.loss_scale.kind = passes::LossScaleSpec::Kind::kDynamic;
  } else if (ls == "none") {
    spec.loss_scale.kind = passes::LossScaleSpec::Kind::kNone;
  } else {
    double scale = 0;
    if (!absl::SimpleAtod(ls, &scale) || !(scale > 0) || !std::isfinite(static_cast<float>(scale))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--loss-scale ", ls, ": expected auto, dynamic, none or a positive number"));
    }
    spec.loss_scale.kind = passes::LossScaleSpec::Kind::kStatic;
    spec.loss_scale.init_scale = static_cast<float>(scale);
  }
  OTTR_ASSIGN_OR_RETURN(spec.loss_scale.growth_interval, args.get_int("loss-scale-growth-interval", 2000));
  if (spec.loss_scale.growth_interval < 1) {
    return absl::InvalidArgumentError("--loss-scale-growth-interval must be at least 1");
  }
  if (args.has("loss-scale-growth-interval") && passes::EffectiveLossScale(spec) != passes::LossScaleSpec::Kind::kDynamic) {
    return absl::InvalidArgumentError("--loss-scale-growth-interval applies to dynamic loss scaling (--precision fp16 "
                                      "or --loss-scale dynamic)");
  }
  OTTR_ASSIGN_OR_RETURN(spec.loss.ignore_index, args.get_int("ignore-index", -100));
  OTTR_ASSIGN_OR_RETURN(double smoothing, args.get_double("label-smoothing", 0.0));
  if (smoothing < 0 || smoothing > 1) return absl::InvalidArgumentError("--label-smoothing must be in [0, 1]");
  spec.loss.label_smoothing = static_cast<float>(smoothing);

  const std::string opt = args.get("optimizer", "adam");
  passes::OptimizerSpec& o = spec.optimizer;
  if (opt == "sgd") {
    o.kind = passes::OptimizerSpec::Kind::kSgd;
  } else if (opt == "adam") {
    o.kind = passes::OptimizerSpec::Kind::kAdam;
  } else if (opt == "adamw") {
    o.kind = passes::OptimizerSpec::Kind::kAdamW;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer ", opt, ": expected sgd, adam or adamw"));
  }
  OTTR_ASSIGN_OR_RETURN(double momentum, args.get_double("momentum", 0.0));
  OTTR_ASSIGN_OR_RETURN(double dampening, args.get_double("dampening", 0.0));
  // PyTorch's defaults: AdamW weight_decay 0.01, the others 0.
  OTTR_ASSIGN_OR_RETURN(double wd, args.get_double("weight-decay", opt == "adamw" ? 0.01 : 0.0));
  OTTR_ASSIGN_OR_RETURN(double beta1, args.get_double("beta1", 0.9));
  OTTR_ASSIGN_OR_RETURN(double beta2, args.get_double("beta2", 0.999));
  OTTR_ASSIGN_OR_RETURN(double eps, args.get_double("eps", 1e-8));
  OTTR_ASSIGN_OR_RETURN(double clip, args.get_double("clip-grad-norm", 0.0));
  if (momentum < 0 || dampening < 0 || wd < 0 || clip < 0 || eps <= 0) {
    return absl::InvalidArgumentError("optimizer hyper-parameters must not be negative");
  }
  if (args.has("nesterov") && (momentum <= 0 || dampening != 0)) {
    return absl::InvalidArgumentError("--nesterov needs --momentum > 0 and no dampening (as PyTorch)");
  }
  if (opt != "sgd" && (args.has("momentum") || args.has("nesterov"))) {
    return absl::InvalidArgumentError(absl::StrCat("--momentum/--nesterov apply to --optimizer sgd, not ", opt));
  }
  o.momentum = static_cast<float>(momentum);
  o.dampening = static_cast<float>(dampening);
  o.nesterov = args.has("nesterov");
  o.weight_decay = static_cast<float>(wd);
  o.beta1 = static_cast<float>(beta1);
  o.beta2 = static_cast<float>(beta2);
  o.epsilon = static_cast<float>(eps);
  o.max_grad_norm = static_cast<float>(clip);
  spec.freeze = args.get("freeze");
  for (const std::string& d : args.get_all("dim")) {
    std::vector<std::string> kv = absl::StrSplit(d, '=');
    int64_t v;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--dim ", d, ": expected SYMBOL=SIZE"));
    }
    spec.dims.emplace_back(kv[0], v);
  }
  return spec;
}

void UseDevicePipeline(const Args& args, const std::string& device, passes::TrainingSpec& spec) {
  if (device == "cuda") {
    const passes::TrainingSpec given = spec;
    passes::UseCudaPipeline(spec);
    if (args.has("multi-tensor-optimizer")) spec.multi_tensor_updates = given.multi_tensor_updates;
    if (args.has("fuse-epilogues")) spec.fuse_epilogues = given.fuse_epilogues;
    if (args.has("layout")) spec.channels_last = given.channels_last;
  }
  spec.optimizer_low_copies = true;
}

}  // namespace ottr::tools
