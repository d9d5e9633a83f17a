#include "tools/eval.h"

#include <cmath>
#include <map>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "importer/onnx_importer.h"
#include "ir/status.h"
#include "tools/cli_common.h"
#include "tools/device.h"

namespace ottr::tools {

// Evaluation runs the model in inference mode: a BatchNormalization exported in training mode
// (batch statistics, running statistics as extra outputs) becomes the inference form that
// normalises with the running statistics.
absl::Status ToInferenceMode(ir::Graph& g) {
  for (ir::Node* n : g.nodes()) {
    if (!n->domain().empty() || n->op_type() != "BatchNormalization" || n->GetInt("training_mode", 0) == 0) continue;
    for (int i = 1; i < n->num_outputs(); ++i) {
      if (!n->output(i)->uses().empty() || g.IsRoot(n->output(i))) {
        return absl::InvalidArgumentError(absl::StrCat(n->Describe(), ": its running statistics are read in the graph"));
      }
    }
    std::map<std::string, ir::Attribute> attrs = n->attrs();
    attrs["training_mode"] = ir::Attribute(int64_t{0});
    std::vector<ir::Value*> inputs(n->inputs().begin(), n->inputs().end());
    ir::Value* y = n->output(0);
    const std::string name = y->name();
    OTTR_ASSIGN_OR_RETURN(ir::Node * m, g.AddNode({"BatchNormalization", "", inputs, {g.UniqueName(name + ".eval")},
                                                   attrs, n->origin()}));
    m->output(0)->set_type(y->type());
    g.ReplaceAllUsesWith(y, m->output(0));
    OTTR_RETURN_IF_ERROR(g.EraseNode(n));
    g.RenameValue(m->output(0), name);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const ir::Graph& forward,
                                                             const std::string& input,
                                                             const std::string& logits,
                                                             int64_t batch,
                                                             const std::string& device) {
  auto e = std::unique_ptr<Evaluator>(new Evaluator());
  e->device_ = device;
  e->graph_ = forward.Clone();
  OTTR_RETURN_IF_ERROR(ToInferenceMode(*e->graph_));
  e->input_ = input;
  const ir::Value* in = e->graph_->FindValue(input);
  if (in == nullptr || !in->type().has_rank() || in->type().rank() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("evaluation: no ranked input '", input, "'"));
  }
  for (size_t d = 1; d < in->type().shape->size(); ++d) {
    if (!(*in->type().shape)[d].is_static()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input, "' has a non-static dimension"));
    }
    e->feature_dims_.push_back((*in->type().shape)[d].value());
  }
  const ir::Dim& lead = (*in->type().shape)[0];
  e->fixed_batch_ = lead.is_static();
  e->batch_ = e->fixed_batch_ ? lead.value() : batch;
  e->output_index_ = -1;
  for (size_t i = 0; i < e->graph_->outputs().size(); ++i) {
    if (logits.empty() ? e->graph_->outputs().size() == 1 : e->graph_->outputs()[i]->name() == logits) {
      e->output_index_ = static_cast<int>(i);
    }
  }
  if (e->output_index_ < 0) {
    return absl::InvalidArgumentError(
        logits.empty() ? "the model has several outputs: name the logits with --logits"
                       : absl::StrCat("the model has no output named '", logits, "'"));
  }
  if (device == "cpu") {
    OTTR_ASSIGN_OR_RETURN(e->exec_, runtime::cpu::CpuExecutor::Create(*e->graph_));
  } else {
    OTTR_ASSIGN_OR_RETURN(e->device_exec_, MakeExecutor(*e->graph_, device));
  }
  return e;
}

absl::Status Evaluator::SetParameter(const std::string& name, const ir::Tensor& t) {
  if (exec_ != nullptr) return exec_->SetState(name, t);
  ir::Value* v = graph_->FindValue(name);
  if (v == nullptr || !v->is_initializer()) return absl::InvalidArgumentError(absl::StrCat("no parameter '", name, "'"));
  device_exec_.reset();  // compiled with the old values
  return graph_->SetInitializerData(v, t);
}

