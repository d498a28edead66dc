//===- descendants.h - Finds every process a worker started -----*- C++ -*-===//
//
// Killing a worker's process group misses the descendants that left it
// (setsid, setpgid: daemons, some data loaders, `nohup ... &` in a shell
// script). Two mechanisms find them, one for each time they are looked for:
//
// - While the agent lives (every worker exit, every stop): the agent is a
//   child subreaper (PR_SET_CHILD_SUBREAPER), so a descendant whose parent
//   dies reparents to the agent, never to init, and every descendant of
//   every worker is in the agent's own process tree. `kill_tree_holders`
//   walks that tree (/proc/<pid>/task/<tid>/children), skipping the live
//   workers' subtrees: its cost is the job's own processes, not the node's.
//   The common path (no orphan at all) reads the agent's few `children`
//   files and nothing else. It also reaps the zombies that reparented to
//   the agent.
// - After the agent died (the orphan killer, orphan_killer.h): the agent is no longer
//   an ancestor of anything (its orphans went to init), so the orphan killer
//   scans every process's environment for the token
//   (`kill_token_holders`). That costs one read per process on the node,
//   paid once, on the rare path.
//
// The token: every worker's environment carries CCRUN_AGENT_TOKEN=<token>,
// unique to its agent and worker, and descendants inherit it. The tree walk
// reads it only to tell which worker an orphan came from; everything below
// a token holder dies with it, whatever its environment. A subreaper alone
// was once rejected because orphans escape to init when the agent is
// SIGKILLed: the orphan killer's scan answers that case. Why not a cgroup per job:
// it needs a writable, delegated cgroup v2 hierarchy, which containers and
// unprivileged users usually lack. A process that replaces its whole
// environment and whose ancestors up to the agent all died escapes the
// token; so does one that escapes the orphan killer's scan the same way. That is
// the documented limit.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace ccrun::agent {

// The variable's name in every worker's environment.
inline constexpr const char* kAgentTokenVar = "CCRUN_AGENT_TOKEN";

// Makes the calling process a child subreaper: orphaned descendants
// reparent to it instead of init. Idempotent; false when the kernel refuses.
bool become_subreaper();

// Walks the caller's process tree (the caller must be a subreaper: see
// become_subreaper) and SIGKILLs every process that holds
// "CCRUN_AGENT_TOKEN=<token>" (or, with `with_children`, a token that
// extends it: "<token>.<more>") together with its whole subtree. The
// subtrees of the `skip` pids (live workers) are not entered. Repeats until
// a walk kills nothing new (a process may fork while it is being killed; at
// most a few rounds). Reaps, without waiting, every zombie child that is
// not in `skip` and left the caller's process group (a reparented
// descendant: the agent's own helpers stay in its group and keep their
// waitpid). Returns how many were killed, less those in `signalled_group`
// (a process group the caller has just SIGKILLed: its members may not have
// died yet, and they did not leave it) and less those with SIGKILL already
// pending (killed by an earlier call, not dead yet: a walk repeated while
// they die counts each once). Cost: the caller's process tree,
// outside the skipped subtrees; nothing else on the node is read.
int kill_tree_holders(const char* token, bool with_children, const pid_t* skip, size_t n_skip,
                      pid_t signalled_group = 0);

// SIGKILLs process group `group` (a worker's, after the worker exited) and
// returns how many of its members were still running: not those that had
// exited already (zombies not reaped yet) or were exiting (in exit(2), or
// with SIGKILL pending), which a program that waited for nothing leaves
// behind for a moment without having left anything running. Reads the
// caller's process tree (a subreaper's: the group's orphans are in it).
int kill_process_group(pid_t group);

// SIGKILLs every process on the node (but the caller) whose environment
// holds the token, as above, rescanning until a scan finds none. One
// environ read per process on the node: the orphan killer's last resort, once
// the agent is gone. Allocation-free (the orphan killer calls it); `token` must
// be NUL-terminated.
int kill_token_holders(const char* token, bool with_children);

}  // namespace ccrun::agent
