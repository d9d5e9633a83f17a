// The elementwise ops on CUDA (kernels in kernels/elementwise*.cu): NumPy-broadcast arithmetic,
// Pow, Mod, comparisons and logic, Where, unary math, variadic Sum/Mean/Max/Min, Clip, Cast and
// CastLike; the activations are in activation_ops.cc and registered from here.
//
// Compile validates types and shapes like the CPU kernels (runtime/cpu/elementwise_kernels.cc,
// whose semantics the kernels follow), picks the kernel for the element types, and precomputes
// the broadcast plan (kernels/elementwise_plan.h). Differences from the CPU reference:
//   - integer Div/Mod by zero: an error at compile time when the divisor is a compile-time
//     constant containing a zero; a zero seen only at run time gives 0 (quotient and remainder,
//     as NumPy returns) instead of the CPU's InvalidArgument, which a kernel cannot raise;
//   - float math uses CUDA's libdevice (exp, log, sin, pow, erf... within 1-2 ulp of the
//     correctly rounded result; +, −, ×, ÷, sqrt, rounding and conversions are exact as on the
//     CPU), so results may differ from the CPU's in the last bits.
#include <nvtx3/nvToolsExt.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels/elementwise.h"
#include "runtime/cuda/kernels/elementwise_plan.h"