absl::StatusOr<EvalResult> Evaluator::Evaluate(const runtime::ArrayDataset& data) {
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t n = data.size();
  for (int64_t start = 0; start < n; start += batch_) {
    const int64_t b = std::min(batch_, n - start);
    if (fixed_batch_ && b != batch_) break;  // the model only takes full batches
    std::vector<int64_t> idx(b);
    for (int64_t i = 0; i < b; ++i) idx[i] = start + i;
    OTTR_ASSIGN_OR_RETURN(runtime::TensorMap feeds,
                          runtime::MakeBatch(data, idx, input_, feature_dims_, "labels"));
    const ir::Tensor labels = feeds["labels"];
    feeds.erase("labels");
    if (exec_ == nullptr && device_exec_ == nullptr) {
      OTTR_ASSIGN_OR_RETURN(device_exec_, MakeExecutor(*graph_, device_));
    }
    runtime::Executor& exec = exec_ != nullptr ? static_cast<runtime::Executor&>(*exec_) : *device_exec_;
    OTTR_ASSIGN_OR_RETURN(std::vector<ir::Tensor> out, exec.Run(feeds));
    const ir::Tensor& logits = out[output_index_];
    if (logits.rank() != 2 || logits.dim(0) != b) {
      return absl::InvalidArgumentError(absl::StrCat("evaluation needs logits [N, C], got ",
                                                     logits.DebugString(0)));
    }
    const int64_t c = logits.dim(1);
    for (int64_t i = 0; i < b; ++i) {
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < c; ++j) {
        const double v = logits.GetAsDouble(i * c + j);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      double sum = 0.0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(logits.GetAsDouble(i * c + j) - mx);
      const int64_t y = labels.GetAsInt64(i);
      if (y < 0 || y >= c) {
        return absl::InvalidArgumentError(absl::StrCat("label ", y, " of example ", start + i,
                                                       " is outside [0, ", c, ")"));
      }
      loss_sum += mx + std::log(sum) - logits.GetAsDouble(i * c + y);
      correct += arg == y;
      ++r.examples;
    }
  }
  if (r.examples == 0) return absl::InvalidArgumentError("no examples to evaluate");
  r.loss = loss_sum / r.examples;
  r.accuracy = static_cast<double>(correct) / r.examples;
  return r;
}

absl::Status CmdEval(const std::vector<std::string>& argv) {
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, {"data", "logits", "input", "batch", "normalize", "device"}, {"train-set"}));
  if (args.positional().size() != 1) return absl::InvalidArgumentError("eval takes one MODEL");
  if (!args.has("data")) return absl::InvalidArgumentError("eval needs --data SPEC");
  runtime::DataOptions dopt;
  const std::string norm = args.get("normalize", "scale");
  dopt.normalize = norm == "none" ? runtime::Normalize::kNone : runtime::Normalize::kScale;
  OTTR_ASSIGN_OR_RETURN(runtime::DataSource data, runtime::LoadData(args.get("data"), dopt));
  if (data.kind != runtime::DataSource::Kind::kArrays) {
    return absl::UnimplementedError("eval reads labelled arrays (IDX, .npy, fashion-mnist)");
  }
  OTTR_ASSIGN_OR_RETURN(auto graph, importer::ImportModelFile(args.positional()[0]));
  std::string input = args.get("input");
  if (input.empty()) {
    if (graph->inputs().size() != 1) return absl::InvalidArgumentError("name the model input with --input");
    input = graph->inputs()[0]->name();
  }
  OTTR_ASSIGN_OR_RETURN(int64_t batch, args.get_int("batch", 1000));
  OTTR_ASSIGN_OR_RETURN(auto ev, Evaluator::Create(*graph, input, args.get("logits"), batch,
                                                   ResolveDevice(args.get("device", "auto"))));
  const bool use_train = args.has("train-set") || data.test.size() == 0;
  OTTR_ASSIGN_OR_RETURN(EvalResult r, ev->Evaluate(use_train ? data.train : data.test));
  std::printf("%s set: %lld examples, loss %.4f, accuracy %.4f\n", use_train ? "train" : "test",
              static_cast<long long>(r.examples), r.loss, r.accuracy);
  return absl::OkStatus();
}

}  // namespace ottr::tools
