//===- descendants.h - Finds every process a worker started -----*- C++ -*-===//
//
// Killing a worker's process group misses the descendants that left it
// (setsid, setpgid: daemons, some data loaders, `nohup ... &` in a shell
// script). Every worker's environment carries CCRUN_AGENT_TOKEN=<token>,
// unique to its agent, and descendants inherit it; the agent (when the
// group stops) and its janitor (when the agent dies) kill every process
// whose environment holds the token.
//
// Why not a cgroup per job: it needs a writable, delegated cgroup v2
// hierarchy, which containers and unprivileged users usually lack. Why not
// PR_SET_CHILD_SUBREAPER: orphans reparent to the agent only while it
// lives; when the agent is SIGKILLed they escape to init, and the janitor
// (not their ancestor) could not find them. A process that replaces its
// whole environment escapes the token; that is the documented limit.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

namespace ccrun::agent {

// The variable's name in every worker's environment.
inline constexpr const char* kAgentTokenVar = "CCRUN_AGENT_TOKEN";

// SIGKILLs every process (but the caller) whose environment holds
// "CCRUN_AGENT_TOKEN=<token>", or, with `with_children`, a token that
// extends it ("<token>.<more>": each worker's token is the agent's token
// plus ".<attempt>.<local rank>"), rescanning until a scan finds none (a
// process may fork while it is being killed; at most a few rounds). Returns
// how many were killed. Allocation-free (the janitor calls it); `token` must
// be NUL-terminated.
int kill_token_holders(const char* token, bool with_children);

}  // namespace ccrun::agent
