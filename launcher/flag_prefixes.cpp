// Unambiguous prefixes of long flags, as argparse takes them (see
// flag_prefixes.h).
#include "flag_prefixes.h"

#include <algorithm>

#include "ccrun/error.h"

namespace ccrun::launcher {
namespace {

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The option `name` (a whole long flag, or the unique option it is a
// prefix of), or nullptr when none; throws when it is a prefix of several.
const FlagNames* long_flag(const std::vector<FlagNames>& flags, std::string& name) {
  for (const auto& f : flags) {
    if (has(f.long_names, name)) return &f;
  }
  const FlagNames* found = nullptr;
  std::string candidates, full;
  for (const auto& f : flags) {
    auto it = std::find_if(f.long_names.begin(), f.long_names.end(),
                           [&](const std::string& n) { return n.rfind(name, 0) == 0; });
    if (it == f.long_names.end()) continue;
    candidates += (candidates.empty() ? "" : ", ") + *it;
    if (found) continue;
    found = &f;
    full = *it;
  }
  if (found && candidates.find(", ") != std::string::npos) {
    throw ConfigError(name + ": ambiguous abbreviation, it could be " + candidates +
                      "; write the whole flag");
  }
  if (found) name = full;
  return found;
}

}  // namespace

std::vector<std::string> expand_flag_prefixes(const std::vector<FlagNames>& flags,
                                              std::vector<std::string> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') break;  // the program begins
    bool takes_value = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      std::string name = arg.substr(0, eq);
      const FlagNames* f = long_flag(flags, name);
      if (!f) continue;  // unknown: the parser says so
      arg = name + (eq == std::string::npos ? "" : arg.substr(eq));
      takes_value = f->takes_value && eq == std::string::npos;
    } else {
      auto f = std::find_if(flags.begin(), flags.end(),
                            [&](const FlagNames& x) { return has(x.short_names, arg); });
      takes_value = f != flags.end() && f->takes_value;  // "-r 3"; "-r3" holds its value
    }
    if (takes_value) ++i;
  }
  return args;
}

}  // namespace ccrun::launcher
