// Starting and watching a child the one way ccrun does (base/process.h):
// its exit status, its own process group, its stdin, a failed exec said.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "process.h"

using namespace ccrun;

namespace {

// Runs `argv` to its end; its status, and what it wrote on stdout and stderr.
ExitStatus run(const std::vector<std::string>& argv, std::string* out = nullptr,
               int stdin_fd = -1, const std::vector<std::string>* env = nullptr) {
  int pipe_fds[2];
  REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
  boost::asio::io_context io;
  Spawner spawner;
  SpawnOptions o;
  o.stdin_fd = stdin_fd;
  o.stdout_fd = o.stderr_fd = pipe_fds[1];
  pid_t pid = spawner.spawn(ProcessImage(argv, env), o);
  REQUIRE(pid > 0);
  ::close(pipe_fds[1]);
  ProcessWatch watch(io, pid);
  ExitStatus status{-1, -1};
  watch.async_wait([&](ExitStatus s) { status = s; });
  io.run();
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
  ::close(pipe_fds[0]);
  if (out) *out = text;
  CHECK(watch.reaped());
  return status;
}

}  // namespace

TEST_CASE("process: the exit code comes back through the pidfd, reaped", "[process]") {
  ExitStatus s = run({"/bin/sh", "-c", "exit 3"});
  CHECK(s.exit_code == 3);
  CHECK(s.signal == 0);
}

TEST_CASE("process: a signal that kills it is 128+N", "[process]") {
  ExitStatus s = run({"/bin/sh", "-c", "kill -TERM $$"});
  CHECK(s.signal == SIGTERM);
  CHECK(s.exit_code == 128 + SIGTERM);
}

TEST_CASE("process: its own process group, default dispositions, an empty mask", "[process]") {
  std::string out;
  std::string own_group = "test \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$";
  CHECK(run({"/bin/sh", "-c", own_group}, &out).exit_code == 0);
  // Read by the child itself (grep of its own status), never by a shell,
  // which blocks signals of its own around its forks. SIGPIPE ignored here
  // and every signal blocked while spawning must not reach the child.
  auto old = ::signal(SIGPIPE, SIG_IGN);
  CHECK(run({"/bin/grep", "-q", "^SigIgn:.0*$", "/proc/self/status"}, &out).exit_code == 0);
  CHECK(run({"/bin/grep", "-q", "^SigBlk:.0*$", "/proc/self/status"}, &out).exit_code == 0);
  ::signal(SIGPIPE, old);
  CHECK(out.empty());
}

TEST_CASE("process: stdin given, or /dev/null, the environment given, or inherited",
          "[process]") {
  int in[2];
  REQUIRE(pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::write(in[1], "hello\n", 6) == 6);
  ::close(in[1]);
  std::string out;
  CHECK(run({"/bin/cat"}, &out, in[0]).exit_code == 0);
  ::close(in[0]);
  CHECK(out == "hello\n");
  CHECK(run({"/bin/cat"}, &out).exit_code == 0);
  CHECK(out.empty());
  std::vector<std::string> env = {"ONLY=this", "PATH=/usr/bin:/bin"};
  CHECK(run({"/bin/sh", "-c", "echo $ONLY; echo ${HOME:-none}"}, &out, -1, &env).exit_code == 0);
  CHECK(out == "this\nnone\n");
}

TEST_CASE("process: a program that cannot run is named, exit 127", "[process]") {
  std::string out;
  ExitStatus s = run({"no-such-program-ccrun"}, &out);
  CHECK(s.exit_code == 127);
  CHECK_THAT(out, Catch::Contains("ccrun: cannot execute \"no-such-program-ccrun\": No such file "
                                  "or directory (is it on PATH, or give its full path)"));
}

TEST_CASE("process: kill_and_reap ends a running child and its group", "[process]") {
  boost::asio::io_context io;
  Spawner spawner;
  SpawnOptions o;
  pid_t pid = spawner.spawn(ProcessImage({"/bin/sleep", "30"}, nullptr), o);
  REQUIRE(pid > 0);
  ProcessWatch watch(io, pid);
  watch.kill_and_reap();
  CHECK(watch.reaped());
  CHECK(::kill(pid, 0) != 0);  // gone, reaped
}
