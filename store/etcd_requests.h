//===- etcd_requests.h - etcd v3 requests EtcdStore is made of ---*- C++ -*-===//
//
// JSON builders of the gateway's requests (put, range, guarded txn), and
// the patterns EtcdStore builds on them: a transaction applied exactly once
// (txn_once), the state of many keys at one revision (read_keys), and the
// pause after a lost compare-and-swap race (conflict_backoff).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "etcd_connection.h"

namespace ccrun::store::etcd {

// Operations per transaction: below etcd's --max-txn-ops default (128),
// leaving room for the sequence-number put.
inline constexpr size_t kMaxTxnOps = 100;

// The smallest key after every key that starts with `p` (etcd's range_end
// for a prefix).
std::string prefix_end(std::string p);

json put_op(const std::string& key, const std::string& value);
// A range of one key; `revision` > 0 reads the key as it was then.
json range_op(const std::string& key, bool count_only, int64_t revision);

// One key as a range reply shows it.
struct KeyState {
  bool exists = false;
  std::string value;
  int64_t mod_revision = 0;
};
KeyState key_state(const json& range_reply);

// Runs a transaction whose success branch changes data exactly once: that
// branch also stores the connection's next sequence number under `marker`,
// read back after an ambiguous failure to learn whether the transaction was
// applied (the failure branches only read, so sending them again is
// harmless).
json txn_once(EtcdConnection& c, const std::string& marker, uint64_t& seq_counter, json txn);

// The state of `keys` (under `prefix`) at one revision: `revision` when it
// is given (> 0), else the latest, returned in `revision`. One transaction
// of reads, or several pinned to one revision. Values only when `values`,
// else existence.
std::vector<KeyState> read_keys(EtcdConnection& c, const std::string& prefix,
                                const std::vector<std::string>& keys, bool values,
                                int64_t& revision);

// add, append and compare_set: read the key, then this transaction, which
// applies `success` only if the key is unchanged since (same mod_revision,
// 0 for a missing key); on a conflict the failure branch's read
// (failure_state) is the new starting point.
json guarded_txn(const std::string& key, int64_t mod_revision, json success);
KeyState failure_state(const json& reply);

// After a lost race on a key, waits a random time below `rtt`, the round
// trip of the lost transaction, so that the losers of one commit do not all
// arrive together at the next. (Longer, exponential pauses measured no
// faster: N contended adds are a chain of N commits either way, see
// docs/store.md.)
void conflict_backoff(EtcdConnection& c, Clock::duration rtt);

}  // namespace ccrun::store::etcd
