#include "importer/onnx_importer.h"

#include <exception>

#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "importer/canonicalize.h"
#include "importer/tensor_proto.h"
#include "ir/op_registry.h"
#include "ir/status.h"

namespace ottr::importer {
namespace {

using ir::Attribute;
using ir::Graph;
using ir::Tensor;
using ir::TensorType;

// Names visible from enclosing graphs (for subgraph captures), innermost first.
struct OuterScope {
  const Graph* graph;
  const OuterScope* parent;

  const ir::Value* Find(const std::string& name) const {
    for (const OuterScope* s = this; s != nullptr; s = s->parent) {
      if (const ir::Value* v = s->graph->FindValue(name)) return v;
    }
    return nullptr;
  }
};

class GraphImporter {
 public:
  GraphImporter(const ImportOptions& options, const std::map<std::string, int64_t>& opsets)
      : options_(options), opsets_(opsets) {}

  absl::StatusOr<std::unique_ptr<Graph>> Import(const onnx::GraphProto& gp,
                                                const OuterScope* outer) {
    auto g = std::make_unique<Graph>(gp.name().empty() ? "main" : gp.name());
    for (const auto& [d, v] : opsets_) g->set_opset_import(d, v);
    OTTR_RETURN_IF_ERROR(ImportInto(*g, gp, outer, /*merge=*/false));
    return g;
  }

