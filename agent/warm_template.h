//===- warm_template.h - A node's warm Python template ----------*- C++ -*-===//
//
// --warm-start: one template interpreter per node imports the job's heavy
// modules (torch and --preload; with --preload auto, also what the last
// attempt's workers imported) once; each worker of each attempt is then forked from it instead of
// starting a fresh interpreter that imports them again (agent/python/
// ccrun_template.py, docs/startup.md). The template forks with CLONE_PARENT,
// so a warm worker is the agent's own child like a cold one, and the agent
// watches it the same way (worker_group.h: this is a WorkerStarter).
//
//   WarmTemplate t(options);                 // spawned; imports in the background
//   std::string why = t.wait_ready(60s);     // "" = forks may be asked for
//   group.start(n, make, on_exit, why.empty() ? &t : nullptr);
//
// The agent talks to it over a SOCK_SEQPACKET socket, one JSON message a
// request, the worker's stdin, stdout and stderr passed with SCM_RIGHTS. Calls block
// the caller: wait_ready for the imports, start() for one fork (milliseconds).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "env_builder.h"
#include "ccrun/python_command.h"
#include "worker_group.h"

namespace ccrun::agent {

struct WarmTemplateOptions {
  PythonCommand command;             // a worker's command (local rank 0's): interpreter and program
  std::vector<std::string> env;      // the template's environment ("NAME=value")
  std::vector<std::string> modules;  // imported before it says it is ready
  std::string script;                // ccrun_template.py
};

// The value the template's CCRUN_AGENT_TOKEN holds until a worker writes its
// own over it: as long as any token, and never one.
inline constexpr const char* kTokenPlaceholder = "ccrun-warm-template-------------------------------";

class WarmTemplate final : public WorkerStarter {
 public:
  // Spawns the template (it imports in the background). Throws ccrun::Error
  // when it cannot be spawned.
  explicit WarmTemplate(WarmTemplateOptions options);
  // Closes its socket (it exits), SIGKILLs it if it has not, and reaps it.
  ~WarmTemplate() override;
  WarmTemplate(const WarmTemplate&) = delete;  // owns a process
  WarmTemplate& operator=(const WarmTemplate&) = delete;

  // Waits up to `timeout` for the template's first message. "" when forks
  // may be asked for; else why not (it died, timed out, or is unsafe to fork:
  // a thread, a CUDA context), in one line. Later calls return at once.
  std::string wait_ready(std::chrono::milliseconds timeout);

  // It said it was ready (wait_ready has returned once since then).
  bool ready() const { return ready_; }

  // What it imported before it was ready, how long that took, and the
  // modules it could not import (with their errors).
  const std::vector<std::string>& imported() const { return imported_; }
  double import_seconds() const { return import_seconds_; }
  const std::map<std::string, std::string>& failed() const { return failed_; }

  // Forks the worker `spec` describes (WorkerStarter). Throws ccrun::Error
  // naming why the template could not (then the template is not used again).
  pid_t start(const WorkerSpec& spec, int out_fd, int err_fd) override;

  // Imports `modules` in the template, in the background (no answer: one
  // that made the template unsafe is said at the next fork).
  void preload(const std::vector<std::string>& modules);

  // SIGKILLs the template (a stop signal): a wait_ready on another thread
  // returns at once. Thread-safe.
  void abort() const;

  pid_t pid() const { return pid_; }
  // It failed, or said why it cannot fork: "" while usable.
  const std::string& broken() const { return broken_; }

 private:
  void spawn();
  std::string receive(std::chrono::milliseconds timeout);
  void send(const std::string& message, const int* fds, int nfds);

  WarmTemplateOptions o_;
  pid_t pid_ = 0;
  int fd_ = -1;
  bool ready_ = false;
  std::string broken_;
  std::vector<std::string> imported_;
  std::map<std::string, std::string> failed_;
  double import_seconds_ = 0;
};

// The template's environment: `node_env` (worker_env.h's node part) with the
// start-up hook on PYTHONPATH and the token placeholder.
std::vector<std::string> template_environment(EnvBuilder node_env);

// The modules a template imports first: torch, then `preload` (less the
// word `auto`), each once.
std::vector<std::string> template_modules(const std::vector<std::string>& preload);

// --preload auto: after an attempt, the template also imports what that
// attempt's workers imported (never unless asked: a package that reads a
// per-rank variable at import would read the template's).
bool learns_imports(const std::vector<std::string>& preload);

// The template's script file name: its frames lie below a warm worker's
// program, and stacks shown to the user leave them out.
inline constexpr const char* kTemplateScript = "ccrun_template.py";

// `faulthandler_text` (a Python stack dump) without the lines of the
// template's frames: a warm worker's stack as a cold one's would read.
std::string drop_template_frames(const std::string& faulthandler_text);

}  // namespace ccrun::agent
