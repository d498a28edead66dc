//===- settings.h - The launcher's settings and their raw values -*- C++ -*-===//
//
// Every setting ccrun takes has one entry in `kSettings`: its YAML key, its
// flags (both spellings), its help line and its default. A setting's value
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
#include <vector>

namespace ccrun::launcher {

// One setting, as given: its text and where it came from.
struct Raw {
  std::string value;
  std::string where;  // "--nnodes", "PET_NNODES" or "job.yaml:7: nnodes"
  bool yaml = false;
  // `--nnodes "3:2"` or `job.yaml:7: nnodes: "3:2"`.
  std::string label() const;
};

// Every setting: its key (YAML name), its flags, and its default.
struct Setting {
  const char* key;
  const char* flags;  // CLI11 names
  const char* help;
  const char* def;    // nullptr = a flag (switch)
  const char* group;
};

// The table of settings, in --help order.
std::span<const Setting> settings();
// The setting named `key`, or nullptr.
const Setting* find_setting(const std::string& key);
// PET_<KEY>: the variable that may give a setting.
std::string pet_name(const std::string& key);
// The setting's first long flag ("--nproc-per-node").
std::string first_flag(const Setting& s);
// "; did you mean \"x\"?" for the nearest of `known`, or "" when none is near.
std::string closest(const std::string& key, const std::vector<std::string>& known);

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
// Seconds in the shortest form that reads back the same ("0.1", "30").
std::string seconds_text(std::chrono::milliseconds ms);

}  // namespace ccrun::launcher
