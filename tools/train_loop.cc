#include "tools/train_loop.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "importer/exporter.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "passes/lower_gradient.h"
#include "passes/mixed_precision.h"
#include "passes/standard_passes.h"
#include "ir/status.h"
#include "runtime/checkpoint.h"
#include "runtime/cpu/cpu_executor.h"
#ifdef OTTR_HAVE_CUDA
#include "runtime/cuda/cuda_executor.h"
#endif
#include "tools/eval.h"

namespace ottr::tools {
namespace {

using Clock = std::chrono::steady_clock;
using ir::Tensor;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? absl::StrFormat("%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60)
                   : absl::StrFormat("%d:%02d", t / 60, t % 60);
}

// Writes progress: a redrawn bar on a terminal, a plain line every `every` steps otherwise.
class Progress {
 public:
  Progress(int64_t total, int64_t every) : total_(total), every_(every), tty_(isatty(fileno(stdout))) {
    start_ = Clock::now();
  }
  void Update(int64_t done, double loss) {
    const double elapsed = Seconds(start_, Clock::now());
    const double rate = done / std::max(elapsed, 1e-9);
    const double eta = (total_ - done) / std::max(rate, 1e-9);
    if (tty_) {
      const int width = 30;
      const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : 0;
      std::printf("\r[%s%s] %lld/%lld  %.1f steps/s  loss %.4f  ETA %s ", std::string(filled, '#').c_str(),
                  std::string(width - filled, '.').c_str(), static_cast<long long>(done),
                  static_cast<long long>(total_), rate, loss, FormatDuration(eta).c_str());
      std::fflush(stdout);
    } else if (every_ > 0 && (done % every_ == 0 || done == total_)) {
      std::printf("step %lld/%lld  loss %.4f  %.1f steps/s  ETA %s\n", static_cast<long long>(done),
                  static_cast<long long>(total_), loss, rate, FormatDuration(eta).c_str());
      std::fflush(stdout);
    }
  }
  void EndLine() {
    if (tty_) std::printf("\n");
  }

 private:
  int64_t total_;
  int64_t every_;
  bool tty_;
  Clock::time_point start_;
};

// The step graph's persistent state: every initializer it updates.
std::vector<std::string> StateNames(const ir::Graph& step) {
  std::vector<std::string> names;
  for (const ir::StateUpdate& u : step.updates()) names.push_back(u.target->name());
  return names;
}

// The executor a training run drives: the CPU reference (state updates held until the loss is
// known to be finite, bit-reproducible resume) or the CUDA executor (the planned step replayed
// as one CUDA Graph; updates land in place, so a non-finite step can only stop the run).
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual absl::StatusOr<std::vector<Tensor>> Run(const runtime::TensorMap& feeds) = 0;
  // After Run: whether the state updates of the step are finite (CPU: checked before commit).
  virtual bool UpdatesFinite() const { return true; }
  virtual bool CanSkipSteps() const { return false; }
  virtual void Commit() {}
  // Re-runs the step with per-node checks and names the first non-finite tensor.
  virtual std::string Diagnose(const runtime::TensorMap& feeds) { return "unknown (not checked on this device)"; }
  virtual absl::StatusOr<Tensor> State(const std::string& name) = 0;
  virtual absl::Status SetState(const std::string& name, const Tensor& t) = 0;
  virtual std::string SaveRngState() const { return ""; }
  virtual absl::Status LoadRngState(const std::string& text) { return absl::OkStatus(); }
  // Pipelined runners take steps with Submit() and report their losses with Drain(), so the
  // host prepares the next batch while the device runs (the CUDA executor).
  virtual bool Pipelined() const { return false; }
  virtual absl::Status Submit(const runtime::TensorMap& feeds) { return absl::UnimplementedError("Submit"); }
  virtual absl::StatusOr<std::vector<double>> Drain() { return absl::UnimplementedError("Drain"); }
};

// The optimizer-low-copies states (passes/mixed_precision.h) follow their parameters after the
// parameters were set from outside the step.
absl::Status RefreshCopies(const ir::Graph& step, StepRunner& exec) {
  return passes::RefreshLowPrecisionCopies(
      step, [&](const std::string& n) { return exec.State(n); },
      [&](const std::string& n, const Tensor& t) { return exec.SetState(n, t); });
}

class CpuStepRunner : public StepRunner {
 public:
  explicit CpuStepRunner(std::unique_ptr<runtime::cpu::CpuExecutor> exec) : exec_(std::move(exec)) {}
  absl::StatusOr<std::vector<Tensor>> Run(const runtime::TensorMap& feeds) override { return exec_->Run(feeds); }
  bool UpdatesFinite() const override {
    for (const Tensor& t : exec_->pending_updates()) {
      if (!ir::IsFloat(t.dtype())) continue;
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        if (!std::isfinite(t.GetAsDouble(i))) return false;
      }
    }
    return true;
  }
  bool CanSkipSteps() const override { return true; }
  void Commit() override { exec_->CommitUpdates(); }
  std::string Diagnose(const runtime::TensorMap& feeds) override {
    exec_->set_check_finite(true);
    auto diag = exec_->Run(feeds);
    exec_->set_check_finite(false);
    return diag.ok() ? "a state update" : std::string(diag.status().message());
  }
  absl::StatusOr<Tensor> State(const std::string& name) override {
    const Tensor* t = exec_->State(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("no state '", name, "'"));
    return *t;
  }
  absl::Status SetState(const std::string& name, const Tensor& t) override { return exec_->SetState(name, t); }
  std::string SaveRngState() const override { return exec_->SaveRngState(); }
  absl::Status LoadRngState(const std::string& text) override { return exec_->LoadRngState(text); }
  runtime::cpu::CpuExecutor& exec() { return *exec_; }