  // Imports `gp`'s initializers, inputs, nodes and outputs into `g`. With `merge`, inputs and
  // initializers that `g` already has by name refer to those values (a TrainingInfoProto's
  // algorithm graph reading the main graph).
  absl::Status ImportInto(Graph& graph, const onnx::GraphProto& gp, const OuterScope* outer,
                          bool merge) {
    Graph* g = &graph;
    if (gp.sparse_initializer_size() > 0) {
      return absl::UnimplementedError(absl::StrCat("graph '", gp.name(), "': sparse initializers"));
    }
    absl::flat_hash_set<std::string> initializer_names;
    for (const onnx::TensorProto& tp : gp.initializer()) {
      OTTR_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(tp, options_.model_dir));
      if (tp.name().empty()) return absl::InvalidArgumentError("an initializer has no name");
      initializer_names.insert(tp.name());
      if (merge && g->FindValue(tp.name()) != nullptr) continue;
      OTTR_RETURN_IF_ERROR(g->AddInitializer(tp.name(), std::move(t)).status());
    }
    for (const onnx::ValueInfoProto& vi : gp.input()) {
      // Before IR version 4 every initializer was also listed as an input: it stays an
      // initializer (a default a feed may override).
      if (initializer_names.contains(vi.name())) continue;
      if (merge && g->FindValue(vi.name()) != nullptr) continue;
      auto type = TypeFromValueInfo(vi);
      if (!type.ok()) return AnnotateStatus(type.status(), absl::StrCat("graph input '", vi.name(), "'"));
      for (ir::Dim& d : type->shape.value_or(ir::Shape{})) {
        for (const auto& [sym, value] : options_.bind_dims) {
          if (d.is_symbol() && d.symbol() == sym) d = ir::Dim(value);
        }
      }
      OTTR_RETURN_IF_ERROR(g->AddInput(vi.name(), *type).status());
    }
    for (int k = 0; k < gp.node_size(); ++k) {
      absl::Status s = ImportNode(*g, gp.node(k), k, outer);
      if (!s.ok()) return s;
    }
    for (const onnx::ValueInfoProto& vi : gp.value_info()) {
      ir::Value* v = g->FindValue(vi.name());
      if (v == nullptr || v->type().has_rank()) continue;
      auto type = TypeFromValueInfo(vi);
      if (type.ok() && (v->type().dtype == ir::DType::kUndefined || v->type().dtype == type->dtype)) {
        v->set_type(*type);
      }
    }
    for (const onnx::ValueInfoProto& vi : gp.output()) {
      ir::Value* v = g->FindValue(vi.name());
      if (v == nullptr) {
        OTTR_ASSIGN_OR_RETURN(v, Resolve(*g, vi.name(), outer, "graph output"));
      }
      auto type = TypeFromValueInfo(vi);
      if (type.ok()) {
        if (v->type().dtype != ir::DType::kUndefined && type->dtype != ir::DType::kUndefined &&
            v->type().dtype != type->dtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              "graph output '", vi.name(), "' is declared ", type->ToString(),
              " but computed as ", v->type().ToString()));
        }
        if (!v->type().has_rank() || v->type().dtype == ir::DType::kUndefined) v->set_type(*type);
      }
      if (!g->IsGraphOutput(v)) g->AddOutput(v);
    }
    return absl::OkStatus();
  }

 private:
  // Looks a name up in this graph, then in enclosing graphs (creating a capture).
  absl::StatusOr<ir::Value*> Resolve(Graph& g, const std::string& name, const OuterScope* outer,
                                     absl::string_view who) {
    if (ir::Value* v = g.FindValue(name)) return v;
    if (outer != nullptr) {
      if (const ir::Value* ov = outer->Find(name)) return g.AddCapture(name, ov->type());
    }
    return absl::InvalidArgumentError(absl::StrCat(who, " reads '", name,
                                                   "', which no initializer, input or earlier node "
                                                   "defines"));
  }

  absl::StatusOr<Attribute> ImportAttribute(const onnx::AttributeProto& a, const Graph& g,
                                            const OuterScope* outer) {
    if (!a.ref_attr_name().empty()) {
      return absl::UnimplementedError(absl::StrCat("attribute '", a.name(),
                                                   "' refers to a function attribute"));
    }
    using AP = onnx::AttributeProto;
    switch (a.type()) {
      case AP::INT: return Attribute(a.i());
      case AP::FLOAT: return Attribute(a.f());
      case AP::STRING: return Attribute(a.s());
      case AP::INTS: return Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
      case AP::FLOATS: return Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
      case AP::STRINGS:
        return Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
      case AP::TENSOR: {
        auto t = TensorFromProto(a.t(), options_.model_dir);
        if (!t.ok()) return AnnotateStatus(t.status(), absl::StrCat("attribute '", a.name(), "'"));
        return Attribute(std::move(*t));
      }
      case AP::GRAPH: {
        OuterScope scope{&g, outer};
        auto sub = Import(a.g(), &scope);
        if (!sub.ok()) return AnnotateStatus(sub.status(), absl::StrCat("subgraph '", a.name(), "'"));
        return Attribute(std::shared_ptr<Graph>(std::move(*sub)));
      }
      case AP::UNDEFINED:
        // Very old models leave the type unset: infer it from the field that is set.
        if (a.has_i()) return Attribute(a.i());
        if (a.has_f()) return Attribute(a.f());
        if (a.has_s()) return Attribute(a.s());
        if (a.ints_size()) return Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
        if (a.floats_size()) return Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
        [[fallthrough]];
      default:
        return absl::UnimplementedError(absl::StrCat("attribute '", a.name(), "' has type ",
                                                     AP::AttributeType_Name(a.type()),
                                                     ", which ottr does not support"));
    }
  }

  absl::Status ImportNode(Graph& g, const onnx::NodeProto& np, int index, const OuterScope* outer) {
    const std::string origin = np.name().empty() ? absl::StrCat(np.op_type(), "_", index) : np.name();
    const std::string where = absl::StrCat("node ", index, " '", origin, "'");
    std::string domain = np.domain() == "ai.onnx" ? "" : np.domain();
    auto opset_it = opsets_.find(domain);
    if (opset_it == opsets_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": op ", np.op_type(), " uses domain '", domain.empty() ? "ai.onnx" : domain,
          "', which the model does not import"));
    }
    const int64_t opset = opset_it->second;
    const ir::OpRegistry& registry = ir::OpRegistry::Global();
    const ir::OpSchema* schema = registry.Find(domain, np.op_type());
    if (schema == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          where, ": op ", np.op_type(), " of domain ", domain.empty() ? "ai.onnx" : domain,
          " opset ", opset, " is not supported"));
    }
    ir::NodeSpec spec;
    spec.op_type = np.op_type();
    spec.domain = domain;
    spec.origin = origin;
    for (const std::string& in : np.input()) {
      if (in.empty()) {
        spec.inputs.push_back(nullptr);
        continue;
      }
      auto v = Resolve(g, in, outer, where);
      if (!v.ok()) return v.status();
      spec.inputs.push_back(*v);
    }
    for (const std::string& out : np.output()) spec.output_names.push_back(out);
    for (const onnx::AttributeProto& a : np.attribute()) {
      auto attr = ImportAttribute(a, g, outer);
      if (!attr.ok()) return AnnotateStatus(attr.status(), absl::StrCat(where, " (", np.op_type(), ")"));
      spec.attrs[a.name()] = std::move(*attr);
    }
    auto add = [&](ir::NodeSpec s) -> absl::StatusOr<ir::Node*> {
      OTTR_ASSIGN_OR_RETURN(ir::Node * n, g.AddNode(std::move(s)));
      OTTR_RETURN_IF_ERROR(registry.CheckNode(*n, opset));
      OTTR_RETURN_IF_ERROR(ir::InferNodeShapes(registry, *n, ConstantInputs(*n)));
      return n;
    };
    CanonicalizeContext ctx(g, add);
    OTTR_ASSIGN_OR_RETURN(bool lowered, Canonicalize(spec, opset, ctx));
    if (lowered) return absl::OkStatus();
    auto node = add(std::move(spec));
    if (!node.ok()) {
      // Registry and shape errors already name the node; add the index for the user.
      return AnnotateStatus(node.status(), absl::StrCat("node ", index));
    }
    return absl::OkStatus();
  }

  // Values of inputs produced by Constant nodes, so shape functions can use them.
  static std::vector<const Tensor*> ConstantInputs(const ir::Node& n) {
    std::vector<const Tensor*> out;
    for (const ir::Value* v : n.inputs()) {
      const Tensor* c = nullptr;
      if (v && v->producer() && v->producer()->op_type() == "Constant" &&
          v->producer()->domain().empty()) {
        if (const Attribute* a = v->producer()->attr("value")) c = &a->t();
      }
      out.push_back(c);
    }
    return out;
  }

  const ImportOptions& options_;
  const std::map<std::string, int64_t>& opsets_;
};

}  // namespace

