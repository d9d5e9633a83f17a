#include "runtime/cpu/kernel.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ottr::runtime::cpu {

Tensor& KernelContext::AllocateOutput(int i, DType dtype, std::vector<int64_t> dims) {
  if (planned_ != nullptr && i < static_cast<int>(planned_->size())) {
    const PlannedOutput& p = (*planned_)[i];
    if (p.data != nullptr && p.dtype == dtype && p.dims == dims) {
      (*outputs_)[i] = Tensor::View(dtype, std::move(dims), p.data);
      if (p.zero) std::memset(p.data, 0, (*outputs_)[i].nbytes());
      return (*outputs_)[i];
    }
  }
  (*outputs_)[i] = Tensor(dtype, std::move(dims));
  return (*outputs_)[i];
}

absl::Status KernelContext::Error(absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", msg));
}

absl::Status KernelContext::Unsupported(absl::string_view msg) const {
  return absl::UnimplementedError(absl::StrCat(node_.Describe(), ": ", msg));
}

namespace {
std::string Key(absl::string_view domain, absl::string_view op) {
  return absl::StrCat(domain, "::", op);
}
}  // namespace

const KernelRegistry& KernelRegistry::Global() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterElementwiseKernels(*r);
    RegisterActivationKernels(*r);
    RegisterReductionKernels(*r);
    RegisterTensorKernels(*r);
    RegisterLinalgKernels(*r);
    RegisterConvPoolKernels(*r);
    RegisterNormalizationKernels(*r);
    RegisterLossKernels(*r);
    RegisterTrainingKernels(*r);
    RegisterControlFlowKernels(*r);
    RegisterOttrTrainingKernels(*r);
    RegisterFusedGemmKernels(*r);
    return r;
  }();
  return *registry;
}

void KernelRegistry::Register(std::string domain, std::string op_type, KernelFn fn) {
  kernels_[Key(domain, op_type)] = std::move(fn);
}

const KernelFn* KernelRegistry::Find(absl::string_view domain, absl::string_view op_type) const {
  auto it = kernels_.find(Key(domain, op_type));
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::Ops() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, fn] : kernels_) {
    const size_t p = k.find("::");
    out.emplace_back(k.substr(0, p), k.substr(p + 2));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ottr::runtime::cpu
