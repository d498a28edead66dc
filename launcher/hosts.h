//===- hosts.h - Host lists: hostfiles, `hosts:`, --include/--exclude -*- C++ -*-//
//
// A host list names the machines of one job, in node-rank order. It comes
// from a DeepSpeed-style hostfile or from `hosts:` in the YAML job file:
//
//   # hostfile                      # job.yaml
//   node1 slots=4                   hosts:
//   node2            # nproc_per_node  - node1                 # nproc_per_node
//   10.0.0.7 slots=2                  - {host: node2, slots: 4}
//
// and is narrowed by DeepSpeed's filters (grammar in docs/cli.md):
//
//   --include "node1@node2:0,2"     only node1 (all slots) and slots 0, 2 of node2
//   --exclude "node3@node1:3"       drop node3, and slot 3 of node1
//
// Every error names its source and column: `hosts.txt:3:7: ...`,
// `--include "a@b:x": column 5: ...`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/job_spec.h"

namespace ccrun::launcher {

// One host as the list gives it, before filtering.
struct HostLine {
  std::string name;
  std::optional<int> slots;  // unset: nproc_per_node
  std::string where;         // "hosts.txt:3:1" or "job.yaml:5:5": for errors
};

// The lines of a hostfile (`text`, read from `path`): `host [slots=N]`,
// `#` comments (whole line or after the entry), blank lines. A host given
// twice is an error naming both lines.
std::vector<HostLine> parse_hostfile(std::string_view text, const std::string& path);
// Reads and parses the file at `path`.
std::vector<HostLine> read_hostfile(const std::string& path);

// One entry of an --include/--exclude filter.
struct HostFilterEntry {
  std::string host;
  std::vector<int> slots;  // empty: the whole host
};
// `host[:slot,slot...]` entries joined by '@'. `label` (`--include "..."`)
// starts every error.
std::vector<HostFilterEntry> parse_host_filter(std::string_view text, const std::string& label);

// The host list with its slots resolved (`default_slots` for a host without
// slots=; 0 = counted on the host, then a filter cannot name its slots) and narrowed by `include` or `exclude` (at most one non-empty;
// each labelled for errors). Throws ConfigError when a filter names a host
// or slot that is not in the list, or when no host is left.
std::vector<HostSpec> resolve_host_list(const std::vector<HostLine>& lines, int default_slots,
                                        std::string_view include, const std::string& include_label,
                                        std::string_view exclude, const std::string& exclude_label);

// A host as written in a list: "[v6]" loses its brackets (ssh takes the
// bare address); anything else is unchanged.
std::string host_name(std::string_view text);

// Checks a host name as ssh will get it: not empty, no spaces, not starting
// with '-' (ssh would read an option). Returns the reason, or "".
std::string bad_host_name(std::string_view name);

}  // namespace ccrun::launcher
