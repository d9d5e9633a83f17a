// ottr: the ONNX training runtime's command-line program. See README.md for the commands.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/cli_common.h"

namespace {

constexpr char kUsage[] =
    "usage: ottr <command> [args]\n"
    "commands:\n"
    "  inspect MODEL                      opsets, inputs/outputs, parameters, op histogram\n"
    "  run MODEL --inputs DIR [--outputs DIR] [--device cpu]\n"
    "                                     inference on ONNX TensorProto files\n"
    "  train MODEL --data SPEC [--loss ...] [--optimizer adam --lr ...] [--epochs N | --steps N]\n"
    "        [--batch N] [--out trained.onnx] [--checkpoint FILE] [--resume FILE]\n"
    "                                     trains (see README.md for every flag)\n"
    "  eval MODEL --data SPEC             loss / accuracy on a data set\n"
    "  passes MODEL [training flags] [--device cuda|cpu] [--print-ir-after-all]\n"
    "        [--print-ir-after=REGEX] [--ir-dump-dir=DIR] [--disable-passes=a,b] [--stop-after=N]\n"
    "        [--remarks]                  runs the pipeline `train --device D` runs (cuda unless\n"
    "                                     --device cpu) and dumps IR\n"
    "  bench MODEL [training flags] [--batch N] [--device cuda|cpu] [--csv FILE] [--per-op]\n"
    "        [--fuse-epilogues on|off] [--fuse-relu-grad-bgrad on|off] [--layout nchw|nhwc]\n"
    "        [--disable-passes=a,b] [--trace FILE]\n"
    "                                     µs per training step, launches per step, peak memory;\n"
    "                                     --trace writes the step's kernel timeline (CUPTI)\n"
    "  test-data DIR... [--expected-failures FILE] [--rtol R] [--atol A] [--verbose]\n"
    "                                     runs ONNX backend-test folders\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  absl::Status status;
  int exit_code = 0;
  if (cmd == "inspect") {
    status = ottr::tools::CmdInspect(args);
  } else if (cmd == "run") {
    status = ottr::tools::CmdRun(args);
  } else if (cmd == "train") {
    status = ottr::tools::CmdTrain(args);
  } else if (cmd == "eval") {
    status = ottr::tools::CmdEval(args);
  } else if (cmd == "bench") {
    status = ottr::tools::CmdBench(args);
  } else if (cmd == "passes") {
    status = ottr::tools::CmdPasses(args);
  } else if (cmd == "test-data") {
    status = ottr::tools::CmdTestData(args, &exit_code);
  } else {
    std::fprintf(stderr, "ottr: error: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 1;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ottr %s: error: %s\n", cmd.c_str(), std::string(status.message()).c_str());
    return 1;
  }
  return exit_code;
}
