// A subcommand's bad command line, said (see subcommand_usage.h).
#include "subcommand_usage.h"

#include <algorithm>

#include "settings.h"

namespace ccrun::launcher {
namespace {

// The app's long flags, "--name" each.
std::vector<std::string> long_flags_of(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& n : o->get_lnames()) out.push_back("--" + n);
  }
  return out;
}

// The first argument that names a flag not in `known` ("" when none).
std::string unknown_flag(const std::vector<std::string>& known, const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    std::string name = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), name) == known.end()) return name;
  }
  return "";
}

}  // namespace

std::string subcommand_usage_error(const std::string& name, const CLI::App& app,
                                   const CLI::ParseError& e, const std::vector<std::string>& args) {
  std::vector<std::string> known = long_flags_of(app);
  std::string hint;
  if (std::string flag = unknown_flag(known, args); !flag.empty()) hint = closest_flag(flag, known);
  return "ccrun " + name + ": " + e.what() + hint + "; see ccrun " + name + " --help\n";
}

}  // namespace ccrun::launcher
