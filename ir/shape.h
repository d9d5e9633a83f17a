// Shapes with static or symbolic dimensions, and the static type of an IR value.
#ifndef OTTR_IR_SHAPE_H_
#define OTTR_IR_SHAPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace ottr::ir {

// One dimension: a known size (>= 0), a named symbol ("N", "batch"), or unknown.
class Dim {
 public:
  Dim() = default;                                     // unknown
  Dim(int64_t value) : value_(value) {}                // NOLINT: static size
  static Dim Symbol(std::string name) {
    Dim d;
    d.symbol_ = std::move(name);
    return d;
  }
  bool is_static() const { return value_ >= 0; }
  bool is_symbol() const { return value_ < 0 && !symbol_.empty(); }
  bool is_unknown() const { return value_ < 0 && symbol_.empty(); }
  int64_t value() const { return value_; }
  const std::string& symbol() const { return symbol_; }
  std::string ToString() const;  // "784", "N", "?"
  bool operator==(const Dim& o) const = default;

 private:
  int64_t value_ = -1;
  std::string symbol_;
};

// A shape of known rank whose dimensions may be symbolic.
using Shape = std::vector<Dim>;

std::string ShapeToString(const Shape& s);  // "[N,784]"
// True when every dim is static.
bool IsStatic(const Shape& s);
// Static dims as integers; requires IsStatic.
std::vector<int64_t> StaticDims(const Shape& s);
Shape ShapeFromDims(const std::vector<int64_t>& dims);
int64_t NumElements(const std::vector<int64_t>& dims);

// The static type of a value: element type plus shape, where the rank itself may be unknown.
struct TensorType {
  DType dtype = DType::kUndefined;
  std::optional<Shape> shape;  // nullopt: rank unknown

  TensorType() = default;
  TensorType(DType t, std::optional<Shape> s) : dtype(t), shape(std::move(s)) {}
  bool has_rank() const { return shape.has_value(); }
  int64_t rank() const { return shape ? static_cast<int64_t>(shape->size()) : -1; }
  bool is_static() const { return shape && IsStatic(*shape); }
  std::string ToString() const;  // "f32[N,784]", "f32[*]" for unknown rank
  bool operator==(const TensorType& o) const = default;
};

// NumPy-style multidirectional broadcast of two shapes. Returns nullopt when incompatible.
std::optional<Shape> BroadcastShapes(const Shape& a, const Shape& b);
std::optional<std::vector<int64_t>> BroadcastDims(const std::vector<int64_t>& a,
                                                  const std::vector<int64_t>& b);

}  // namespace ottr::ir

#endif  // OTTR_IR_SHAPE_H_
