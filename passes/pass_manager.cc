#include "passes/pass_manager.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "ir/verifier.h"

namespace ottr::passes {
namespace {

bool Matches(const std::string& pattern, absl::string_view name) {
  if (pattern.empty()) return false;
  return std::regex_search(std::string(name), std::regex(pattern));
}

}  // namespace

std::vector<std::string> PassManager::PassNames() const {
  std::vector<std::string> out;
  for (const auto& p : passes_) out.emplace_back(p->name());
  return out;
}

absl::StatusOr<bool> PassManager::Run(ir::Graph& graph) {
  std::ostream& out = options_.out ? *options_.out : std::cerr;
  try {  // std::regex throws on a malformed pattern
    (void)Matches(options_.print_before, "");
    (void)Matches(options_.print_after, "");
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad pass-name regex: ", e.what()));
  }
  if (!options_.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dump_dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create dump folder ",
                                                      options_.dump_dir, ": ", ec.message()));
    }
  }
  bool any_changed = false;
  int index = 0;
  for (const auto& pass : passes_) {
    const std::string name(pass->name());
    if (options_.disabled.count(name)) continue;
    if (options_.stop_after >= 0 && index >= options_.stop_after) break;
    ++index;
    pass->set_remarks(options_.remarks);
    const bool need_before_text = options_.check_changed || options_.print_only_on_change;
    const std::string before = need_before_text ? graph.ToString() : "";
    if (Matches(options_.print_before, name)) {
      out << "// ----- IR before " << name << " -----\n" << graph.ToString();
    }
    auto changed = pass->Run(graph);
    if (!changed.ok()) return AnnotateStatus(changed.status(), absl::StrCat("pass ", name));
    any_changed |= *changed;
    if (*changed && options_.verify_each) {
      absl::Status v = ir::VerifyGraph(graph);
      if (!v.ok()) return AnnotateStatus(v, absl::StrCat("after pass ", name));
    }
    std::string after;
    if (options_.check_changed || options_.print_only_on_change) after = graph.ToString();
    if (options_.check_changed && !*changed && after != before) {
      return absl::InternalError(absl::StrCat("pass ", name,
                                              " changed the graph but reported no change"));
    }
    const bool print = options_.print_after_all || Matches(options_.print_after, name);
    const bool changed_text = !options_.print_only_on_change || after != before;
    if (print && changed_text) {
      out << "// ----- IR after " << name << (*changed ? "" : " (no change)") << " -----\n"
          << (after.empty() ? graph.ToString() : after);
    }
    if (!options_.dump_dir.empty() && changed_text) {
      const std::string file = absl::StrFormat("%s/%03d-%s.ir", options_.dump_dir, index, name);
      std::ofstream f(file);
      f << (after.empty() ? graph.ToString() : after);
      if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", file));
    }
  }
  return any_changed;
}

absl::StatusOr<bool> FixedPointPass::Run(ir::Graph& graph) {
  bool any = false;
  for (int it = 0; it < max_iterations_; ++it) {
    bool round = false;
    for (const auto& p : passes_) {
      auto changed = p->Run(graph);
      if (!changed.ok()) return AnnotateStatus(changed.status(), absl::StrCat("pass ", p->name()));
      if (*changed) {
        absl::Status v = ir::VerifyGraph(graph);
        if (!v.ok()) return AnnotateStatus(v, absl::StrCat("after pass ", p->name()));
      }
      round |= *changed;
    }
    any |= round;
    if (!round) break;
  }
  return any;
}

}  // namespace ottr::passes
