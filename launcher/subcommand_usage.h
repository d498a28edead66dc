//===- subcommand_usage.h - A subcommand's bad command line, said ---*- C++ -*-===//
//
// `ccrun status`, `top` and `report` parse their flags with CLI11. A bad
// flag gets one line: the parser's own message, the nearest known flag when
// an unknown one is near enough to be a typo (the same "did you mean" the
// main command gives, settings.h's closest_flag), and the help to read.
//
//   catch (const CLI::ParseError& e) {
//     std::fputs(subcommand_usage_error("status", *app, e, args).c_str(), stderr);
//     return kExitUsage;
//   }
//
//===----------------------------------------------------------------------===//
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace ccrun::launcher {

// "ccrun <name>: <what is wrong>[; did you mean "--x"?]; see ccrun <name> --help\n"
// for `e`, raised by `app` parsing `args`.
std::string subcommand_usage_error(const std::string& name, const CLI::App& app,
                                   const CLI::ParseError& e, const std::vector<std::string>& args);

}  // namespace ccrun::launcher