 private:
  std::unique_ptr<runtime::cpu::CpuExecutor> exec_;
};

#ifdef OTTR_HAVE_CUDA
class CudaStepRunner : public StepRunner {
 public:
  CudaStepRunner(std::unique_ptr<cuda::CudaExecutor> exec, const ir::Graph* step)
      : exec_(std::move(exec)), step_(step) {}
  // Re-runs `feeds` on the CPU reference from host copies of the device's current state, with a
  // finiteness check after every node. (The state is the one the device holds now, which may be
  // a few steps past the one that went non-finite; the message says so when the re-run is
  // finite.)
  std::string Diagnose(const runtime::TensorMap& feeds) override {
    runtime::cpu::CpuExecutorOptions o;
    o.check_finite = true;
    auto cpu = runtime::cpu::CpuExecutor::Create(*step_, o);
    if (!cpu.ok()) return absl::StrCat("unknown (the CPU re-run could not start: ", cpu.status().message(), ")");
    for (const ir::StateUpdate& u : step_->updates()) {
      const Tensor* t = exec_->State(u.target->name());
      if (t == nullptr) return absl::StrCat("unknown (no device state '", u.target->name(), "')");
      if (absl::Status st = (*cpu)->SetState(u.target->name(), *t); !st.ok()) {
        return absl::StrCat("unknown (", st.message(), ")");
      }
    }
    auto r = (*cpu)->Run(feeds);
    if (!r.ok()) return absl::StrCat(r.status().message(), " (CPU re-run of the batch from the current parameters)");
    return "none found: the batch re-run on the CPU from the current parameters is finite";
  }
  absl::StatusOr<std::vector<Tensor>> Run(const runtime::TensorMap& feeds) override { return exec_->Run(feeds); }
  absl::StatusOr<Tensor> State(const std::string& name) override {
    const Tensor* t = exec_->State(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("no state '", name, "' on the device"));
    return *t;
  }
  absl::Status SetState(const std::string& name, const Tensor& t) override {
    return exec_->SetState(name, t);
  }
  bool Pipelined() const override { return true; }
  // `scalar`: the loss's position among the step's float scalar outputs.
  void set_loss_scalar(int scalar) { loss_scalar_ = scalar; }
  absl::Status Submit(const runtime::TensorMap& feeds) override { return exec_->Submit(feeds); }
  absl::StatusOr<std::vector<double>> Drain() override {
    OTTR_ASSIGN_OR_RETURN(auto steps, exec_->DrainScalars());
    std::vector<double> losses;
    for (const auto& v : steps) losses.push_back(loss_scalar_ >= 0 && loss_scalar_ < static_cast<int>(v.size()) ? v[loss_scalar_] : 0.0);
    return losses;
  }

 private:
  std::unique_ptr<cuda::CudaExecutor> exec_;
  const ir::Graph* step_;
  int loss_scalar_ = -1;
};
#endif

