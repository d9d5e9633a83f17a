#include "ir/attribute.h"

#include <bit>

#include "ir/graph.h"

namespace ottr::ir {

bool Attribute::operator==(const Attribute& o) const {
  if (kind() != o.kind()) return false;
  switch (kind()) {
    case Kind::kTensor: return t().BitwiseEquals(o.t());
    case Kind::kGraph: return g()->ToString() == o.g()->ToString();
    case Kind::kFloat: return std::bit_cast<uint32_t>(f()) == std::bit_cast<uint32_t>(o.f());
    case Kind::kInt: return i() == o.i();
    case Kind::kString: return s() == o.s();
    case Kind::kInts: return ints() == o.ints();
    case Kind::kStrings: return strings() == o.strings();
    case Kind::kFloats: {
      if (floats().size() != o.floats().size()) return false;
      for (size_t k = 0; k < floats().size(); ++k) {
        if (std::bit_cast<uint32_t>(floats()[k]) != std::bit_cast<uint32_t>(o.floats()[k])) {
          return false;
        }
      }
      return true;
    }
  }
}

absl::string_view AttributeKindName(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kInt: return "int";
    case Attribute::Kind::kFloat: return "float";
    case Attribute::Kind::kString: return "string";
    case Attribute::Kind::kTensor: return "tensor";
    case Attribute::Kind::kGraph: return "graph";
    case Attribute::Kind::kInts: return "ints";
    case Attribute::Kind::kFloats: return "floats";
    case Attribute::Kind::kStrings: return "strings";
  }
  return "?";
}

}  // namespace ottr::ir
