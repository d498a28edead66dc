//===- completion.h - bash completion from the flag table --------*- C++ -*-===//
//
// `ccrun --print-completion bash` prints a bash completion script made from
// the parser's own options (job_builder.cpp) and each setting's fixed values
// (Setting::choices in settings.h), so that a new flag, or a new value of
// one, completes without editing the script. The build runs it once and the
// package installs the result as /usr/share/bash-completion/completions/ccrun:
//
//   std::vector<FlagCompletion> flags = {{{"--rdzv-backend"}, true, {"static", "c10d"}}};
//   std::string script = bash_completion_script("ccrun", flags);
//
// The script completes flag names after "-", a flag's fixed values after it
// (also as --flag=value), a subcommand's name as the first word (with the
// paths a program may be), and leaves everything else (a path, the program
// and its arguments) to bash's default completion.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ccrun::launcher {

// One option as the completion sees it.
struct FlagCompletion {
  std::vector<std::string> names;    // every spelling: "--nproc-per-node", "--nproc_per_node", "-r"
  bool takes_value = false;          // a value follows (or --flag=value)
  std::vector<std::string> choices;  // its fixed values; empty: any (bash's default completion)
};

// `option` as the completion sees it: every spelling, whether it takes a
// value, and `choices`.
FlagCompletion flag_completion(const CLI::Option& option, std::vector<std::string> choices = {});

// A subcommand, as the command's first word (`ccrun status ...`), with flags
// of its own.
struct SubcommandCompletion {
  std::string name;
  std::vector<FlagCompletion> flags;
};

// The bash script completing `command` with `flags`, and each subcommand
// with its own after its name. Throws std::invalid_argument for a name or
// value a shell word cannot hold unquoted (only letters, digits and
// "_-.:+/@" are taken).
[[nodiscard]] std::string bash_completion_script(const std::string& command,
                                                 const std::vector<FlagCompletion>& flags,
                                                 const std::vector<SubcommandCompletion>& subcommands = {});

}  // namespace ccrun::launcher
