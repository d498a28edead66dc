//===- ccrun/exclusion.h - Nodes kept out of a job for a cool-down -*- C++ -*-===//
//
// A bad node should not take a job down twice. A node that fails its health
// gate, or whose workers caused the failure that ended K attempts in a row
// (kExcludeAfterFailures), is excluded: it takes no place in the job's
// rounds until its cool-down ends, and every repeat offence doubles the
// cool-down, as Horovod's elastic blacklist does. The records are kept in
// the job's store (ccrun/<run_id>/exclusions, one JSON object by host name,
// updated by compare-and-set), where a node's restarted agent finds them and
// `ccrun status` lists them; a host-list launch also keeps them on the
// launching host (launcher/exclusion_file.h) for the next launch.
//
//   Exclusion e = exclude_node(store, "job", "gpu7", "its health gate failed", 60s);
//   // e.until_ms: now + 60 s (120 s the second time, and so on)
//   ExclusionList all = read_exclusions(store, "job");
//   if (auto mine = all.active("gpu7", wall_clock_ms())) std::cout << describe(*mine, e.since_ms);
//
// docs/health.md says what excludes a node and for how long.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <filesystem>

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ccrun/store.h"

namespace ccrun {

// The failures in a row a node's workers may cause before the node is
// excluded. Two: a node whose ranks fail first twice in a row while every
// other rank was healthy is most likely the node (a bad GPU, HBM or NIC
// fails again on restart), while one failure may be anything (a transient
// ECC error, a preempted process, a bug that any rank may hit). A bug that
// follows a rank to whatever node holds it is caught by the stop for
// restarts without progress instead, when --stop-without-progress asks for
// it (agent/round_decision.h), which needs more attempts than this, so it
// excludes at most one healthy node first.
inline constexpr int kExcludeAfterFailures = 2;

// The longest a cool-down grows to, however many repeat offences.
inline constexpr std::chrono::hours kMaxCooldown{24};

// `base` doubled for each offence after the first (offences >= 1), at most
// kMaxCooldown.
[[nodiscard]] std::chrono::milliseconds exclusion_cooldown(std::chrono::milliseconds base,
                                                           int offences);

// One excluded node: JSON {host, reason, since_ms, until_ms, offences}
// (wall clock, ms since the epoch: the readers are other machines).
struct Exclusion {
  std::string host;
  std::string reason;    // "its health gate failed: user: exit 1: ..."
  int64_t since_ms = 0;
  int64_t until_ms = 0;  // the cool-down's end
  int offences = 0;      // how many times it was excluded (this one included)

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static Exclusion from_json(const nlohmann::json& j);  // tolerant
};

// Every node a job excluded, live or past (a past one's offences still
// count: the next exclusion of that host doubles its cool-down).
struct ExclusionList {
  std::map<std::string, Exclusion> by_host;
  uint64_t write = 0;  // the mark of the write that stored it (exclude_node)

  // One more offence of `host` at `now_ms`, for exclusion_cooldown(base, n).
  const Exclusion& add(const std::string& host, const std::string& reason, int64_t now_ms,
                       std::chrono::milliseconds base);
  // `host`'s exclusion if its cool-down has not ended at `now_ms`.
  [[nodiscard]] std::optional<Exclusion> active(const std::string& host, int64_t now_ms) const;
  // Every exclusion whose cool-down has not ended, soonest end first.
  [[nodiscard]] std::vector<Exclusion> all_active(int64_t now_ms) const;

  // JSON {hosts: {<host>: Exclusion}, write}.
  [[nodiscard]] std::string to_json() const;
  // "" (no record yet) and unreadable text read as an empty list.
  [[nodiscard]] static ExclusionList from_json(const std::string& text);
};

// Adds one offence of `host` to the job's list in `store`, atomically with
// any other node doing the same (compare-and-set), and returns its record.
Exclusion exclude_node(store::Store& store, const std::string& run_id, const std::string& host,
                       const std::string& reason, std::chrono::milliseconds base_cooldown);

// The job's list as its store holds it now (never waits).
[[nodiscard]] ExclusionList read_exclusions(store::Store& store, const std::string& run_id);

// "until 14:02:11 (53s from now), excluded 2 times: <reason>"
[[nodiscard]] std::string describe(const Exclusion& e, int64_t now_ms);

// A file of exclusions (ExclusionList JSON), kept where the next launch of
// the same job looks: a host-list launch's launching host, or a Slurm job's
// shared state folder (launcher/exclusion_file.h names it).
//
// The file's list; empty when the file is missing or unreadable.
[[nodiscard]] ExclusionList read_exclusion_file(const std::filesystem::path& file);
// Adds `e` (keyed by e.host) to the file, replacing that host's record, in
// one rename; makes the folder. Returns an error message, "" on success.
// Two writers at once may lose one's record (the last rename wins).
std::string record_exclusion(const std::filesystem::path& file, const Exclusion& e);

}  // namespace ccrun
