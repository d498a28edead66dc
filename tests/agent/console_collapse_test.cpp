// One line for what many ranks print (ccrun/console_collapse.h), driven
// directly: what reaches the console (a pipe here), in which order, and how
// many ranks a node's collapse expects.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "ccrun/console_collapse.h"

using namespace ccrun::agent;

namespace {

// A console: the read end of a pipe the collapser writes to.
struct Console {
  Console() {
    REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
  }
  ~Console() { ::close(fds[0]), ::close(fds[1]); }
  std::string read() {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    return out;
  }
  int fds[2];
};

// A collapser writing to a Console, expecting `expected` ranks.
struct Collapse {
  explicit Collapse(size_t expected, std::string prefix = "[${rank}]:")
      : c(io, {console.fds[1], expected, std::move(prefix), "default"}) {}
  boost::asio::io_context io;
  Console console;
  ConsoleCollapser c;
};

// Runs the handlers ready now (a poll after the context ran out of work
// runs nothing without restart()).
void run_ready(boost::asio::io_context& io) {
  io.restart();
  io.poll();
}

}  // namespace

TEST_CASE("a line every rank prints is written once, after the read that completed it",
          "[console-collapse]") {
  Collapse x(3);
  auto& [io, console, c] = x;
  c.submit(2, 2, "UserWarning: w");
  c.submit(0, 0, "UserWarning: w");
  c.submit(1, 1, "UserWarning: w");
  CHECK(console.read().empty());  // the write follows the handler that submitted
  run_ready(io);
  CHECK(console.read() == "[0-2]:UserWarning: w\n");
}

TEST_CASE("the same text printed twice by every rank is two lines", "[console-collapse]") {
  Collapse x(2);
  auto& [io, console, c] = x;
  for (int rank : {0, 0, 1, 1}) c.submit(rank, rank, "again");
  c.submit(0, 0, "then");
  c.submit(1, 1, "then");
  run_ready(io);
  CHECK(console.read() == "[0,1]:again\n[0,1]:again\n[0,1]:then\n");
}

TEST_CASE("each rank's lines keep their order when ranks print them in another",
          "[console-collapse]") {
  Collapse x(2);
  auto& [io, console, c] = x;
  c.submit(0, 0, "x");
  c.submit(0, 0, "y");
  c.submit(1, 1, "y");  // joins rank 0's y
  c.submit(1, 1, "x");  // after its own y: not rank 0's x, a new one
  c.flush_all();
  CHECK(console.read() == "[0]:x\n[0,1]:y\n[1]:x\n");
}

TEST_CASE("a traceback is one unit, every line with the ranks' prefix", "[console-collapse]") {
  Collapse x(2);
  auto& [io, console, c] = x;
  c.submit(0, 0, "Traceback (most recent call last):\n  File \"t.py\"\nValueError: v");
  c.submit(1, 1, "Traceback (most recent call last):\n  File \"t.py\"\nValueError: v");
  run_ready(io);
  CHECK(console.read() ==
        "[0,1]:Traceback (most recent call last):\n[0,1]:  File \"t.py\"\n[0,1]:ValueError: v\n");
}

TEST_CASE("many lines through reused entries come out whole and in order", "[console-collapse]") {
  Collapse x(2, "");
  auto& [io, console, c] = x;
  std::string want;
  for (int i = 0; i < 1000; ++i) {
    std::string line = "line " + std::to_string(i % 7);  // texts repeat: chains of entries
    c.submit(0, 0, line);
    c.submit(1, 1, line);
    want += line + "\n";
    if (i % 100 == 99) run_ready(io);
  }
  run_ready(io);
  CHECK(console.read() == want);
}

TEST_CASE("a node's collapse expects the local ranks shown", "[console-collapse]") {
  CHECK(shown_local_ranks(8, {}) == 8);
  CHECK(shown_local_ranks(8, {0, 3}) == 2);
  CHECK(shown_local_ranks(2, {0, 3}) == 1);  // local rank 3 is not on this node
  CHECK(shown_local_ranks(4, {1, -1}) == 1);
}
