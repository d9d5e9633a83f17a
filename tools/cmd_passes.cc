// `ottr passes MODEL [training flags] [--device cuda|cpu] [dump flags] [--print-memory-plan]`: runs
// the training pipeline `ottr train --device D` runs (cuda unless --device cpu; no device is needed
// to show it) and prints or dumps the IR as asked; without dump flags it prints the final step
// graph, or with --print-memory-plan the step's memory plan (passes/memory_planner.h) instead.
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "importer/onnx_importer.h"
#include "ir/status.h"
#include "passes/memory_planner.h"
#include "passes/pass_manager.h"
#include "passes/training.h"
#include "tools/cli_common.h"
#include "tools/training_flags.h"

namespace ottr::tools {

absl::Status CmdPasses(const std::vector<std::string>& argv) {
  std::set<std::string> values = TrainingValueFlags();
  for (const char* f : {"print-ir-after", "print-ir-before", "ir-dump-dir", "disable-passes", "stop-after", "device"}) {
    values.insert(f);
  }
  std::set<std::string> switches = TrainingSwitchFlags();
  for (const char* f : {"print-ir-after-all", "print-ir-after-change", "check-changed",
                        "list-passes", "print-memory-plan", "remarks"}) {
    switches.insert(f);
  }
  OTTR_ASSIGN_OR_RETURN(Args args, Args::Parse(argv, values, switches));
  if (args.positional().size() != 1) return absl::InvalidArgumentError("passes takes one MODEL");
  OTTR_ASSIGN_OR_RETURN(passes::TrainingSpec spec, ParseTrainingSpec(args, 64));
  const std::string device = args.get("device", "cuda");
  if (device != "cuda" && device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device ", device, ": expected cuda or cpu"));
  }
  UseDevicePipeline(args, device, spec);
  OTTR_ASSIGN_OR_RETURN(auto graph, importer::ImportModelFile(args.positional()[0]));
  passes::PassManagerOptions o;
  o.print_after = args.get("print-ir-after");
  o.print_before = args.get("print-ir-before");
  o.print_after_all = args.has("print-ir-after-all");
  o.print_only_on_change = args.has("print-ir-after-change");
  if (o.print_only_on_change && o.print_after.empty()) o.print_after_all = true;
  o.dump_dir = args.get("ir-dump-dir");
  o.check_changed = args.has("check-changed");
  for (absl::string_view p : absl::StrSplit(args.get("disable-passes"), ',', absl::SkipEmpty())) {
    o.disabled.insert(std::string(p));
  }
  OTTR_ASSIGN_OR_RETURN(int64_t stop, args.get_int("stop-after", -1));
  o.stop_after = static_cast<int>(stop);
  o.out = &std::cout;
  const bool dumping = o.print_after_all || !o.print_after.empty() || !o.print_before.empty() ||
                       !o.dump_dir.empty();
  // Passes explain what they fused or declined (as `// pass: ...` lines) with --remarks or
  // whenever IR is printed per pass.
  if (args.has("remarks") || o.print_after_all || !o.print_after.empty() || !o.print_before.empty()) {
    o.remarks = &std::cout;
  }
  passes::PassManager pm(o);
  OTTR_RETURN_IF_ERROR(passes::AddTrainingPasses(pm, spec));
  if (args.has("list-passes")) {
    for (const std::string& n : pm.PassNames()) std::printf("%s\n", n.c_str());
    return absl::OkStatus();
  }
  if (dumping || !args.has("print-memory-plan")) std::cout << "// ----- IR after import -----\n";
  if (dumping) std::cout << graph->ToString();
  OTTR_RETURN_IF_ERROR(pm.Run(*graph).status());
  if (args.has("print-memory-plan")) {
    OTTR_ASSIGN_OR_RETURN(passes::MemoryPlan plan, passes::PlanMemory(*graph));
    OTTR_RETURN_IF_ERROR(passes::VerifyPlan(*graph, plan));
    std::cout << passes::FormatPlan(plan);
    return absl::OkStatus();
  }
  if (!dumping) std::cout << graph->ToString();
  return absl::OkStatus();
}

}  // namespace ottr::tools