namespace ottr::cuda {

void RegisterActivationCudaOps(CudaOpRegistry& r);  // activation_ops.cc

namespace {

using ir::DType;
using kernels::BinaryOp;
using kernels::IndexPlan;

int Code(DType t) { return ir::DTypeToOnnx(t); }

std::string DimsString(const std::vector<int64_t>& dims) {
  return ir::ShapeToString(ir::ShapeFromDims(dims));
}

absl::Status UnsupportedType(const OpCompileContext& ctx, DType t) {
  return ctx.Unsupported(absl::StrCat("element type ", ir::DTypeName(t), " is not supported"));
}

absl::Status SameDType(const OpCompileContext& ctx, int i, int j) {
  const DType a = ctx.input_type(i).dtype, b = ctx.input_type(j).dtype;
  if (a == b) return absl::OkStatus();
  return ctx.Error(absl::StrCat("inputs have different element types ", ir::DTypeName(a), " and ",
                                ir::DTypeName(b)));
}

// The plan of inputs `inputs` (in that order) broadcast to output 0, which must be exactly their
// broadcast.
template <int N>
absl::StatusOr<IndexPlan<N>> BroadcastPlan(const OpCompileContext& ctx, const std::vector<int>& inputs) {
  std::vector<std::vector<int64_t>> dims;
  std::vector<int64_t> expected;
  std::string shapes;
  for (int i : inputs) {
    dims.push_back(ctx.input_dims(i));
    absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", DimsString(dims.back()));
    std::optional<std::vector<int64_t>> b =
        dims.size() == 1 ? dims.back() : ir::BroadcastDims(expected, dims.back());
    if (!b.has_value()) return ctx.Error(absl::StrCat("shapes ", shapes, " cannot be broadcast"));
    expected = *b;
  }
  const std::vector<int64_t> out = ctx.output_dims(0);
  if (out != expected) {
    return ctx.Error(absl::StrCat("output shape ", DimsString(out), " is not the broadcast ",
                                  DimsString(expected), " of the inputs ", shapes));
  }
  IndexPlan<N> plan;
  std::string error;
  if (!kernels::MakeIndexPlan<N>(out, dims, &plan, &error)) {
    return ctx.Unsupported(absl::StrCat("broadcast of ", shapes, ": ", error));
  }
  return plan;
}

// The output must have input 0's shape (unary ops); returns its element count.
absl::StatusOr<int64_t> SameShapeElements(const OpCompileContext& ctx) {
  const std::vector<int64_t> in = ctx.input_dims(0), out = ctx.output_dims(0);
  if (in != out) {
    return ctx.Error(absl::StrCat("output shape ", DimsString(out), " differs from the input's ",
                                  DimsString(in)));
  }
  return ir::NumElements(in);
}

// InvalidArgument when the divisor of an integer Div/Mod is a compile-time constant holding a
// zero (a run-time zero gives 0: see the file comment).
absl::Status CheckConstantDivisor(const OpCompileContext& ctx, int64_t out_elements) {
  const ir::Tensor* b = ctx.constant_input(1);
  if (b == nullptr || !ir::IsInteger(b->dtype()) || out_elements == 0) return absl::OkStatus();
  bool zero = false;
  ir::VisitDType(b->dtype(), [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      for (T v : b->span<T>()) zero |= v == 0;
    }
  });
  return zero ? ctx.Error("integer division by zero") : absl::OkStatus();
}

// A launch closure around `run` with an NVTX range named `name`; skipped when output 0 is not
// read or empty.
template <typename Run>
LaunchFn Launch(const char* name, int64_t elements, Run run) {
  return [name, elements, run](const LaunchArgs& a) -> absl::Status {
    if (a.outputs[0] == nullptr || elements == 0) return absl::OkStatus();
    nvtxRangePushA(name);
    const cudaError_t e = run(a);
    nvtxRangePop();
    OTTR_CUDA_RETURN_IF_ERROR(e);
    return absl::OkStatus();
  };
}

// ---- Binary ops -----------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileBinary(OpCompileContext& ctx, BinaryOp op, const char* name) {
  const DType ta = ctx.input_type(0).dtype, tb = ctx.input_type(1).dtype;
  kernels::BinaryFn fn = nullptr;
  switch (op) {
    case BinaryOp::kPow:
      fn = kernels::FindPow(Code(ta), Code(tb));
      if (fn == nullptr) return UnsupportedType(ctx, kernels::FindPow(Code(ta), 1) ? tb : ta);
      break;
    case BinaryOp::kAnd:
    case BinaryOp::kOr:
    case BinaryOp::kXor:
      if (ta != DType::kBool || tb != DType::kBool) {
        return ctx.Error(absl::StrCat("inputs must be bool, got ", ir::DTypeName(ta), " and ",
                                      ir::DTypeName(tb)));
      }
      fn = kernels::FindComparison(op, Code(ta), Code(tb));
      break;
    case BinaryOp::kEqual:
    case BinaryOp::kLess:
    case BinaryOp::kGreater:
    case BinaryOp::kLessOrEqual:
    case BinaryOp::kGreaterOrEqual:
      OTTR_RETURN_IF_ERROR(SameDType(ctx, 0, 1));
      fn = kernels::FindComparison(op, Code(ta), Code(tb));
      break;
    default:
      OTTR_RETURN_IF_ERROR(SameDType(ctx, 0, 1));
      fn = kernels::FindArithmetic(op, Code(ta), Code(tb));
      break;
  }
  if (fn == nullptr) return UnsupportedType(ctx, ta);
  OTTR_ASSIGN_OR_RETURN(IndexPlan<2> plan, BroadcastPlan<2>(ctx, {0, 1}));
  if (op == BinaryOp::kDiv || op == BinaryOp::kMod || op == BinaryOp::kFmod) {
    OTTR_RETURN_IF_ERROR(CheckConstantDivisor(ctx, plan.n));
  }
  CompiledOp c;
  c.launch = Launch(name, plan.n, [fn, plan](const LaunchArgs& a) {
    return fn(plan, a.inputs[0], a.inputs[1], a.outputs[0], a.stream);
  });
  return c;
}

OpCompiler Binary(BinaryOp op, const char* name) {
  return [op, name](OpCompileContext& ctx) { return CompileBinary(ctx, op, name); };
}

absl::StatusOr<CompiledOp> CompileMod(OpCompileContext& ctx) {
  const bool fmod = ctx.node().GetInt("fmod", 0) != 0;
  return CompileBinary(ctx, fmod ? BinaryOp::kFmod : BinaryOp::kMod, "Mod");
}

// ---- Unary ops ------------------------------------------------------------------------------

