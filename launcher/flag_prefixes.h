//===- flag_prefixes.h - torchrun's abbreviated long flags -------*- C++ -*-===//
//
// torchrun parses its flags with argparse, which takes any unambiguous
// prefix of a long flag for the flag (`--redirect=3` is `--redirects=3`,
// `--nproc 4` is `--nproc-per-node 4`). CLI11 does not, so the launcher
// expands such prefixes before CLI11 reads the command line:
//
//   std::vector<FlagNames> flags = {{{"--redirects"}, {"-r"}, true}};
//   expand_flag_prefixes(flags, {"--redirect=3", "train.py"});
//   // {"--redirects=3", "train.py"}
//
// Only the launcher's own flags are read: expansion stops at the program
// (the first argument that is neither a flag nor a flag's value) or "--".
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

namespace ccrun::launcher {

// One option's spellings, as written on the command line.
struct FlagNames {
  std::vector<std::string> long_names;   // "--nproc-per-node", "--nproc_per_node"
  std::vector<std::string> short_names;  // "-r"
  bool takes_value = false;              // a value follows, unless given as --flag=value
};

// `args` (without argv[0]) with each unambiguous prefix of a long flag
// replaced by the flag. An exact name is never a prefix; a prefix of
// several spellings of one option is that option. A prefix of several
// options throws ConfigError naming them ("--n" could be --nnodes,
// --node-rank, ...); an unknown flag is left for the parser to refuse.
[[nodiscard]] std::vector<std::string> expand_flag_prefixes(const std::vector<FlagNames>& flags,
                                                            std::vector<std::string> args);

}  // namespace ccrun::launcher
