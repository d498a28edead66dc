// A stream's last lines for a failure report, bounded in lines and bytes (base/log_mux.h).
#include <catch2/catch.hpp>

#include "log_mux.h"

using ccrun::TailLines;

TEST_CASE("the last lines are kept, oldest first", "[tail]") {
  TailLines t;
  for (int i = 0; i < 20; ++i) t.add("line " + std::to_string(i));
  std::string text = t.text();
  REQUIRE(text.rfind("line 8\n", 0) == 0);
  REQUIRE(text.find("line 19\n") != std::string::npos);
}

TEST_CASE("a carriage return ends a line: a progress bar keeps its last states", "[tail]") {
  TailLines t;
  std::string bar;
  for (int i = 0; i < 10000; ++i) bar += "\r" + std::to_string(i) + "%|####|";
  t.add(bar);
  t.add("Traceback: boom");
  std::string text = t.text();
  REQUIRE(text.size() < 200);
  REQUIRE(text.find("9999%|####|\n") != std::string::npos);
  REQUIRE(text.find("Traceback: boom\n") != std::string::npos);
  TailLines empty;
  empty.add("");
  REQUIRE(empty.text() == "\n");
}

TEST_CASE("huge lines are cut and the whole tail stays under its byte bound", "[tail]") {
  TailLines t;
  for (int i = 0; i < 10; ++i) t.add(std::string(1 << 20, 'x'));
  std::string text = t.text();
  REQUIRE(text.size() <= TailLines::kTotalBytes + 64);
  REQUIRE(text.find("more bytes]") != std::string::npos);
}