OpCompiler Unary(kernels::UnaryOp op, const char* name) {
  return [op, name](OpCompileContext& ctx) -> absl::StatusOr<CompiledOp> {
    const DType t = ctx.input_type(0).dtype;
    kernels::UnaryFn fn = kernels::FindUnary(op, Code(t));
    if (fn == nullptr) return UnsupportedType(ctx, t);
    OTTR_ASSIGN_OR_RETURN(int64_t n, SameShapeElements(ctx));
    CompiledOp c;
    c.launch = Launch(name, n, [fn, n](const LaunchArgs& a) {
      return fn(a.inputs[0], a.outputs[0], n, a.stream);
    });
    return c;
  };
}

// ---- Variadic Sum, Mean, Max, Min -----------------------------------------------------------

OpCompiler Variadic(kernels::FoldOp op, const char* name) {
  return [op, name](OpCompileContext& ctx) -> absl::StatusOr<CompiledOp> {
    std::vector<int> present;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) continue;
      if (!present.empty()) OTTR_RETURN_IF_ERROR(SameDType(ctx, present[0], i));
      present.push_back(i);
    }
    if (present.empty()) return ctx.Error("needs at least one input");
    const DType t = ctx.input_type(present[0]).dtype;
    kernels::FoldFn fn = kernels::FindFold(op, Code(t));
    if (fn == nullptr) return UnsupportedType(ctx, t);
    // Validates the shapes (the output is the broadcast of every input).
    std::vector<std::vector<int64_t>> all_dims;
    {
      std::vector<int64_t> expected;
      std::string shapes;
      for (int i : present) {
        std::vector<int64_t> d = ctx.input_dims(i);
        absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", DimsString(d));
        std::optional<std::vector<int64_t>> b =
            expected.empty() && all_dims.empty() ? d : ir::BroadcastDims(expected, d);
        if (!b.has_value()) return ctx.Error(absl::StrCat("shapes ", shapes, " cannot be broadcast"));
        expected = *b;
        all_dims.push_back(std::move(d));
      }
      if (ctx.output_dims(0) != expected) {
        return ctx.Error(absl::StrCat("output shape ", DimsString(ctx.output_dims(0)),
                                      " is not the broadcast ", DimsString(expected),
                                      " of the inputs ", shapes));
      }
    }
    // Chunks of at most kMaxFoldInputs operands; every chunk after the first starts from the
    // output (-1 below), which has the output's shape.
    const std::vector<int64_t> out = ctx.output_dims(0);
    struct Chunk {
      IndexPlan<kernels::kMaxFoldInputs> plan;
      std::vector<int> operands;  // input index, or -1 for the output
    };
    std::vector<Chunk> chunks;
    size_t next = 0;
    while (next < present.size()) {
      Chunk ch;
      std::vector<std::vector<int64_t>> dims;
      if (next > 0) {
        ch.operands.push_back(-1);
        dims.push_back(out);
      }
      while (next < present.size() && ch.operands.size() < kernels::kMaxFoldInputs) {
        ch.operands.push_back(present[next]);
        dims.push_back(all_dims[next]);
        ++next;
      }
      std::string error;
      if (!kernels::MakeIndexPlan<kernels::kMaxFoldInputs>(out, dims, &ch.plan, &error)) {
        return ctx.Unsupported(absl::StrCat("broadcast: ", error));
      }
      chunks.push_back(std::move(ch));
    }
    const int64_t mean_count =
        op == kernels::FoldOp::kMean ? static_cast<int64_t>(present.size()) : 0;
    const int64_t n = ir::NumElements(out);
    CompiledOp c;
    c.launch = Launch(name, n, [fn, chunks, mean_count](const LaunchArgs& a) -> cudaError_t {
      for (size_t j = 0; j < chunks.size(); ++j) {
        kernels::FoldInputs in;
        const std::vector<int>& ops = chunks[j].operands;
        for (size_t k = 0; k < ops.size(); ++k) {
          in.ptr[k] = ops[k] < 0 ? a.outputs[0] : a.inputs[ops[k]];
        }
        const cudaError_t e = fn(chunks[j].plan, in, static_cast<int>(ops.size()),
                                 j + 1 == chunks.size() ? mean_count : 0, a.outputs[0], a.stream);
        if (e != cudaSuccess) return e;
      }
      return cudaSuccess;
    });
    return c;
  };
}

