//===- settings.h - The launcher's settings and their raw values -*- C++ -*-===//
//
// Every setting ccrun takes has one entry in `kSettings`: its YAML key, its
// flags (both spellings), its help line, and how its value reads from a
// JobSpec. That reading gives its default (from a default JobSpec, so each
// default is written once, in ccrun/job_spec.h), its --print-config value
// and the flag the ssh fan-out gives every host's agent: adding a setting is
// one entry here plus its JobSpec field and resolver. A setting's value
// is first kept as text with its source (`Raw`), so that every error names
// the flag, PET_ variable or YAML line it came from; the typed conversions
// here throw ConfigError with that label:
//
//   Raw r{"70000", "--master-port", false};
//   to_int(r, 1, 65535, "a TCP port");  // --master-port "70000": must be ...
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ccrun/job_spec.h"

namespace ccrun::launcher {

// One setting, as given: its text and where it came from.
struct Raw {
  std::string value;
  std::string where;  // "--nnodes", "PET_NNODES" or "job.yaml:7: nnodes"
  bool yaml = false;
  // `--nnodes "3:2"` or `job.yaml:7: nnodes: "3:2"`.
  std::string label() const;
};

// How --print-config writes a setting (print_config.cpp).
enum class YamlForm {
  kScalar,  // key: text (double-quoted when it holds ':', e.g. MIN:MAX)
  kQuoted,  // key: "text"
  kList,    // key: [a, b]: the text split at commas
  kIfSet,   // kScalar, left out when the text is empty
  kRdzv,    // under rdzv: as the key without its rdzv_ prefix
  kNone,    // not written, or written with the host list
};

// Every setting: its key (YAML name), its flags, and its value in a JobSpec.
struct Setting {
  const char* key;
  const char* flags;       // CLI11 names
  const char* value_name;  // the word --help shows for its value ("N", "SECONDS",
                           // "HOST[:PORT]"); "" for a switch
  const char* help;
  const char* group;
  // The setting's value in `spec` as its flag takes it (a default JobSpec
  // gives its default); nullptr = a switch (default false).
  std::string (*text)(const JobSpec& spec);
  YamlForm yaml = YamlForm::kScalar;
  // Whether the ssh fan-out gives it to every host's agent (when its text
  // is not empty; a switch, when `on`).
  bool forwarded = false;
  // A switch's value in `spec` (--print-config, the fan-out); nullptr for
  // options and for --standalone, which print_config reads itself.
  bool (*on)(const JobSpec& spec) = nullptr;
  // The words it takes, when it takes one of a few (bash completion lists
  // them: completion.h); empty for a free value.
  std::span<const std::string_view> choices = {};
  // Variables that give it after PET_<KEY>, in order (torch's own names for
  // it, e.g. PET_SHUTDOWN_TIMEOUT and TORCH_ELASTIC_SHUTDOWN_TIMEOUT for
  // stop_grace); empty: none.
  std::span<const char* const> more_env = {};
};

// The fixed words of settings that take one of a few (their resolvers check
// them): --nproc-per-node's keywords (or a number), --start-method's values.
inline constexpr std::string_view kNprocKeywords[] = {"auto", "cpu", "gpu"};
inline constexpr std::string_view kStartMethods[] = {"spawn", "fork", "forkserver"};
// torch 2.x's variables for --shutdown-timeout, ccrun's --stop-grace.
inline constexpr const char* kShutdownTimeoutEnv[] = {"PET_SHUTDOWN_TIMEOUT",
                                                      "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"};
// torch 2.x's variable for --log-line-prefix-template.
inline constexpr const char* kLinePrefixEnv[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"};

// The table of settings, in --help order.
std::span<const Setting> settings();
// The setting's default: its text in a default JobSpec ("false" for a
// switch).
std::string default_text(const Setting& s);
// The word --help shows for the setting's value: its value_name, "VALUE"
// when it has none.
std::string_view value_name(const Setting& s);
// The setting named `key`, or nullptr.
const Setting* find_setting(const std::string& key);
// PET_<KEY>: the variable that may give a setting.
std::string pet_name(const std::string& key);
// The value of setting `s` given by its PET_ variable's text `value`: as written, except that a
// switch's variable set but empty is on. Kubeflow's training operator writes PET_STANDALONE=""
// for a PyTorchJob's elasticPolicy.standalone: true (torchrun fails on it, int("")); "0",
// "false", ... still turn a switch off.
std::string pet_value(const Setting& s, const std::string& value);
// The setting's first long flag ("--nproc-per-node").
std::string first_flag(const Setting& s);
// "; did you mean \"x\"?" for the nearest of `known`, or "" when none is near.
std::string closest(const std::string& key, const std::vector<std::string>& known);
// The same for an unknown flag `arg` among `flags` (every long spelling):
// its "=value" is left out and '_' and '-' count as one, so
// "--nproc_per_nodes=2" is near "--nproc-per-node"; of spellings equally
// near, the one in the user's style ('_' or '-') is named.
std::string closest_flag(const std::string& arg, const std::vector<std::string>& flags);
// The setting's long flags, every spelling ("--nproc-per-node", "--nproc_per_node").
std::vector<std::string> long_flags(const Setting& s);

// Throws ConfigError "<label>: <why>".
[[noreturn]] void fail(const Raw& r, const std::string& why);
// An integer in [lo, hi]; `what` names the expected form in the error.
int64_t to_int(const Raw& r, int64_t lo, int64_t hi, const char* what);
// Seconds (fractions allowed) as milliseconds.
std::chrono::milliseconds to_seconds(const Raw& r);
// 1/true/yes/on or 0/false/no/off/"".
bool to_bool(const Raw& r);
// "3" or "0:1,1:2" -> (default, per local rank) for --redirects and --tee.
void parse_std_streams(const Raw& r, int& def, std::map<int, int>& per_rank);

// The text parse_std_streams reads back: "3" or "0:1,1:2".
std::string std_streams_text(int def, const std::map<int, int>& per_rank);
// `items` joined with `sep`.
std::string join(const std::vector<std::string>& items, const char* sep);
// Seconds in the shortest form that reads back the same ("0.1", "30").
std::string seconds_text(std::chrono::milliseconds ms);
// torch's comma-separated list ("a,b"; ",," is a comma inside an item), and
// back: --duplicate-stdout-filters and --duplicate-stderr-filters.
std::vector<std::string> split_escaped_commas(const std::string& text);
std::string join_escaped_commas(const std::vector<std::string>& items);

}  // namespace ccrun::launcher
