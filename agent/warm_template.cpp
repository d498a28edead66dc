// A node's warm Python template: spawned, asked for forks (see warm_template.h).
#include "warm_template.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ccrun/error.h"
#include "descendants.h"
#include "progress_watch.h"

namespace ccrun::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kControlFd = 3;  // the template's end of the socket (ccrun_template.py)
constexpr std::chrono::milliseconds kForkTimeout{10'000};

// sys.path[0] of the program the workers run, as its command line sets it.
std::string program_path0(const PythonCommand& c) {
  std::error_code ec;
  switch (c.kind) {
    case PythonCommand::Kind::kCode: return "";
    case PythonCommand::Kind::kModule: return fs::current_path(ec).string();
    case PythonCommand::Kind::kScript: break;
  }
  fs::path p = fs::canonical(c.target, ec);
  return ec ? fs::current_path(ec).string() : p.parent_path().string();
}

// The CPU indices set in `mask`.
json cpu_list(const std::vector<unsigned long>& mask) {
  json out = json::array();
  for (size_t w = 0; w < mask.size(); ++w) {
    for (size_t b = 0; b < 8 * sizeof(unsigned long); ++b) {
      if (mask[w] & (1ul << b)) out.push_back(w * 8 * sizeof(unsigned long) + b);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> template_environment(EnvBuilder node_env) {
  ProgressWatch::add_hook_path(node_env);
  node_env.set(kAgentTokenVar, kTokenPlaceholder);
  return node_env.flatten();
}

std::vector<std::string> template_modules(const std::vector<std::string>& preload) {
  std::vector<std::string> out = {"torch"};
  for (const auto& m : preload) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

WarmTemplate::WarmTemplate(WarmTemplateOptions options) : o_(std::move(options)) { spawn(); }

WarmTemplate::~WarmTemplate() {
  if (fd_ >= 0) ::close(fd_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void WarmTemplate::spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    throw Error(std::string("--warm-start: cannot make the template's socket: ") + std::strerror(errno));
  }
  std::vector<std::string> args = o_.command.interpreter;
  std::string modules;
  for (const auto& m : o_.modules) modules += (modules.empty() ? "" : ",") + m;
  args.insert(args.end(), {o_.script, std::to_string(::getpid()), kTokenPlaceholder,
                           program_path0(o_.command), modules});
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : o_.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);  // it prints nothing; its imports may warn
  // A dup2 onto itself is a no-op that keeps close-on-exec: move an end that
  // sits at 3 already elsewhere first.
  if (sv[1] == kControlFd) {
    int moved = ::fcntl(sv[1], F_DUPFD_CLOEXEC, kControlFd + 1);
    ::close(sv[1]);
    sv[1] = moved;
  }
  posix_spawn_file_actions_adddup2(&fa, sv[1], kControlFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigemptyset(&all);
  for (int s = 1; s < NSIG; ++s) {  // glibc's own two (32, 33) are not the user's
    if (s < 32 || s >= SIGRTMIN) sigaddset(&all, s);
  }
  posix_spawnattr_setsigmask(&attr, &none);   // the agent blocks its stop signals
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);        // a terminal's Ctrl-C is the agent's to pass on
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  int rc = posix_spawnp(&pid_, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    pid_ = 0;
    throw Error("--warm-start: cannot start the template " + args[0] + ": " + std::strerror(rc));
  }
  fd_ = sv[0];
}

std::string WarmTemplate::receive(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, int(timeout.count()));
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    broken_ = "the template did not answer within " + std::to_string(timeout.count() / 1000) + " s";
    return "";
  }
  std::string buf(1 << 16, '\0');
  ssize_t got = ::recv(fd_, buf.data(), buf.size(), 0);
  if (got <= 0) {
    broken_ = "the template exited (its imports failed? its stderr above says why)";
    return "";
  }
  buf.resize(size_t(got));
  return buf;
}

void WarmTemplate::send(const std::string& message, const int* fds, int nfds) {
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(size_t(nfds) * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(size_t(nfds) * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, size_t(nfds) * sizeof(int));
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    broken_ = std::string("cannot reach the template: ") + std::strerror(errno);
    throw Error(broken_);
  }
}

std::string WarmTemplate::wait_ready(std::chrono::milliseconds timeout) {
  if (ready_ || !broken_.empty()) return broken_;
  std::string reply = receive(timeout);
  if (reply.empty()) return broken_;
  json j = json::parse(reply, nullptr, false);
  if (!j.is_object() || !j.value("ready", false)) {
    broken_ = "the template said something else than ready: " + reply.substr(0, 200);
    return broken_;
  }
  ready_ = true;
  imported_ = j.value("imported", std::vector<std::string>{});
  failed_ = j.value("failed", std::map<std::string, std::string>{});
  import_seconds_ = j.value("seconds", 0.0);
  broken_ = j.value("unsafe", std::string());
  return broken_;
}

pid_t WarmTemplate::start(const WorkerSpec& spec, int out_fd, int err_fd) {
  if (!ready_ || !broken_.empty()) throw Error(broken_.empty() ? "the template is not ready" : broken_);
  auto command = parse_python_command(spec.argv);
  if (!command || command->interpreter != o_.command.interpreter) {
    throw Error("the worker's command is not the template's interpreter");
  }
  json request = {{"op", "fork"},          {"kind", command->kind_name()},
                  {"target", command->target}, {"args", command->args},
                  {"env", spec.env},       {"cpus", cpu_list(spec.placement.cpus)},
                  {"nodes", spec.placement.nodes}, {"node_count", spec.placement.node_count}};
  int fds[2] = {out_fd, err_fd};
  send(request.dump(), fds, 2);
  std::string reply = receive(kForkTimeout);
  if (reply.empty()) throw Error(broken_);
  json j = json::parse(reply, nullptr, false);
  pid_t pid = j.is_object() ? j.value("pid", 0) : 0;
  if (pid <= 0) {
    broken_ = j.is_object() ? j.value("error", reply) : reply;
    throw Error(broken_);
  }
  return pid;
}

void WarmTemplate::abort() const {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

void WarmTemplate::preload(const std::vector<std::string>& modules) {
  if (!ready_ || !broken_.empty() || modules.empty()) return;
  try {
    send(json{{"op", "preload"}, {"modules", modules}}.dump(), nullptr, 0);
  } catch (const Error&) {
    // broken_ says why; the next attempt starts cold and says so
  }
}

}  // namespace ccrun::agent