// ---- Where ----------------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileWhere(OpCompileContext& ctx) {
  const DType tc = ctx.input_type(0).dtype;
  if (tc != DType::kBool) {
    return ctx.Error(absl::StrCat("condition must be bool, got ", ir::DTypeName(tc)));
  }
  OTTR_RETURN_IF_ERROR(SameDType(ctx, 1, 2));
  const DType t = ctx.input_type(1).dtype;
  kernels::WhereFn fn = kernels::FindWhere(static_cast<int>(ir::DTypeSize(t)));
  if (fn == nullptr) return UnsupportedType(ctx, t);
  OTTR_ASSIGN_OR_RETURN(IndexPlan<3> plan, BroadcastPlan<3>(ctx, {0, 1, 2}));
  CompiledOp c;
  c.launch = Launch("Where", plan.n, [fn, plan](const LaunchArgs& a) {
    return fn(plan, a.inputs[0], a.inputs[1], a.inputs[2], a.outputs[0], a.stream);
  });
  return c;
}

// ---- Clip -----------------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileClip(OpCompileContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    OTTR_RETURN_IF_ERROR(SameDType(ctx, 0, i));
    const int64_t n = ir::NumElements(ctx.input_dims(i));
    if (n != 1) {
      return ctx.Error(absl::StrCat(i == 1 ? "min" : "max", " must be a scalar, got ", n,
                                    " elements"));
    }
  }
  kernels::ClipFn fn = kernels::FindClip(Code(t));
  if (fn == nullptr) return UnsupportedType(ctx, t);
  OTTR_ASSIGN_OR_RETURN(int64_t n, SameShapeElements(ctx));
  const bool has_lo = ctx.has_input(1), has_hi = ctx.has_input(2);
  CompiledOp c;
  c.launch = Launch("Clip", n, [fn, n, has_lo, has_hi](const LaunchArgs& a) {
    return fn(a.inputs[0], has_lo ? a.inputs[1] : nullptr, has_hi ? a.inputs[2] : nullptr,
              a.outputs[0], n, a.stream);
  });
  return c;
}

// ---- Cast, CastLike -------------------------------------------------------------------------

absl::StatusOr<CompiledOp> CompileCastTo(OpCompileContext& ctx, DType to, const char* name) {
  const DType from = ctx.input_type(0).dtype;
  OTTR_ASSIGN_OR_RETURN(int64_t n, SameShapeElements(ctx));
  if (ctx.output_type(0).dtype != to) {
    return ctx.Error(absl::StrCat("output has element type ", ir::DTypeName(ctx.output_type(0).dtype),
                                  ", expected ", ir::DTypeName(to)));
  }
  CompiledOp c;
  if (from == to) {
    // A view of the input; copied when the executor gives it its own buffer.
    const int64_t bytes = n * static_cast<int64_t>(ir::DTypeSize(from));
    c.views = {{0, 0}};
    c.launch = Launch(name, n, [bytes](const LaunchArgs& a) -> cudaError_t {
      if (a.outputs[0] == a.inputs[0]) return cudaSuccess;
      return cudaMemcpyAsync(a.outputs[0], a.inputs[0], bytes, cudaMemcpyDeviceToDevice, a.stream);
    });
    return c;
  }
  kernels::UnaryFn fn = kernels::FindCast(Code(from), Code(to));
  if (fn == nullptr) {
    return ctx.Unsupported(absl::StrCat("cast from ", ir::DTypeName(from), " to ",
                                        ir::DTypeName(to), " is not supported"));
  }
  c.launch = Launch(name, n, [fn, n](const LaunchArgs& a) {
    return fn(a.inputs[0], a.outputs[0], n, a.stream);
  });
  return c;
}