absl::StatusOr<TensorType> TypeFromValueInfo(const onnx::ValueInfoProto& vi) {
  if (!vi.has_type()) return TensorType();  // unknown: shape inference fills it
  if (!vi.type().has_tensor_type()) {
    return absl::UnimplementedError(absl::StrCat("'", vi.name(),
                                                 "' is not a tensor (sequence, map, optional or "
                                                 "sparse values are not supported)"));
  }
  const onnx::TypeProto::Tensor& tt = vi.type().tensor_type();
  TensorType t;
  if (tt.elem_type() != 0) {
    auto d = ir::DTypeFromOnnx(tt.elem_type());
    if (!d.ok()) return AnnotateStatus(d.status(), absl::StrCat("'", vi.name(), "'"));
    t.dtype = *d;
  }
  if (tt.has_shape()) {
    ir::Shape s;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) {
          return absl::InvalidArgumentError(absl::StrCat("'", vi.name(), "' has negative dimension ",
                                                         d.dim_value()));
        }
        s.emplace_back(d.dim_value());
      } else if (d.has_dim_param() && !d.dim_param().empty()) {
        s.push_back(ir::Dim::Symbol(d.dim_param()));
      } else {
        s.emplace_back();
      }
    }
    t.shape = std::move(s);
  }
  return t;
}

absl::StatusOr<onnx::ModelProto> ParseModelProto(absl::string_view bytes, absl::string_view what) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty file, not an ONNX model"));
  }
  onnx::ModelProto model;
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": not a valid ONNX model (the protobuf is malformed or truncated)"));
  }
  if (!model.has_graph()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid ONNX model (no graph)"));
  }
  if (model.ir_version() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid ONNX model (ir_version ",
                                                   model.ir_version(), ")"));
  }
  return model;
}

