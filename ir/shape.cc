#include "ir/shape.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ottr::ir {

std::string Dim::ToString() const {
  if (is_static()) return absl::StrCat(value_);
  if (is_symbol()) return symbol_;
  return "?";
}

std::string ShapeToString(const Shape& s) {
  return absl::StrCat("[", absl::StrJoin(s, ",", [](std::string* out, const Dim& d) {
                        out->append(d.ToString());
                      }), "]");
}

bool IsStatic(const Shape& s) {
  for (const Dim& d : s) {
    if (!d.is_static()) return false;
  }
  return true;
}

std::vector<int64_t> StaticDims(const Shape& s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const Dim& d : s) out.push_back(d.value());
  return out;
}

Shape ShapeFromDims(const std::vector<int64_t>& dims) {
  Shape s;
  s.reserve(dims.size());
  for (int64_t d : dims) s.emplace_back(d);
  return s;
}

int64_t NumElements(const std::vector<int64_t>& dims) {
  // Saturates at INT64_MAX instead of overflowing: a shape read from a malformed model may ask
  // for more elements than int64 holds; allocation then fails with a clear error.
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

std::string TensorType::ToString() const {
  return absl::StrCat(DTypeName(dtype), shape ? ShapeToString(*shape) : "[*]");
}

std::optional<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim da = i < rank - a.size() ? Dim(1) : a[i - (rank - a.size())];
    const Dim db = i < rank - b.size() ? Dim(1) : b[i - (rank - b.size())];
    if (da == Dim(1)) {
      out[i] = db;
    } else if (db == Dim(1)) {
      out[i] = da;
    } else if (da == db) {
      out[i] = da;
    } else if (da.is_static() && db.is_static()) {
      return std::nullopt;  // e.g. 3 vs 4
    } else if (da.is_static()) {
      out[i] = da;  // the symbol must be 1 or equal; the static size wins
    } else if (db.is_static()) {
      out[i] = db;
    } else {
      out[i] = Dim();
    }
  }
  return out;
}

std::optional<std::vector<int64_t>> BroadcastDims(const std::vector<int64_t>& a,
                                                  const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace ottr::ir
