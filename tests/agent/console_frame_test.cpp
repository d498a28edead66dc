// Worker lines framed for the launching ccrun's console (ccrun/console_frame.h):
// a unit comes back as it went, whatever bytes it holds; a long one goes in
// frames LogMux does not cut; a line that is not a whole frame is not taken.
#include <catch2/catch.hpp>

#include "ccrun/console_frame.h"

using namespace ccrun::agent;

TEST_CASE("a framed unit is one line and comes back as it went", "[console-frame]") {
  std::string text = "Traceback (most recent call last):\n  File \"a\\b.py\"\r\nValueError: x\\n";
  auto frames = frame_console_unit({12, 3, text});
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].find('\n') == std::string::npos);
  CHECK(frames[0].find('\r') == std::string::npos);
  auto unit = parse_console_frame(frames[0]);
  REQUIRE(unit);
  CHECK(unit->rank == 12);
  CHECK(unit->local_rank == 3);
  CHECK(unit->text == text);
  // LogMux hands the launcher's filter the line without its '\n'; a '\n' left on is taken too.
  CHECK(parse_console_frame(frames[0] + "\n")->text == text);
  CHECK(parse_console_frame(frame_console_unit({0, 0, ""})[0])->text.empty());
}

TEST_CASE("a unit longer than a frame goes in frames under LogMux's line limit", "[console-frame]") {
  std::string text(kMaxFramedText * 2 + 10, '\n');  // escaped, each byte doubles
  auto frames = frame_console_unit({1, 1, text});
  REQUIRE(frames.size() == 3);
  std::string joined;
  for (const auto& f : frames) {
    CHECK(f.size() < ccrun::LogMux::kMaxLineBytes);
    joined += parse_console_frame(f)->text;
  }
  CHECK(joined == text);
}

TEST_CASE("a line that is not a whole frame is shown as it is", "[console-frame]") {
  CHECK_FALSE(parse_console_frame("[3]:ccrun-line| 1 1 x"));
  CHECK_FALSE(parse_console_frame("ccrun-line| 1 x"));
  CHECK_FALSE(parse_console_frame("ccrun-line| a 1 x"));
  CHECK_FALSE(parse_console_frame("ccrun-line| 1 1 ends in \\"));
  CHECK_FALSE(parse_console_frame("ccrun-line| 1 1 unknown \\t escape"));
  CHECK_FALSE(parse_console_frame("ccrun-line| 99999999999 1 x"));
}
