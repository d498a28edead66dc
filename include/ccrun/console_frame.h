//===- ccrun/console_frame.h - Worker lines carried to the launcher -*- C++ -*-===//
//
// --collapse-output on a host list: identical lines of ranks on different
// nodes can only meet where one console carries them all, the launching
// ccrun's. The agents its ssh fan-out starts therefore neither collapse nor
// prefix their workers' lines: each unit the collapse would take (a line, or
// a Python traceback whole) goes up as one framed line,
//
//   ccrun-line| <rank> <local_rank> <text, with '\\', '\n' and '\r' escaped>
//
// and the launcher parses it back and collapses across every node with one
// ConsoleCollapser (ccrun/console_collapse.h). One line per frame keeps the
// launcher's line cutting (LogMux) out of the text; a unit longer than
// kMaxFramedText goes up in several frames, since LogMux cuts lines longer
// than its limit into pieces no parser could join.
//
//   std::string up;                     // an agent: what goes to the launcher
//   for (auto& f : frame_console_unit({3, 1, "UserWarning: ..."})) up += f + "\n";
//   if (auto u = parse_console_frame(line)) collapser.submit(u->rank, u->local_rank, u->text);
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "log_mux.h"

namespace ccrun::agent {

inline constexpr std::string_view kConsoleUnitMarker = "ccrun-line| ";

// The most text one frame carries: escaped, it stays under LogMux's limit.
inline constexpr size_t kMaxFramedText = LogMux::kMaxLineBytes / 2 - 64;

struct ConsoleUnit {
  int rank = -1;
  int local_rank = -1;
  std::string text;  // lines joined by '\n', without a final one
};

// The frames of `unit`, each one line without its '\n': one, or one per
// kMaxFramedText bytes of its text.
std::vector<std::string> frame_console_unit(const ConsoleUnit& unit);

// The unit `line` (a line without its '\n') frames; nullopt when it is not a
// frame (no marker, or a malformed one: then it is shown as it is).
std::optional<ConsoleUnit> parse_console_frame(std::string_view line);

// A LineSink that writes each unit as frames to `fd` (the agent's stdout or
// stderr, the fan-out's ssh pipe): the units of one read in one write()
// (BatchedWriter).
std::shared_ptr<LineSink> make_framing_sink(boost::asio::io_context& io, int fd);

}  // namespace ccrun::agent
