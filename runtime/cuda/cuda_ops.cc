#include "runtime/cuda/cuda_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ottr::cuda {

absl::Status OpCompileContext::Error(absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), " (CUDA): ", msg));
}

absl::Status OpCompileContext::Unsupported(absl::string_view msg) const {
  return absl::UnimplementedError(absl::StrCat(node_.Describe(), " (CUDA): ", msg));
}

namespace {
std::string Key(absl::string_view domain, absl::string_view op) { return absl::StrCat(domain, "::", op); }
}  // namespace

const CudaOpRegistry& CudaOpRegistry::Global() {
  static const CudaOpRegistry* r = [] {
    auto* reg = new CudaOpRegistry();
    RegisterGemmCudaOps(*reg);
    RegisterElementwiseCudaOps(*reg);
    RegisterTensorCudaOps(*reg);
    RegisterReductionCudaOps(*reg);
    RegisterLossCudaOps(*reg);
    RegisterNormalizationCudaOps(*reg);
    RegisterConvPoolCudaOps(*reg);
    RegisterOptimizerCudaOps(*reg);
    return reg;
  }();
  return *r;
}

void CudaOpRegistry::Register(std::string domain, std::string op_type, OpCompiler fn) {
  ops_[Key(domain, op_type)] = std::move(fn);
}

const OpCompiler* CudaOpRegistry::Find(absl::string_view domain, absl::string_view op_type) const {
  auto it = ops_.find(Key(domain, op_type));
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> CudaOpRegistry::Ops() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, fn] : ops_) {
    const size_t p = k.find("::");
    out.emplace_back(k.substr(0, p), k.substr(p + 2));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ottr::cuda
