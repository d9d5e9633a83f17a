// `ottr train MODEL --data SPEC [...]`: see README.md for the flags.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "tools/cli_common.h"
#include "tools/device.h"
#include "tools/train_loop.h"
#include "tools/training_flags.h"

namespace ottr::tools {

absl::Status CmdTrain(const std::vector<std::string>& argv) {
  std::set<std::string> values = TrainingValueFlags();
  for (const char* f : {"data", "epochs", "steps", "seed", "out", "checkpoint", "checkpoint-every",
                        "resume", "log-every", "nan-policy", "device", "input", "lr-schedule",
                        "lr-step-size", "lr-gamma", "min-lr", "warmup-steps", "normalize", "mean",
                        "std", "eval-batch", "stop-after", "algo-cache", "streams"}) {
    values.insert(f);
  }
  std::set<std::string> switches = TrainingSwitchFlags();
  switches.insert("no-tf32");
  switches.insert("no-cuda-graph");
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, values, switches));
  if (args.positional().size() != 1) return absl::InvalidArgumentError("train takes one MODEL");
  if (!args.has("data")) return absl::InvalidArgumentError("train needs --data SPEC (e.g. --data fashion-mnist)");
  TrainConfig config;
  OTTR_ASSIGN_OR_RETURN(config.spec, ParseTrainingSpec(args, 64));
  OTTR_ASSIGN_OR_RETURN(config.schedule.lr, args.get_double("lr", 1e-3));
  if (!(config.schedule.lr > 0)) return absl::InvalidArgumentError("--lr must be positive");
  const std::string sched = args.get("lr-schedule", "constant");
  if (sched == "constant") {
    config.schedule.kind = LrSchedule::Kind::kConstant;
  } else if (sched == "step") {
    config.schedule.kind = LrSchedule::Kind::kStep;
  } else if (sched == "cosine") {
    config.schedule.kind = LrSchedule::Kind::kCosine;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--lr-schedule ", sched, ": expected constant, step or cosine"));
  }
  OTTR_ASSIGN_OR_RETURN(config.schedule.step_size, args.get_int("lr-step-size", 1000));
  OTTR_ASSIGN_OR_RETURN(config.schedule.gamma, args.get_double("lr-gamma", 0.1));
  OTTR_ASSIGN_OR_RETURN(config.schedule.min_lr, args.get_double("min-lr", 0.0));
  OTTR_ASSIGN_OR_RETURN(config.schedule.warmup_steps, args.get_int("warmup-steps", 0));
  OTTR_ASSIGN_OR_RETURN(config.epochs, args.get_int("epochs", 1));
  OTTR_ASSIGN_OR_RETURN(config.max_steps, args.get_int("steps", -1));
  OTTR_ASSIGN_OR_RETURN(int64_t seed, args.get_int("seed", 0));
  config.seed = static_cast<uint64_t>(seed);
  config.out = args.get("out");
  config.checkpoint = args.get("checkpoint");
  OTTR_ASSIGN_OR_RETURN(config.checkpoint_every, args.get_int("checkpoint-every", 0));
  config.resume = args.get("resume");
  OTTR_ASSIGN_OR_RETURN(config.stop_after, args.get_int("stop-after", -1));
  if (config.stop_after > 0 && config.checkpoint.empty()) {
    return absl::InvalidArgumentError("--stop-after needs --checkpoint FILE to resume from");
  }
  OTTR_ASSIGN_OR_RETURN(config.log_every, args.get_int("log-every", 100));
  OTTR_ASSIGN_OR_RETURN(config.eval_batch, args.get_int("eval-batch", 1000));
  const std::string nan = args.get("nan-policy", "stop");
  if (nan != "stop" && nan != "skip") return absl::InvalidArgumentError("--nan-policy: expected stop or skip");
  config.nan_skip = nan == "skip";
  config.device = ResolveDevice(args.get("device", "auto"));
  // TF32 only for --precision tf32 (the default): fp32 is exact float32, and with bf16/fp16 the
  // layers kept in float32 (--keep-fp32) are exact float32 too.
  config.tf32 = config.spec.precision == passes::Precision::kTf32;
  config.cuda_graph = !args.has("no-cuda-graph");
  config.algo_cache = args.get("algo-cache");
  OTTR_ASSIGN_OR_RETURN(config.streams, args.get_int("streams", config.streams));
  if (config.streams < 1) return absl::InvalidArgumentError("--streams must be at least 1");
  UseDevicePipeline(args, config.device, config.spec);
  config.input = args.get("input");
  if (config.epochs <= 0 || config.max_steps == 0) return absl::InvalidArgumentError("nothing to train: --epochs/--steps must be positive");

  runtime::DataOptions dopt;
  const std::string norm = args.get("normalize", "scale");
  if (norm == "none") {
    dopt.normalize = runtime::Normalize::kNone;
  } else if (norm == "scale") {
    dopt.normalize = runtime::Normalize::kScale;
  } else if (norm == "standardize") {
    dopt.normalize = runtime::Normalize::kStandardize;
  } else {
    return absl::InvalidArgumentError("--normalize: expected none, scale or standardize");
  }
  OTTR_ASSIGN_OR_RETURN(double mean, args.get_double("mean", 0.0));
  OTTR_ASSIGN_OR_RETURN(double stddev, args.get_double("std", 1.0));
  if (stddev <= 0) return absl::InvalidArgumentError("--std must be positive");
  dopt.mean = static_cast<float>(mean);
  dopt.stddev = static_cast<float>(stddev);
  OTTR_ASSIGN_OR_RETURN(runtime::DataSource data, runtime::LoadData(args.get("data"), dopt));
  if (data.kind == runtime::DataSource::Kind::kSteps && config.max_steps < 0 && !args.has("epochs")) {
    config.max_steps = static_cast<int64_t>(data.steps.size());
  }
  return RunTraining(args.positional()[0], data, config);
}

}  // namespace ottr::tools
