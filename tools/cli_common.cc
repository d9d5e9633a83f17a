#include "tools/cli_common.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

namespace ottr::tools {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::set<std::string>& value_flags,
                                 const std::set<std::string>& switch_flags) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (!absl::StartsWith(s, "--") || s == "--") {
      a.positional_.push_back(s);
      continue;
    }
    std::string name = s.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switch_flags.count(name)) {
      if (value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      a.values_.emplace(name, "1");
    } else if (value_flags.count(name)) {
      if (!value) {
        if (i + 1 >= argv.size()) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        }
        value = argv[++i];
      }
      a.values_.emplace(name, *value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return a;
}

std::string Args::get(const std::string& flag, const std::string& def) const {
  auto range = values_.equal_range(flag);
  if (range.first == range.second) return def;
  return std::prev(range.second)->second;  // the last one wins
}

std::vector<std::string> Args::get_all(const std::string& flag) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(flag);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

absl::StatusOr<int64_t> Args::get_int(const std::string& flag, int64_t def) const {
  if (!has(flag)) return def;
  int64_t v;
  if (!absl::SimpleAtoi(get(flag), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " expects an integer, got '",
                                                   get(flag), "'"));
  }
  return v;
}

absl::StatusOr<double> Args::get_double(const std::string& flag, double def) const {
  if (!has(flag)) return def;
  double v;
  if (!absl::SimpleAtod(get(flag), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " expects a number, got '",
                                                   get(flag), "'"));
  }
  return v;
}

}  // namespace ottr::tools
