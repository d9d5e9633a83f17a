#include "importer/exporter.h"

#include "absl/strings/str_cat.h"
#include "importer/tensor_proto.h"
#include "ir/status.h"

namespace ottr::importer {
namespace {

void SetValueInfo(const ir::Value& v, onnx::ValueInfoProto* vi) {
  vi->set_name(v.name());
  const ir::TensorType& t = v.type();
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(ir::DTypeToOnnx(t.dtype));
  if (t.has_rank()) {
    auto* shape = tt->mutable_shape();
    for (const ir::Dim& d : *t.shape) {
      auto* dim = shape->add_dim();
      if (d.is_static()) {
        dim->set_dim_value(d.value());
      } else if (d.is_symbol()) {
        dim->set_dim_param(d.symbol());
      }
    }
  }
}

absl::Status ExportGraph(const ir::Graph& g, onnx::GraphProto* gp);

absl::Status ExportAttribute(const std::string& name, const ir::Attribute& a,
                             onnx::AttributeProto* ap) {
  using AP = onnx::AttributeProto;
  using K = ir::Attribute::Kind;
  ap->set_name(name);
  switch (a.kind()) {
    case K::kInt: ap->set_type(AP::INT); ap->set_i(a.i()); break;
    case K::kFloat: ap->set_type(AP::FLOAT); ap->set_f(a.f()); break;
    case K::kString: ap->set_type(AP::STRING); ap->set_s(a.s()); break;
    case K::kInts:
      ap->set_type(AP::INTS);
      for (int64_t v : a.ints()) ap->add_ints(v);
      break;
    case K::kFloats:
      ap->set_type(AP::FLOATS);
      for (float v : a.floats()) ap->add_floats(v);
      break;
    case K::kStrings:
      ap->set_type(AP::STRINGS);
      for (const std::string& v : a.strings()) ap->add_strings(v);
      break;
    case K::kTensor:
      ap->set_type(AP::TENSOR);
      *ap->mutable_t() = TensorToProto(a.t(), "");
      break;
    case K::kGraph:
      ap->set_type(AP::GRAPH);
      OTTR_RETURN_IF_ERROR(ExportGraph(*a.g(), ap->mutable_g()));
      break;
  }
  return absl::OkStatus();
}

absl::Status ExportGraph(const ir::Graph& g, onnx::GraphProto* gp) {
  gp->set_name(g.name());
  for (const ir::Value* v : g.inputs()) SetValueInfo(*v, gp->add_input());
  for (const ir::Value* v : g.initializers()) {
    *gp->add_initializer() = TensorToProto(*v->initializer(), v->name());
  }
  OTTR_ASSIGN_OR_RETURN(std::vector<ir::Node*> order, g.TopoOrder());
  for (const ir::Node* n : order) {
    onnx::NodeProto* np = gp->add_node();
    np->set_name(n->origin());
    np->set_op_type(n->op_type());
    if (!n->domain().empty()) np->set_domain(n->domain());
    for (const ir::Value* in : n->inputs()) np->add_input(in ? in->name() : "");
    for (const ir::Value* out : n->outputs()) np->add_output(out->name());
    for (const auto& [name, a] : n->attrs()) {
      OTTR_RETURN_IF_ERROR(ExportAttribute(name, a, np->add_attribute()));
    }
  }
  for (const ir::Value* v : g.outputs()) SetValueInfo(*v, gp->add_output());
  // Intermediate types help other tools; they are hints, so only fully known ones are written.
  for (const ir::Node* n : order) {
    for (const ir::Value* v : n->outputs()) {
      if (!g.IsGraphOutput(v) && v->type().dtype != ir::DType::kUndefined && v->type().has_rank()) {
        SetValueInfo(*v, gp->add_value_info());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<onnx::ModelProto> ExportModel(const ir::Graph& graph) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("ottr");
  m.set_producer_version("0.1");
  bool has_default = false;
  for (const auto& [domain, version] : graph.opset_imports()) {
    auto* o = m.add_opset_import();
    o->set_domain(domain);
    o->set_version(domain.empty() ? std::max(version, kMinExportOpset) : version);
    has_default |= domain.empty();
  }
  if (!has_default) {
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(kMinExportOpset);
  }
  OTTR_RETURN_IF_ERROR(ExportGraph(graph, m.mutable_graph()));
  return m;
}

absl::Status ExportModelFile(const ir::Graph& graph, const std::string& path) {
  OTTR_ASSIGN_OR_RETURN(onnx::ModelProto m, ExportModel(graph));
  std::string bytes;
  if (!m.SerializeToString(&bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": the model is too large to serialise"));
  }
  return WriteFileAtomically(path, bytes);
}

absl::Status UpdateInitializers(const ir::Graph& graph, onnx::ModelProto& model) {
  for (onnx::TensorProto& tp : *model.mutable_graph()->mutable_initializer()) {
    const ir::Value* v = graph.FindValue(tp.name());
    if (v == nullptr || !v->is_initializer()) continue;
    const ir::Tensor& t = *v->initializer();
    if (ir::DTypeToOnnx(t.dtype()) != tp.data_type() ||
        !std::equal(t.dims().begin(), t.dims().end(), tp.dims().begin(), tp.dims().end())) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", tp.name(),
                                                     "' changed type or shape"));
    }
    onnx::TensorProto updated = TensorToProto(t, tp.name());
    tp.Swap(&updated);
  }
  return absl::OkStatus();
}

}  // namespace ottr::importer
