// The agent's warm start (--warm-start; agent_impl.h, warm_template.h): the
// node's template started with the job, asked for each attempt's workers,
// made anew when it cannot fork, and given what the workers imported.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "agent_impl.h"
#include "ccrun/error.h"
#include "worker_env.h"

namespace ccrun::agent {

namespace {
// How long an attempt waits for the template's imports before it starts
// cold: an import that slow would be as slow in every cold worker.
constexpr std::chrono::milliseconds kTemplateReady{300'000};
}  // namespace

void Agent::start_template() {
  if (!spec_.warm_start) return;
  if (!python_) {
    python_ = parse_python_command(worker_arguments(spec_.entrypoint, 0));
    if (!python_) {
      spdlog::info("ccrun: --warm-start: {} is not a Python command ccrun can fork; the workers "
                   "start cold", spec_.entrypoint.front());
      warm_off_ = true;
    }
  }
  std::string hook = ProgressWatch::python_hook_dir();
  if (warm_off_ || hook.empty()) {
    if (hook.empty()) spdlog::warn("ccrun: --warm-start: the Python hook's folder is missing; cold");
    warm_off_ = true;
    return;
  }
  std::vector<std::string> modules = template_modules(spec_.preload);
  if (!preload_broke_) {
    for (const auto& m : preloaded_) {
      if (std::find(modules.begin(), modules.end(), m) == modules.end()) modules.push_back(m);
    }
  }
  WarmTemplateOptions o{*python_, template_environment(node_environment(spec_)), modules,
                        (std::filesystem::path(hook) / "ccrun_template.py").string()};
  try {
    warm_ = std::make_unique<WarmTemplate>(std::move(o));
  } catch (const Error& e) {
    spdlog::warn("ccrun: {}; the workers start cold", e.what());
    warm_off_ = true;
  }
}

WorkerStarter* Agent::warm_starter() {
  if (!warm_) return nullptr;
  bool was_ready = warm_->ready();
  std::string why;
  run_off_loop([&] { why = warm_->wait_ready(kTemplateReady); });
  if (signalled_) return nullptr;  // the stop killed the template: nothing starts, cold or warm
  if (!why.empty()) {
    spdlog::warn("ccrun: attempt {} starts cold: {}", restart_count_, why);
    return nullptr;
  }
  if (!was_ready) {
    std::string list;
    for (const auto& m : warm_->imported()) list += (list.empty() ? "" : ", ") + m;
    spdlog::info("ccrun: warm start: template pid {} imported {} in {:.2f}s", warm_->pid(),
                 list.empty() ? "nothing" : list, warm_->import_seconds());
    for (const auto& [m, err] : warm_->failed()) {
      if (m != "torch" || err.find("ModuleNotFoundError") == std::string::npos) {
        spdlog::warn("ccrun: warm start: the template cannot import {}: {}", m, err);
      }
    }
    auto torch = warm_->failed().find("torch");
    if (warm_->imported().empty() && torch != warm_->failed().end()) {
      spdlog::warn("ccrun: warm start: the template imported nothing ({} has no torch: {}), so a "
                   "warm worker saves only the interpreter's own start-up; name the modules worth "
                   "importing once with --preload, or drop --warm-start",
                   python_->interpreter.front(), torch->second);
    }
  }
  return warm_.get();
}

void Agent::renew_template() {
  if (!warm_ || warm_->broken().empty()) return;
  if (!preloaded_.empty()) preload_broke_ = true;  // what the workers imported may be why
  warm_.reset();
  start_template();
  if (warm_) spdlog::info("ccrun: warm start: a fresh template (pid {}) for the next attempt", warm_->pid());
}

void Agent::preload_imports() {
  if (!learns_imports(spec_.preload)) return;
  if (!warm_ || preload_broke_ || !attempt_ || !attempt_->monitor) return;
  std::vector<std::string> fresh;
  for (const auto& m : attempt_->monitor->imported_modules(0)) {
    const auto& had = warm_->imported();
    if (std::find(had.begin(), had.end(), m) == had.end() && preloaded_.insert(m).second) {
      fresh.push_back(m);
    }
  }
  if (fresh.empty()) return;
  std::string list;
  for (const auto& m : fresh) list += (list.empty() ? "" : ", ") + m;
  spdlog::info("ccrun: warm start: the template imports {} for the next attempt (the workers did)",
               list);
  warm_->preload(fresh);
}

}  // namespace ccrun::agent