absl::Status SaveCheckpoint(const std::string& path, StepRunner& exec,
                            const ir::Graph& step, int64_t steps_done, int64_t epoch,
                            int64_t batch_in_epoch, uint64_t seed) {
  runtime::Checkpoint ckpt;
  for (const std::string& n : StateNames(step)) {
    OTTR_ASSIGN_OR_RETURN(ckpt.tensors[n], exec.State(n));
  }
  ckpt.meta["steps_done"] = absl::StrCat(steps_done);
  ckpt.meta["epoch"] = absl::StrCat(epoch);
  ckpt.meta["batch_in_epoch"] = absl::StrCat(batch_in_epoch);
  ckpt.meta["seed"] = absl::StrCat(seed);
  ckpt.meta["rng"] = exec.SaveRngState();
  return runtime::WriteCheckpoint(path, ckpt);
}

int64_t MetaInt(const runtime::Checkpoint& c, const std::string& key) {
  int64_t v = 0;
  auto it = c.meta.find(key);
  if (it != c.meta.end()) (void)absl::SimpleAtoi(it->second, &v);
  return v;
}

}  // namespace

double LrSchedule::At(int64_t step, int64_t total) const {
  if (warmup_steps > 0 && step < warmup_steps) return lr * (step + 1) / warmup_steps;
  const int64_t s = step - warmup_steps;
  switch (kind) {
    case Kind::kConstant: return lr;
    case Kind::kStep: return lr * std::pow(gamma, static_cast<double>(s / std::max<int64_t>(step_size, 1)));
    case Kind::kCosine: {
      const double t = std::max<int64_t>(total - warmup_steps, 1);
      return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * std::min<double>(s, t) / t));
    }
  }
  return lr;
}

