#include "ir/dtype.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ottr::ir {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUInt64: return 8;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    default: return 0;
  }
}

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kFloat64: return "f64";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt8: return "i8";
    case DType::kInt16: return "i16";
    case DType::kInt32: return "i32";
    case DType::kInt64: return "i64";
    case DType::kUInt8: return "u8";
    case DType::kUInt16: return "u16";
    case DType::kUInt32: return "u32";
    case DType::kUInt64: return "u64";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
    default: return "undefined";
  }
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                  DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kUInt16,
                  DType::kUInt32, DType::kUInt64, DType::kBool}) {
    if (DTypeName(t) == name) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown element type '", name, "'"));
}

absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type) {
  switch (onnx_type) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 9: case 10: case 11: case 12:
    case 13: case 16:
      return static_cast<DType>(onnx_type);
    case 0: return absl::InvalidArgumentError("tensor element type is UNDEFINED (0)");
    default: break;
  }
  static constexpr absl::string_view kNames[] = {
      "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
      "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
      "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2"};
  absl::string_view name = onnx_type >= 0 && onnx_type < static_cast<int32_t>(std::size(kNames))
                              ? kNames[onnx_type] : "unknown";
  return absl::UnimplementedError(
      absl::StrCat("element type ", name, " (ONNX data_type ", onnx_type, ") is not supported"));
}

bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}
bool IsInteger(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64: return true;
    default: return false;
  }
}
bool IsSigned(DType t) {
  return IsFloat(t) || t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 ||
         t == DType::kInt64;
}

float HalfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t mant = h.bits & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);  // inf or NaN
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Half FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  Half h;
  if (abs >= 0x7f800000) {  // inf / NaN
    h.bits = sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
    return h;
  }
  if (abs >= 0x477ff000) {  // rounds to >= 65520: overflow to inf
    h.bits = sign | 0x7c00;
    return h;
  }
  if (abs < 0x38800000) {  // below the smallest normal half (2^-14): subnormal or zero
    // value = abs_float; half subnormal unit is 2^-24.
    float af;
    std::memcpy(&af, &abs, 4);
    const float scaled = af * 16777216.0f;  // 2^24, exact
    h.bits = sign | static_cast<uint16_t>(std::nearbyint(scaled));  // round-half-even (default mode)
    return h;
  }
  uint32_t exp = ((abs >> 23) - 127 + 15);
  uint32_t mant = abs & 0x7fffff;
  uint32_t half = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // carry into exponent is correct
  h.bits = sign | static_cast<uint16_t>(half);
  return h;
}

BFloat16 FloatToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  BFloat16 b;
  if ((u & 0x7fffffff) > 0x7f800000) {
    b.bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    return b;
  }
  u += 0x7fff + ((u >> 16) & 1);
  b.bits = static_cast<uint16_t>(u >> 16);
  return b;
}

}  // namespace ottr::ir
