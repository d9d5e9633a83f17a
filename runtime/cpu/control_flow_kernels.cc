// CPU kernels of Loop and If. Subgraphs run through the executor (ctx.RunSubgraph), which binds
// their inputs and resolves their captures in the enclosing scopes.
//
// Loop follows ONNX's table of the (M, cond) combinations:
//   (M, cond):   for (i = 0; i < M && cond; ++i) cond = body(...)
//   (M, ""):     for (i = 0; i < M; ++i) body(...)          -- the body's cond is ignored
//   ("", cond):  for (i = 0; cond; ++i) cond = body(...)
//   ("", ""):    never terminates; rejected here rather than hanging.
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_kernel_util.h"

namespace ottr::runtime::cpu {
namespace {

std::string DimsString(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

absl::StatusOr<const ir::Graph*> GraphAttr(const KernelContext& ctx, const std::string& name) {
  const ir::Attribute* a = ctx.node().attr(name);
  if (a == nullptr || a->kind() != ir::Attribute::Kind::kGraph || a->g() == nullptr) {
    return ctx.Error(absl::StrCat("needs the graph attribute '", name, "'"));
  }
  return a->g().get();
}

// A one-element tensor read as a condition (bool; numbers are true when non-zero).
absl::StatusOr<bool> ReadCondition(const KernelContext& ctx, const Tensor& t, absl::string_view what) {
  if (t.num_elements() != 1) {
    return ctx.Error(absl::StrCat(what, " must have exactly one element, got ", DimsString(t.dims())));
  }
  return t.GetAsDouble(0) != 0.0;
}

// Stacks the per-iteration values of one scan output along a new leading axis.
absl::StatusOr<Tensor> StackScan(const KernelContext& ctx, const std::vector<Tensor>& parts,
                                 const ir::TensorType& body_type, int index) {
  if (parts.empty()) {
    // Zero iterations: [0, dims of the body output] with unknown dims taken as 0.
    std::vector<int64_t> dims = {0};
    if (body_type.has_rank()) {
      for (const ir::Dim& d : *body_type.shape) dims.push_back(d.is_static() ? d.value() : 0);
    }
    const DType dtype = body_type.dtype == DType::kUndefined ? DType::kFloat32 : body_type.dtype;
    return Tensor(dtype, dims);
  }
  const Tensor& first = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) {
    if (parts[k].dtype() != first.dtype() || parts[k].dims() != first.dims()) {
      return ctx.Error(absl::StrCat("scan output ", index, " is ", ir::DTypeName(first.dtype()),
                                    DimsString(first.dims()), " in iteration 0 but ",
                                    ir::DTypeName(parts[k].dtype()), DimsString(parts[k].dims()),
                                    " in iteration ", k));
    }
  }
  std::vector<int64_t> dims = {static_cast<int64_t>(parts.size())};
  dims.insert(dims.end(), first.dims().begin(), first.dims().end());
  Tensor out(first.dtype(), dims);
  const size_t bytes = first.nbytes();
  for (size_t k = 0; k < parts.size() && bytes > 0; ++k) {
    std::memcpy(static_cast<char*>(out.raw_data()) + k * bytes, parts[k].raw_data(), bytes);
  }
  return out;
}

absl::Status LoopKernel(KernelContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const ir::Graph* body, GraphAttr(ctx, "body"));
  const int n_carried = ctx.num_inputs() - 2;
  const int n_scan = ctx.num_outputs() - n_carried;
  if (n_carried < 0 || n_scan < 0 ||
      static_cast<int>(body->outputs().size()) != 1 + n_carried + n_scan) {
    return ctx.Error(absl::StrCat("inputs (", ctx.num_inputs(), "), outputs (", ctx.num_outputs(),
                                  ") and body outputs (", body->outputs().size(),
                                  ") do not match"));
  }
  const bool has_m = ctx.has_input(0);
  const bool has_cond = ctx.has_input(1);
  if (!has_m && !has_cond) {
    return ctx.Error("neither M nor cond is given: the loop would never terminate");
  }
  int64_t trip_count = std::numeric_limits<int64_t>::max();
  if (has_m) {
    if (ctx.input(0).num_elements() != 1) return ctx.Error("M must have exactly one element");
    trip_count = ctx.input(0).GetAsInt64(0);
  }
  bool cond = true;
  if (has_cond) {
    OTTR_ASSIGN_OR_RETURN(cond, ReadCondition(ctx, ctx.input(1), "cond"));
  }
  std::vector<Tensor> carried;
  for (int i = 0; i < n_carried; ++i) {
    if (!ctx.has_input(2 + i)) return ctx.Error(absl::StrCat("loop-carried input ", i, " is missing"));
    carried.push_back(ctx.input(2 + i));
  }
  std::vector<std::vector<Tensor>> scans(n_scan);
  for (int64_t i = 0; i < trip_count && cond; ++i) {
    std::vector<Tensor> inputs = {Tensor::Scalar<int64_t>(i), Tensor::Scalar<bool>(cond)};
    inputs.insert(inputs.end(), carried.begin(), carried.end());
    absl::StatusOr<std::vector<Tensor>> outs = ctx.RunSubgraph(*body, inputs);
    if (!outs.ok()) {
      return AnnotateStatus(outs.status(), absl::StrCat(ctx.node().Describe(), ": iteration ", i));
    }
    if (has_cond) {
      OTTR_ASSIGN_OR_RETURN(cond, ReadCondition(ctx, (*outs)[0], "the body's cond output"));
    }
    for (int k = 0; k < n_carried; ++k) carried[k] = std::move((*outs)[1 + k]);
    for (int j = 0; j < n_scan; ++j) scans[j].push_back(std::move((*outs)[1 + n_carried + j]));
  }
  for (int k = 0; k < n_carried; ++k) ctx.SetOutput(k, carried[k]);
  for (int j = 0; j < n_scan; ++j) {
    OTTR_ASSIGN_OR_RETURN(Tensor t, StackScan(ctx, scans[j],
                                              body->outputs()[1 + n_carried + j]->type(), j));
    ctx.SetOutput(n_carried + j, std::move(t));
  }
  return absl::OkStatus();
}

absl::Status IfKernel(KernelContext& ctx) {
  OTTR_ASSIGN_OR_RETURN(const bool cond, ReadCondition(ctx, ctx.input(0), "cond"));
  OTTR_ASSIGN_OR_RETURN(const ir::Graph* branch,
                        GraphAttr(ctx, cond ? "then_branch" : "else_branch"));
  absl::StatusOr<std::vector<Tensor>> outs = ctx.RunSubgraph(*branch, {});
  if (!outs.ok()) {
    return AnnotateStatus(outs.status(), absl::StrCat(ctx.node().Describe(), ": ",
                                                      cond ? "then" : "else", " branch"));
  }
  if (static_cast<int>(outs->size()) != ctx.num_outputs()) {
    return ctx.Error(absl::StrCat("the ", cond ? "then" : "else", " branch has ", outs->size(),
                                  " outputs, the node ", ctx.num_outputs()));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.SetOutput(i, std::move((*outs)[i]));
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlowKernels(KernelRegistry& r) {
  r.Register("", "Loop", LoopKernel);
  r.Register("", "If", IfKernel);
}

}  // namespace ottr::runtime::cpu
