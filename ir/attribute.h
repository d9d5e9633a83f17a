// Node attributes: the ONNX attribute kinds ottr uses (int, float, string, tensor, graph, and lists
// of ints, floats and strings).
#ifndef OTTR_IR_ATTRIBUTE_H_
#define OTTR_IR_ATTRIBUTE_H_

#include "absl/strings/string_view.h"
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/tensor.h"

namespace ottr::ir {

class Graph;

class Attribute {
 public:
  enum class Kind { kInt, kFloat, kString, kTensor, kGraph, kInts, kFloats, kStrings };

  Attribute() : value_(int64_t{0}) {}
  Attribute(int64_t v) : value_(v) {}                            // NOLINT
  Attribute(int v) : value_(int64_t{v}) {}                       // NOLINT
  Attribute(float v) : value_(v) {}                              // NOLINT
  Attribute(std::string v) : value_(std::move(v)) {}             // NOLINT
  Attribute(const char* v) : value_(std::string(v)) {}           // NOLINT
  Attribute(Tensor v) : value_(std::move(v)) {}                  // NOLINT
  Attribute(std::shared_ptr<Graph> g) : value_(std::move(g)) {}  // NOLINT
  Attribute(std::vector<int64_t> v) : value_(std::move(v)) {}    // NOLINT
  Attribute(std::vector<float> v) : value_(std::move(v)) {}      // NOLINT
  Attribute(std::vector<std::string> v) : value_(std::move(v)) {}  // NOLINT

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  int64_t i() const { return std::get<int64_t>(value_); }
  float f() const { return std::get<float>(value_); }
  const std::string& s() const { return std::get<std::string>(value_); }
  const Tensor& t() const { return std::get<Tensor>(value_); }
  const std::shared_ptr<Graph>& g() const { return std::get<std::shared_ptr<Graph>>(value_); }
  const std::vector<int64_t>& ints() const { return std::get<std::vector<int64_t>>(value_); }
  const std::vector<float>& floats() const { return std::get<std::vector<float>>(value_); }
  const std::vector<std::string>& strings() const {
    return std::get<std::vector<std::string>>(value_);
  }

  // Structural equality (tensors compared bitwise, graphs by their printed form).
  bool operator==(const Attribute& o) const;

 private:
  std::variant<int64_t, float, std::string, Tensor, std::shared_ptr<Graph>, std::vector<int64_t>,
               std::vector<float>, std::vector<std::string>>
      value_;
};

absl::string_view AttributeKindName(Attribute::Kind k);

}  // namespace ottr::ir

#endif  // OTTR_IR_ATTRIBUTE_H_