absl::StatusOr<CompiledOp> CompileCast(OpCompileContext& ctx) {
  const int64_t to = ctx.node().GetInt("to", 0);
  absl::StatusOr<DType> t = ir::DTypeFromOnnx(static_cast<int32_t>(to));
  if (!t.ok() || ir::DTypeSize(*t) == 0) {
    return ctx.Unsupported(absl::StrCat("cast to ONNX type ", to, " is not supported"));
  }
  return CompileCastTo(ctx, *t, "Cast");
}

absl::StatusOr<CompiledOp> CompileCastLike(OpCompileContext& ctx) {
  return CompileCastTo(ctx, ctx.input_type(1).dtype, "CastLike");
}

}  // namespace

void RegisterElementwiseCudaOps(CudaOpRegistry& r) {
  r.Register("", "Add", Binary(BinaryOp::kAdd, "Add"));
  r.Register("", "Sub", Binary(BinaryOp::kSub, "Sub"));
  r.Register("", "Mul", Binary(BinaryOp::kMul, "Mul"));
  r.Register("", "Div", Binary(BinaryOp::kDiv, "Div"));
  r.Register("", "Mod", CompileMod);
  r.Register("", "Pow", Binary(BinaryOp::kPow, "Pow"));

  using kernels::UnaryOp;
  r.Register("", "Neg", Unary(UnaryOp::kNeg, "Neg"));
  r.Register("", "Abs", Unary(UnaryOp::kAbs, "Abs"));
  r.Register("", "Sign", Unary(UnaryOp::kSign, "Sign"));
  r.Register("", "Erf", Unary(UnaryOp::kErf, "Erf"));
  r.Register("", "Sqrt", Unary(UnaryOp::kSqrt, "Sqrt"));
  r.Register("", "Exp", Unary(UnaryOp::kExp, "Exp"));
  r.Register("", "Log", Unary(UnaryOp::kLog, "Log"));
  r.Register("", "Reciprocal", Unary(UnaryOp::kReciprocal, "Reciprocal"));
  r.Register("", "Ceil", Unary(UnaryOp::kCeil, "Ceil"));
  r.Register("", "Floor", Unary(UnaryOp::kFloor, "Floor"));
  r.Register("", "Round", Unary(UnaryOp::kRound, "Round"));
  r.Register("", "Sin", Unary(UnaryOp::kSin, "Sin"));
  r.Register("", "Cos", Unary(UnaryOp::kCos, "Cos"));
  r.Register("", "Not", Unary(UnaryOp::kNot, "Not"));

  using kernels::FoldOp;
  r.Register("", "Sum", Variadic(FoldOp::kSum, "Sum"));
  r.Register("", "Mean", Variadic(FoldOp::kMean, "Mean"));
  r.Register("", "Max", Variadic(FoldOp::kMax, "Max"));
  r.Register("", "Min", Variadic(FoldOp::kMin, "Min"));

  r.Register("", "Equal", Binary(BinaryOp::kEqual, "Equal"));
  r.Register("", "Less", Binary(BinaryOp::kLess, "Less"));
  r.Register("", "Greater", Binary(BinaryOp::kGreater, "Greater"));
  r.Register("", "LessOrEqual", Binary(BinaryOp::kLessOrEqual, "LessOrEqual"));
  r.Register("", "GreaterOrEqual", Binary(BinaryOp::kGreaterOrEqual, "GreaterOrEqual"));
  r.Register("", "And", Binary(BinaryOp::kAnd, "And"));
  r.Register("", "Or", Binary(BinaryOp::kOr, "Or"));
  r.Register("", "Xor", Binary(BinaryOp::kXor, "Xor"));
  r.Register("", "Where", CompileWhere);

  r.Register("", "Clip", CompileClip);
  r.Register("", "Cast", CompileCast);
  r.Register("", "CastLike", CompileCastLike);

  RegisterActivationCudaOps(r);
}

}  // namespace ottr::cuda
