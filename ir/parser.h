// Reads the text form written by printer.h back into a Graph. Nodes may appear in any order
// (a value may be used before the line that defines it). Errors name the line and column.
#ifndef OTTR_IR_PARSER_H_
#define OTTR_IR_PARSER_H_

#include <memory>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace ottr::ir {

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text);

}  // namespace ottr::ir

#endif  // OTTR_IR_PARSER_H_