absl::Status RunTraining(const std::string& model_path, const runtime::DataSource& data,
                         const TrainConfig& config) {
  // Fail before training, not after it, when an output cannot be written.
  for (const std::string& path : {config.out, config.checkpoint}) {
    if (path.empty()) continue;
    const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
    if (!std::filesystem::is_directory(parent) || access(parent.c_str(), W_OK) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot write ", path, ": folder ",
                                                      parent.string(), " is missing or not writable"));
    }
  }
  OTTR_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> forward, importer::ImportModelFile(model_path));
  passes::TrainingSpec spec = config.spec;
  const bool steps_data = data.kind == runtime::DataSource::Kind::kSteps;
  if (steps_data) {
    // The batch size is the leading dimension of the labels (or of any fed tensor).
    auto it = data.steps[0].find("labels");
    if (it == data.steps[0].end()) it = data.steps[0].begin();
    if (it->second.rank() < 1) return absl::InvalidArgumentError("--data: step_0 holds a scalar batch");
    spec.batch = it->second.dim(0);
  }
  // The input the features feed.
  std::string input = config.input;
  if (input.empty() && !steps_data) {
    if (forward->inputs().size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("the model has ", forward->inputs().size(),
                                                     " inputs: name the one the data feeds with --input"));
    }
    input = forward->inputs()[0]->name();
  }
  std::vector<int64_t> feature_dims;
  if (!steps_data) {
    const ir::Value* in = forward->FindValue(input);
    if (in == nullptr || in->kind() != ir::Value::Kind::kInput) {
      return absl::InvalidArgumentError(absl::StrCat("the model has no input named '", input, "'"));
    }
    if (!in->type().has_rank() || in->type().rank() < 1) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input, "' has no known rank"));
    }
    for (size_t d = 1; d < in->type().shape->size(); ++d) {
      const ir::Dim& dim = (*in->type().shape)[d];
      if (!dim.is_static()) {
        return absl::InvalidArgumentError(absl::StrCat("input '", input, "' has a non-static dimension ",
                                                       d, " (", in->type().ToString(), "): bind it with --dim"));
      }
      feature_dims.push_back(dim.value());
    }
    const ir::Dim& lead = (*in->type().shape)[0];
    if (lead.is_static() && lead.value() != spec.batch) {
      return absl::InvalidArgumentError(absl::StrCat("the model's input '", input, "' has a fixed batch of ",
                                                     lead.value(), "; use --batch ", lead.value()));
    }
  }
  OTTR_ASSIGN_OR_RETURN(onnx::ModelProto proto, importer::LoadModelProto(model_path));
  std::unique_ptr<ir::Graph> step;
  std::unique_ptr<ir::Graph> initialization;
  std::vector<std::pair<std::string, std::string>> init_binding;
  const bool standard_training = proto.training_info_size() > 0;
  // On CUDA the step updates in place: with the grouped optimizer update a step whose loss or
  // gradients are not finite is skipped on the device (nan-guard; loss scaling implies it),
  // whatever the policy: `skip` goes on, `stop` ends the run (that step's update not applied).
  const bool step_skips_on_device = config.device == "cuda" && spec.multi_tensor_updates && !standard_training;
  if (step_skips_on_device) spec.nan_guard = true;
  if (standard_training) {
    // The model carries its own training step (ONNX TrainingInfoProto): run its algorithm.
    if (!steps_data) {
      return absl::InvalidArgumentError(
          "a model with a TrainingInfoProto trains on --data DIR with step_K/ folders whose "
          "TensorProto names are the algorithm's inputs");
    }
    importer::ImportOptions io;
    io.model_dir = std::filesystem::path(model_path).parent_path().string();
    OTTR_ASSIGN_OR_RETURN(importer::TrainingInfoImport ti, importer::ImportTrainingInfo(proto, io));
    step = std::move(ti.step);
    OTTR_RETURN_IF_ERROR(passes::CreateInferShapesPass(spec.batch, spec.dims)->Run(*step).status());
    OTTR_RETURN_IF_ERROR(passes::LowerForExecution(*step));
    initialization = std::move(ti.initialization);
    init_binding = std::move(ti.initialization_binding);
  } else {
    OTTR_ASSIGN_OR_RETURN(step, passes::BuildTrainingGraph(*forward, spec));
  }
  std::unique_ptr<StepRunner> exec;
  if (config.device == "cuda") {
#ifdef OTTR_HAVE_CUDA
    if (config.nan_skip && !step_skips_on_device && !standard_training) {
      return absl::InvalidArgumentError(
          "--nan-policy skip on CUDA needs the grouped optimizer update (--multi-tensor-optimizer on), "
          "which skips a non-finite step on the device");
    }
    if (config.nan_skip && standard_training) {
      return absl::InvalidArgumentError(
          "--nan-policy skip: a model's own training algorithm (TrainingInfoProto) updates in place on CUDA; "
          "use --device cpu");
    }
    cuda::CudaExecutorOptions o;
    o.seed = config.seed;
    o.tf32 = config.tf32;
    o.use_cuda_graph = config.cuda_graph;
    o.algo_cache_file = config.algo_cache;
    o.streams = config.streams;
    OTTR_ASSIGN_OR_RETURN(auto e, cuda::CudaExecutor::Create(*step, o));
    exec = std::make_unique<CudaStepRunner>(std::move(e), step.get());
#else
    return absl::FailedPreconditionError("--device cuda: this ottr was built without CUDA");
#endif
  } else if (config.device == "cpu") {
    runtime::cpu::CpuExecutorOptions exec_options;
    exec_options.seed = config.seed;
    exec_options.auto_commit = false;
    OTTR_ASSIGN_OR_RETURN(auto e, runtime::cpu::CpuExecutor::Create(*step, exec_options));
    exec = std::make_unique<CpuStepRunner>(std::move(e));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--device ", config.device, ": expected cpu, cuda or auto"));
  }
  if (initialization != nullptr && config.resume.empty()) {
    OTTR_ASSIGN_OR_RETURN(auto init_exec, runtime::cpu::CpuExecutor::Create(*initialization));
    OTTR_ASSIGN_OR_RETURN(std::vector<Tensor> init_out, init_exec->Run({}));
    for (const auto& [target, output] : init_binding) {
      bool found = false;
      for (size_t k = 0; k < initialization->outputs().size(); ++k) {
        if (initialization->outputs()[k]->name() != output) continue;
        OTTR_RETURN_IF_ERROR(AnnotateStatus(exec->SetState(target, init_out[k]), "initialization_binding"));
        found = true;
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat("initialization_binding ", target, " <- ", output,
                                                       ": no such initialization output"));
      }
    }
    OTTR_RETURN_IF_ERROR(RefreshCopies(*step, *exec));
  }
  // The value reported as the loss: the step's "loss" output, else its first float scalar output.
  int loss_index = -1;
  for (size_t k = 0; k < step->outputs().size(); ++k) {
    const ir::TensorType& t = step->outputs()[k]->type();
    if (loss_index < 0 && ir::IsFloat(t.dtype) && t.is_static() && ir::NumElements(ir::StaticDims(*t.shape)) == 1) {
      loss_index = static_cast<int>(k);
    }
    if (step->outputs()[k]->name() == passes::kLossOutput) loss_index = static_cast<int>(k);
  }

