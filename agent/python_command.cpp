// What a Python worker's command line runs (see python_command.h).
#include "ccrun/python_command.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "ccrun/name_table.h"

namespace ccrun::agent {
namespace {

// The interpreter's flags that take no argument and leave what runs alone.
constexpr std::array<std::string_view, 15> kPlainFlags = {
    "-u", "-B", "-E", "-s", "-S", "-O", "-OO", "-b", "-bb", "-I", "-q", "-d", "-v", "-P", "-R"};
// Flags whose argument is the next word.
constexpr std::array<std::string_view, 2> kFlagsWithArgument = {"-X", "-W"};

bool is_python(const std::string& program) {
  size_t slash = program.rfind('/');
  std::string_view name(program.c_str() + (slash == std::string::npos ? 0 : slash + 1));
  return name.rfind("python", 0) == 0;
}

bool is_one_of(const std::string& word, const auto& list) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

// Each kind's name, as the warm template's fork request carries it.
constexpr std::array<NamedValue<PythonCommand::Kind>, 3> kKindNames{{
    {"script", PythonCommand::Kind::kScript},
    {"module", PythonCommand::Kind::kModule},
    {"code", PythonCommand::Kind::kCode},
}};

}  // namespace

const char* PythonCommand::kind_name() const {
  // Every name is a literal, so the view is NUL-terminated.
  return name_of(kKindNames, kind, "script").data();
}

std::optional<PythonCommand> parse_python_command(const std::vector<std::string>& argv) {
  if (argv.empty() || !is_python(argv[0])) return std::nullopt;
  PythonCommand c;
  c.interpreter.push_back(argv[0]);
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m" || a == "-c") break;
    if (a.empty() || a[0] != '-' || a == "-") break;  // the script ("-": stdin, not ours)
    if (is_one_of(a, kPlainFlags)) {
      c.interpreter.push_back(a);
    } else if (is_one_of(a, kFlagsWithArgument) && i + 1 < argv.size()) {
      c.interpreter.push_back(a);
      c.interpreter.push_back(argv[++i]);
    } else {
      return std::nullopt;
    }
  }
  if (i >= argv.size() || argv[i] == "-") return std::nullopt;
  if (argv[i] == "-m" || argv[i] == "-c") {
    if (i + 1 >= argv.size()) return std::nullopt;
    c.kind = argv[i] == "-m" ? PythonCommand::Kind::kModule : PythonCommand::Kind::kCode;
    ++i;
  }
  c.target = argv[i];
  c.args.assign(argv.begin() + long(i) + 1, argv.end());
  return c;
}

}  // namespace ccrun::agent
