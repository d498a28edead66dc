//===- python_command.h - What a Python worker's command line runs -*- C++ -*-===//
//
// A warm start (warm_template.h) runs a worker's program inside a forked
// template interpreter, so it must know what the command line would have
// run: the interpreter and its flags (the template's own), and a script, a
// module (-m) or code (-c) with its arguments. Anything else, or a flag
// whose meaning it does not know, is not a Python command here and starts
// cold.
//
//   parse_python_command({"/usr/bin/python3", "-u", "train.py", "--lr", "1"})
//     -> interpreter {"/usr/bin/python3", "-u"}, kScript "train.py", args {"--lr", "1"}
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ccrun::agent {

struct PythonCommand {
  enum class Kind { kScript, kModule, kCode };
  std::vector<std::string> interpreter;  // the program and its flags
  Kind kind = Kind::kScript;
  std::string target;                    // the script's path, the module or the code
  std::vector<std::string> args;         // what follows the target

  const char* kind_name() const;         // "script", "module", "code"
};

// `argv` as a Python command, or nullopt when its program is not a Python
// interpreter (its file name starts with "python"), or a flag is one this
// parser does not know (it may take an argument, or change what runs).
std::optional<PythonCommand> parse_python_command(const std::vector<std::string>& argv);

}  // namespace ccrun::agent
