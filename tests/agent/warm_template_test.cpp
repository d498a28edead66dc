// The warm template's pure parts (warm_template.h) and the terminal lent to a
// lone worker (terminal_lease.h).
#include "warm_template.h"

#include <catch2/catch.hpp>

#include "terminal_lease.h"

using namespace ccrun::agent;

TEST_CASE("the template imports torch and what --preload names, never the word auto",
          "[warm_template]") {
  REQUIRE(template_modules({}) == std::vector<std::string>{"torch"});
  REQUIRE(template_modules({"numpy", "auto", "torch", "numpy"}) ==
          std::vector<std::string>{"torch", "numpy"});
  REQUIRE_FALSE(learns_imports({"numpy"}));
  REQUIRE(learns_imports({"numpy", "auto"}));
}

TEST_CASE("a warm worker's stack dump leaves the template's frames out", "[warm_template]") {
  std::string dump =
      "Current thread 0x00007f (most recent call first):\n"
      "  File \"/proj/train.py\", line 5 in step\n"
      "  File \"/proj/train.py\", line 9 in <module>\n"
      "  File \"/usr/share/ccrun/python/ccrun_template.py\", line 340 in run\n"
      "  File \"/usr/share/ccrun/python/ccrun_template.py\", line 420 in main\n"
      "  File \"/usr/share/ccrun/python/ccrun_template.py\", line 431 in <module>\n"
      "\n"
      "Thread 0x00007e (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n";
  std::string cold =
      "Current thread 0x00007f (most recent call first):\n"
      "  File \"/proj/train.py\", line 5 in step\n"
      "  File \"/proj/train.py\", line 9 in <module>\n"
      "\n"
      "Thread 0x00007e (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n";
  REQUIRE(drop_template_frames(dump) == cold);
  REQUIRE(drop_template_frames(cold) == cold);
  // a user's file of another name that ends alike is the user's
  std::string mine = "  File \"/proj/my_ccrun_template.py\", line 1 in <module>";
  REQUIRE(drop_template_frames(mine) == mine);
}

TEST_CASE("the terminal is lent to a node's lone worker only, and only by its holder",
          "[terminal_lease]") {
  REQUIRE(lends_terminal(true, true, 1));
  REQUIRE_FALSE(lends_terminal(true, true, 2));   // two workers would fight over it
  REQUIRE_FALSE(lends_terminal(false, true, 1));  // not a terminal, or in the background
  REQUIRE_FALSE(lends_terminal(true, false, 1));  // the workers read /dev/null (fan-out)
}
