//===- rdzv_conf.h - The --rdzv-conf key=value settings ----------*- C++ -*-===//
//
// One parser for --rdzv-conf (and the job file's rdzv: conf:), used by the
// launcher's resolution and by `ccrun status`. It takes what torchrun takes:
// `k=v,k2=v2`, spaces around keys and values, and quotes around a value or
// around the whole text (`--rdzv_conf='join_timeout=5,timeout=5'` as
// torchrun's tests pass it, with no shell to remove them). Every key one of
// torch's rendezvous backends reads is accepted; the table in rdzv_conf.cpp
// says what ccrun does with each (docs/cli.md has the same table). A key no
// backend knows is ignored with a warning naming it and the known keys:
//
//   auto pairs = split_rdzv_conf(Raw{"timeout=5,'x=1'", "--rdzv-conf", false});
//   RendezvousSpec rdzv;
//   for (auto& w : apply_rdzv_conf(pairs, rdzv)) warn(w);  // "... \"x\" ..."
//   rdzv.join_timeout;  // 5 s (torchrun's `timeout`)
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "ccrun/job_spec.h"
#include "settings.h"

namespace ccrun::launcher {

// One key a torch rendezvous backend reads, and what ccrun does with it.
struct RdzvConfKey {
  const char* name;
  const char* torch;  // who reads it in torch ("dynamic", "c10d", "etcd-v2", ...)
  // Sets the spec's field from the value (throws ConfigError naming it);
  // nullptr: kept as given in rdzv.conf for the store (etcd_*, protocol).
  void (*apply)(const Raw& value, RendezvousSpec& rdzv);
  // The value in the spec for --print-config; nullptr: not printed from a
  // field (a pass-through key is printed from rdzv.conf as given).
  std::string (*text)(const RendezvousSpec& rdzv);
  // The ccrun key it stands for (torch's etcd-v2 ssl_cert is etcd_cert),
  // or nullptr; `ignored` keys are accepted and dropped.
  const char* alias_of = nullptr;
  bool ignored = false;
};

// Every key, typed ones first in --print-config order.
std::span<const RdzvConfKey> rdzv_conf_keys();
// The key named `name`, or nullptr.
const RdzvConfKey* find_rdzv_conf_key(const std::string& name);

// Splits `text` into its pairs, each labelled "<text.where> <key>"; keys
// and values trimmed, one pair of surrounding quotes removed from the text
// and from each value. Throws ConfigError for an item without '=' or a key
// given twice.
std::map<std::string, Raw> split_rdzv_conf(const Raw& text);

// Applies `pairs` to `rdzv` (its typed fields and rdzv.conf, under ccrun's
// names). Returns one warning per key nobody knows (those are ignored).
// Throws ConfigError for a bad value.
[[nodiscard]] std::vector<std::string> apply_rdzv_conf(const std::map<std::string, Raw>& pairs,
                                                       RendezvousSpec& rdzv);

}  // namespace ccrun::launcher