absl::StatusOr<onnx::ModelProto> LoadModelProto(const std::string& path) {
  OTTR_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path));
  return ParseModelProto(bytes, path);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportModel(const onnx::ModelProto& model,
                                                   const ImportOptions& options) {
  std::map<std::string, int64_t> opsets;
  for (const onnx::OperatorSetIdProto& o : model.opset_import()) {
    const std::string domain = o.domain() == "ai.onnx" ? "" : o.domain();
    opsets[domain] = o.version();
  }
  if (model.ir_version() < 4 && !opsets.count("")) opsets[""] = 1;
  if (auto it = opsets.find(""); it != opsets.end()) {
    if (it->second < ir::kMinOnnxOpset || it->second > ir::kMaxOnnxOpset) {
      return absl::UnimplementedError(absl::StrCat("the model imports ai.onnx opset ", it->second,
                                                   "; ottr supports opsets ", ir::kMinOnnxOpset,
                                                   " to ", ir::kMaxOnnxOpset));
    }
  }
  GraphImporter importer(options, opsets);
  // The importer validates what it reads, but a malformed model (an attribute of the wrong kind
  // where a rewrite expects another, a size no container can hold) may still make a library
  // call throw: that is a malformed model, reported as such, never a crash.
  try {
    OTTR_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, importer.Import(model.graph(), nullptr));
    return g;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed model: ", e.what()));
  }
}

absl::StatusOr<TrainingInfoImport> ImportTrainingInfo(const onnx::ModelProto& model,
                                                      const ImportOptions& options) {
  if (model.training_info_size() == 0) {
    return absl::InvalidArgumentError("the model has no TrainingInfoProto");
  }
  if (model.training_info_size() > 1) {
    return absl::UnimplementedError("models with several TrainingInfoProtos");
  }
  const onnx::TrainingInfoProto& info = model.training_info(0);
  OTTR_ASSIGN_OR_RETURN(TrainingInfoImport out, [&]() -> absl::StatusOr<TrainingInfoImport> {
    TrainingInfoImport r;
    OTTR_ASSIGN_OR_RETURN(r.step, ImportModel(model, options));
    return r;
  }());
  std::map<std::string, int64_t> opsets;
  for (const auto& [d, v] : out.step->opset_imports()) opsets[d] = v;
  GraphImporter importer(options, opsets);
  // The algorithm reads the main graph's values by name and adds its own nodes and outputs.
  out.step->ClearOutputs();
  absl::Status s = importer.ImportInto(*out.step, info.algorithm(), nullptr, /*merge=*/true);
  if (!s.ok()) return AnnotateStatus(s, "training algorithm");
  for (const auto& kv : info.update_binding()) {
    ir::Value* target = out.step->FindValue(kv.key());
    ir::Value* value = out.step->FindValue(kv.value());
    if (target == nullptr || !target->is_initializer() || value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("update_binding ", kv.key(), " <- ", kv.value(),
                                                     ": names no initializer or no algorithm output"));
    }
    OTTR_RETURN_IF_ERROR(out.step->AddUpdate(target, value));
  }
  if (info.has_initialization() && info.initialization().node_size() > 0) {
    auto init = std::make_unique<Graph>("initialization");
    for (const auto& [d, v] : opsets) init->set_opset_import(d, v);
    GraphImporter init_importer(options, opsets);
    OTTR_RETURN_IF_ERROR(AnnotateStatus(init_importer.ImportInto(*init, info.initialization(), nullptr, false),
                                        "training initialization"));
    out.initialization = std::move(init);
    for (const auto& kv : info.initialization_binding()) {
      out.initialization_binding.emplace_back(kv.key(), kv.value());
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Graph>> ImportModelFile(const std::string& path,
                                                       ImportOptions options) {
  OTTR_ASSIGN_OR_RETURN(onnx::ModelProto model, LoadModelProto(path));
  if (options.model_dir.empty()) {
    options.model_dir = std::filesystem::path(path).parent_path().string();
    if (options.model_dir.empty()) options.model_dir = ".";
  }
  auto g = ImportModel(model, options);
  if (!g.ok()) return AnnotateStatus(g.status(), path);
  return g;
}

}  // namespace ottr::importer
