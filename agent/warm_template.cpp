// A node's warm Python template: spawned, asked for forks (see warm_template.h).
#include "warm_template.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <nlohmann/json.hpp>

#include "ccrun/error.h"
#include "ccrun/job_spec.h"
#include "descendants.h"
#include "process.h"
#include "progress_watch.h"

namespace ccrun::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

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
    if (m != kPreloadAuto && std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

std::string drop_template_frames(const std::string& faulthandler_text) {
  std::string out;
  std::string marker = std::string("/") + kTemplateScript + "\"";
  size_t at = 0;
  while (at < faulthandler_text.size()) {
    size_t end = faulthandler_text.find('\n', at);
    size_t next = end == std::string::npos ? faulthandler_text.size() : end + 1;
    std::string_view line(faulthandler_text.data() + at, next - at);
    bool frame = line.find("File \"") != std::string_view::npos;
    if (!frame || line.find(marker) == std::string_view::npos) out.append(line);
    at = next;
  }
  return out;
}

bool learns_imports(const std::vector<std::string>& preload) {
  return std::find(preload.begin(), preload.end(), kPreloadAuto) != preload.end();
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
  // The workers' own starter: the template starts as a cold worker does
  // (process group, death signal, default dispositions, empty mask, no
  // descriptor of the agent's), so what its forks inherit is a cold
  // worker's. It prints nothing itself; its imports' warnings go to stderr.
  ProcessImage image(args, &o_.env);
  SpawnOptions so;
  so.stdout_fd = 2;
  so.stderr_fd = 2;
  so.control_fd = sv[1];
  Spawner spawner;
  pid_ = spawner.spawn(image, so);
  int err = errno;
  ::close(sv[1]);
  if (pid_ < 0) {
    ::close(sv[0]);
    pid_ = 0;
    throw Error("--warm-start: cannot start the template " + args[0] + ": " + std::strerror(err));
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
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
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
                  {"nodes", spec.placement.nodes}, {"node_count", spec.placement.node_count},
                  {"argv", spec.argv}};
  int fds[3] = {spec.stdin_fd, out_fd, err_fd};
  if (spec.stdin_fd >= 0) send(request.dump(), fds, 3);
  else send(request.dump(), fds + 1, 2);
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
