// Shared pieces of the `ottr` command-line program: argument parsing and the subcommands.
#ifndef OTTR_TOOLS_CLI_COMMON_H_
#define OTTR_TOOLS_CLI_COMMON_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ottr::tools {

// `--name=value`, `--name value` and bare `--switch`; everything else is positional.
class Args {
 public:
  // `value_flags` take a value, `switch_flags` do not; any other --flag is an error.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::set<std::string>& value_flags,
                                    const std::set<std::string>& switch_flags);
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::string get(const std::string& flag, const std::string& def = "") const;
  // All values of a flag given several times.
  std::vector<std::string> get_all(const std::string& flag) const;
  absl::StatusOr<int64_t> get_int(const std::string& flag, int64_t def) const;
  absl::StatusOr<double> get_double(const std::string& flag, double def) const;

 private:
  std::vector<std::string> positional_;
  std::multimap<std::string, std::string> values_;
};

// Subcommands: each returns the process exit status (0 ok, 1 error) and prints its own output.
absl::Status CmdInspect(const std::vector<std::string>& argv);
absl::Status CmdRun(const std::vector<std::string>& argv);
// Sets `*all_passed` to whether the conformance run met expectations.
absl::Status CmdTrain(const std::vector<std::string>& argv);
absl::Status CmdEval(const std::vector<std::string>& argv);
absl::Status CmdPasses(const std::vector<std::string>& argv);
absl::Status CmdBench(const std::vector<std::string>& argv);
absl::Status CmdTestData(const std::vector<std::string>& argv, int* exit_code);

}  // namespace ottr::tools

#endif  // OTTR_TOOLS_CLI_COMMON_H_
