// Element types of ottr tensors. The numeric values are ONNX's TensorProto.DataType codes, so an
// ONNX data_type converts with a range check and no table.
#ifndef OTTR_IR_DTYPE_H_
#define OTTR_IR_DTYPE_H_

#include <cstdint>
#include <limits>
#include <cstring>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"

namespace ottr::ir {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Size in bytes of one element; 0 for kUndefined and kString (unsupported in tensors).
size_t DTypeSize(DType t);
// Short printable name: f32, f16, bf16, f64, i8..i64, u8..u64, bool.
absl::string_view DTypeName(DType t);
// Inverse of DTypeName.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);
// ONNX TensorProto.DataType code -> DType; Unimplemented for types ottr does not run.
absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type);
inline int32_t DTypeToOnnx(DType t) { return static_cast<int32_t>(t); }

bool IsFloat(DType t);     // f16, bf16, f32, f64
bool IsInteger(DType t);   // signed and unsigned integers (not bool)
bool IsSigned(DType t);    // signed integers and floats

// IEEE half and bfloat16 storage with conversions through float (round to nearest even).
struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
float HalfToFloat(Half h);
Half FloatToHalf(float f);
inline float BFloat16ToFloat(BFloat16 b) {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
BFloat16 FloatToBFloat16(float f);

// Maps a C++ element type to its DType.
template <typename T>
struct DTypeOf;
#define OTTR_DTYPE_OF_(T, D) \
  template <>                \
  struct DTypeOf<T> {        \
    static constexpr DType value = DType::D; \
  };
OTTR_DTYPE_OF_(float, kFloat32)
OTTR_DTYPE_OF_(double, kFloat64)
OTTR_DTYPE_OF_(Half, kFloat16)
OTTR_DTYPE_OF_(BFloat16, kBFloat16)
OTTR_DTYPE_OF_(int8_t, kInt8)
OTTR_DTYPE_OF_(int16_t, kInt16)
OTTR_DTYPE_OF_(int32_t, kInt32)
OTTR_DTYPE_OF_(int64_t, kInt64)
OTTR_DTYPE_OF_(uint8_t, kUInt8)
OTTR_DTYPE_OF_(uint16_t, kUInt16)
OTTR_DTYPE_OF_(uint32_t, kUInt32)
OTTR_DTYPE_OF_(uint64_t, kUInt64)
OTTR_DTYPE_OF_(bool, kBool)
#undef OTTR_DTYPE_OF_

// Calls f.template operator()<T>() with the C++ type of `t`. Returns f's result.
// Usage: VisitDType(t, [&]<typename T>() { ... });
template <typename F>
decltype(auto) VisitDType(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f.template operator()<float>();
    case DType::kFloat64: return f.template operator()<double>();
    case DType::kFloat16: return f.template operator()<Half>();
    case DType::kBFloat16: return f.template operator()<BFloat16>();
    case DType::kInt8: return f.template operator()<int8_t>();
    case DType::kInt16: return f.template operator()<int16_t>();
    case DType::kInt32: return f.template operator()<int32_t>();
    case DType::kInt64: return f.template operator()<int64_t>();
    case DType::kUInt8: return f.template operator()<uint8_t>();
    case DType::kUInt16: return f.template operator()<uint16_t>();
    case DType::kUInt32: return f.template operator()<uint32_t>();
    case DType::kUInt64: return f.template operator()<uint64_t>();
    case DType::kBool: return f.template operator()<bool>();
    default: return f.template operator()<void>();
  }
}

// Element conversions used by kernels that compute half types in float.
template <typename T>
inline double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return HalfToFloat(v);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16ToFloat(v);
  } else {
    return static_cast<double>(v);
  }
}
template <typename T>
inline T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_integral_v<T>) {
    // Out-of-range (and NaN) conversions are undefined in C++: saturate instead (NaN -> 0).
    if (!(v == v)) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace ottr::ir

#endif  // OTTR_IR_DTYPE_H_