#ifdef OTTR_HAVE_CUDA
  if (auto* cuda_runner = dynamic_cast<CudaStepRunner*>(exec.get())) {
    int scalar = 0;
    for (int k = 0; k < loss_index; ++k) {
      const ir::TensorType& t = step->outputs()[k]->type();
      scalar += ir::IsFloat(t.dtype) && t.is_static() && ir::NumElements(ir::StaticDims(*t.shape)) == 1;
    }
    cuda_runner->set_loss_scalar(loss_index >= 0 ? scalar : -1);
  }
#endif
  // Steps per epoch and in total.
  const int64_t n_train = steps_data ? static_cast<int64_t>(data.steps.size()) : data.train.size();
  const int64_t per_epoch = steps_data ? n_train : n_train / spec.batch;
  if (per_epoch == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the training set has ", n_train,
                                                   " examples, fewer than one batch of ", spec.batch));
  }
  int64_t total = per_epoch * config.epochs;
  if (config.max_steps > 0) total = config.max_steps;
  const int64_t epochs = (total + per_epoch - 1) / per_epoch;

  int64_t steps_done = 0;
  if (!config.resume.empty()) {
    OTTR_ASSIGN_OR_RETURN(runtime::Checkpoint ckpt, runtime::ReadCheckpoint(config.resume));
    std::set<std::string> copies;  // 16-bit parameter copies: recomputed from the parameters below
    for (const passes::LowPrecisionCopy& c : passes::LowPrecisionCopies(*step)) copies.insert(c.copy);
    for (const std::string& n : StateNames(*step)) {
      auto it = ckpt.tensors.find(n);
      if (it == ckpt.tensors.end() && copies.count(n) > 0) continue;
      if (it == ckpt.tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat(config.resume, ": no state '", n,
                                                       "' (a checkpoint of another model or optimizer?)"));
      }
      OTTR_RETURN_IF_ERROR(AnnotateStatus(exec->SetState(n, it->second), config.resume));
    }
    OTTR_RETURN_IF_ERROR(RefreshCopies(*step, *exec));
    OTTR_RETURN_IF_ERROR(exec->LoadRngState(ckpt.meta["rng"]));
    steps_done = MetaInt(ckpt, "steps_done");
    if (MetaInt(ckpt, "seed") != static_cast<int64_t>(config.seed)) {
      return absl::InvalidArgumentError(absl::StrCat(config.resume, " was written with --seed ",
                                                     ckpt.meta["seed"], ", this run uses ", config.seed));
    }
    std::printf("resumed from %s at step %lld\n", config.resume.c_str(), static_cast<long long>(steps_done));
  }

  std::unique_ptr<Evaluator> evaluator;
  const runtime::ArrayDataset* test = !steps_data && data.test.size() > 0 ? &data.test : nullptr;
  if (test != nullptr) {
    OTTR_ASSIGN_OR_RETURN(evaluator, Evaluator::Create(*forward, input, spec.loss.output, config.eval_batch, config.device));
  }
  const std::vector<std::string> state_names = StateNames(*step);
  std::printf("training %s: %lld state tensors, batch %lld, %lld steps/epoch, %lld epochs, %s\n",
              model_path.c_str(), static_cast<long long>(state_names.size()),
              static_cast<long long>(spec.batch), static_cast<long long>(per_epoch),
              static_cast<long long>(epochs), config.device.c_str());
  Progress progress(total, config.log_every);
  double last_accuracy = -1.0;
  for (int64_t epoch = steps_done / per_epoch; epoch < epochs && steps_done < total; ++epoch) {
    const auto t0 = Clock::now();
    const std::vector<int64_t> order =
        steps_data ? std::vector<int64_t>() : runtime::EpochPermutation(n_train, config.seed, epoch);
    double loss_sum = 0.0;
    int64_t loss_count = 0;
    int64_t submitted = 0;  // pipelined steps whose loss has not been read yet
    const int64_t drain_every = std::max<int64_t>(1, std::min<int64_t>(config.log_every, 200));
    // The feeds of batch b of this epoch, taken as step `at` (also rebuilt to diagnose a step).
    auto feeds_of = [&](int64_t b, int64_t at) -> absl::StatusOr<runtime::TensorMap> {
      runtime::TensorMap feeds;
      if (steps_data) {
        feeds = data.steps[b];
      } else {
        std::vector<int64_t> idx(order.begin() + b * spec.batch, order.begin() + (b + 1) * spec.batch);
        OTTR_ASSIGN_OR_RETURN(feeds, runtime::MakeBatch(data.train, idx, input, feature_dims,
                                                        passes::kLabelsInput));
      }
      if (!standard_training) {
        feeds[passes::kLrInput] = Tensor::Scalar<float>(static_cast<float>(config.schedule.At(at, total)));
      }
      return feeds;
    };
    for (int64_t b = steps_done % per_epoch; b < per_epoch && steps_done < total; ++b) {
      OTTR_ASSIGN_OR_RETURN(runtime::TensorMap feeds, feeds_of(b, steps_done));
      if (exec->Pipelined()) {
        // Submit now, read losses every few steps: the device never waits for the host.
        OTTR_RETURN_IF_ERROR(AnnotateStatus(exec->Submit(feeds), absl::StrCat("step ", steps_done)));
        ++steps_done;
        ++submitted;
        const bool last = b + 1 == per_epoch || steps_done == total;
        const bool checkpoint_due = !config.checkpoint.empty() && config.checkpoint_every > 0 &&
                                    steps_done % config.checkpoint_every == 0;
        const bool stop_due = config.stop_after > 0 && steps_done >= config.stop_after && steps_done < total;
        if (submitted < drain_every && !last && !checkpoint_due && !stop_due) continue;
        OTTR_ASSIGN_OR_RETURN(std::vector<double> losses, exec->Drain());
        submitted = 0;
        for (size_t i = 0; i < losses.size(); ++i) {
          const int64_t at = steps_done - static_cast<int64_t>(losses.size()) + static_cast<int64_t>(i);
          if (!std::isfinite(losses[i]) && step_skips_on_device && config.nan_skip) {
            progress.EndLine();
            std::printf("step %lld: loss %g is not finite: step skipped on the device\n",
                        static_cast<long long>(at), losses[i]);
            continue;
          }
          if (!std::isfinite(losses[i])) {
            progress.EndLine();
            // The batch of step `at` (this epoch's: losses are drained at every epoch's end).
            std::string where = "unknown";
            if (auto bad = feeds_of(at % per_epoch, at); bad.ok()) where = exec->Diagnose(*bad);
            return absl::DataLossError(absl::StrCat(
                "step ", at, ": the loss is ", losses[i], "; first non-finite tensor: ", where,
                step_skips_on_device
                    ? absl::StrCat(". The step was skipped on the device; the run stopped at step ", steps_done,
                                   " (the loss is read every ", drain_every,
                                   " steps). Nothing was written after the last checkpoint; use --nan-policy skip "
                                   "to skip such steps")
                    : absl::StrCat(" (", config.device, " checks the loss every ", drain_every,
                                   " steps; parameters were updated after it). Nothing was written after the "
                                   "last checkpoint")));
          }
          loss_sum += losses[i];
          ++loss_count;
        }
        if (!losses.empty()) progress.Update(steps_done, losses.back());
        if (checkpoint_due) {
          OTTR_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint, *exec, *step, steps_done, epoch, b + 1, config.seed));
        }
        if (stop_due) {
          progress.EndLine();
          if (!config.checkpoint.empty()) {
            OTTR_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint, *exec, *step, steps_done, epoch, b + 1, config.seed));
          }
          std::printf("stopped after step %lld of %lld (--stop-after); continue with --resume %s\n",
                      static_cast<long long>(steps_done), static_cast<long long>(total), config.checkpoint.c_str());
          return absl::OkStatus();
        }
        continue;
      }
      auto out = exec->Run(feeds);
      if (!out.ok()) return AnnotateStatus(out.status(), absl::StrCat("step ", steps_done));
      const double loss = loss_index >= 0 ? (*out)[loss_index].GetAsDouble(0) : 0.0;
      const bool finite = std::isfinite(loss) && exec->UpdatesFinite();
      if (!finite) {
        // Find the first non-finite tensor by re-running the step with checks on.
        const std::string where = exec->Diagnose(feeds);
        progress.EndLine();
        if (!config.nan_skip) {
          return absl::DataLossError(absl::StrCat(
              "step ", steps_done, ": the loss is ", loss, "; first non-finite tensor: ", where,
              exec->CanSkipSteps() ? ". Parameters stay as before this step; use --nan-policy skip to skip such steps"
                                   : ". Nothing was written after the last checkpoint"));
        }
        std::printf("step %lld: loss %g is not finite (%s): step skipped\n",
                    static_cast<long long>(steps_done), loss, where.c_str());
        ++steps_done;
        continue;
      }
      exec->Commit();
      loss_sum += loss;
      ++loss_count;
      ++steps_done;
      progress.Update(steps_done, loss);
      if (!config.checkpoint.empty() && config.checkpoint_every > 0 &&
          steps_done % config.checkpoint_every == 0) {
        OTTR_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint, *exec, *step, steps_done, epoch,
                                            b + 1, config.seed));
      }
      if (config.stop_after > 0 && steps_done >= config.stop_after && steps_done < total) {
        progress.EndLine();
        if (!config.checkpoint.empty()) {
          OTTR_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint, *exec, *step, steps_done, epoch,
                                              b + 1, config.seed));
        }
        std::printf("stopped after step %lld of %lld (--stop-after); continue with --resume %s\n",
                    static_cast<long long>(steps_done), static_cast<long long>(total),
                    config.checkpoint.c_str());
        return absl::OkStatus();
      }
    }
    progress.EndLine();
    const double train_loss = loss_count ? loss_sum / loss_count : NAN;
    std::string line = absl::StrFormat("epoch %d/%d: train loss %.4f", epoch + 1, epochs, train_loss);
    if (!standard_training) {
      // Steps the device skipped (non-finite loss, or gradients that overflowed the loss scale)
      // did not advance the step counter.
      auto counter = exec->State(passes::kStepState);
      auto scale = exec->State(passes::kLossScaleState);
      const int64_t skipped = counter.ok() ? steps_done - counter->GetAsInt64(0) : 0;
      if (scale.ok()) {
        absl::StrAppend(&line, absl::StrFormat(", loss scale %g, %d steps skipped so far", scale->GetAsDouble(0), skipped));
      } else if (counter.ok() && skipped > 0) {
        absl::StrAppend(&line, absl::StrFormat(", %d steps skipped so far", skipped));
      }
    }
    if (evaluator != nullptr) {
      for (const std::string& n : state_names) {
        if (forward->FindValue(n) == nullptr) continue;
        OTTR_ASSIGN_OR_RETURN(Tensor t, exec->State(n));
        OTTR_RETURN_IF_ERROR(evaluator->SetParameter(n, t));
      }
      OTTR_ASSIGN_OR_RETURN(EvalResult r, evaluator->Evaluate(*test));
      last_accuracy = r.accuracy;
      absl::StrAppend(&line, absl::StrFormat(", test loss %.4f, test accuracy %.4f", r.loss, r.accuracy));
    }
    absl::StrAppend(&line, absl::StrFormat(" (%.1f s)", Seconds(t0, Clock::now())));
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (!config.checkpoint.empty()) {
      OTTR_RETURN_IF_ERROR(SaveCheckpoint(config.checkpoint, *exec, *step, steps_done, epoch,
                                          steps_done % per_epoch, config.seed));
    }
  }
  if (!config.out.empty()) {
    for (const std::string& n : state_names) {
      ir::Value* v = forward->FindValue(n);
      if (v == nullptr || !v->is_initializer()) continue;
      OTTR_ASSIGN_OR_RETURN(Tensor t, exec->State(n));
      OTTR_RETURN_IF_ERROR(forward->SetInitializerData(v, std::move(t)));
    }
    OTTR_RETURN_IF_ERROR(importer::UpdateInitializers(*forward, proto));
    std::string bytes;
    if (!proto.SerializeToString(&bytes)) return absl::ResourceExhaustedError("the trained model is too large");
    OTTR_RETURN_IF_ERROR(importer::WriteFileAtomically(config.out, bytes));
    std::printf("wrote %s\n", config.out.c_str());
  }
  if (last_accuracy >= 0) std::printf("test accuracy: %.4f\n", last_accuracy);
  return absl::OkStatus();
}

}  // namespace ottr::tools
