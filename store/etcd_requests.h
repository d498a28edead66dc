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
  // Its counter journal (below), when it was read: the live entries
  // (created at or after mod_revision) and their sum.
  size_t live = 0;
  int64_t live_sum = 0;        // the live entries' deltas, added up
  bool not_counter = false;    // the value plus live_sum is no int64 counter
};
KeyState key_state(const json& range_reply);

// Counters (add) without a compare-and-swap chain: add(key, d) is one
// transaction that puts a new entry "d" under the key's journal (a unique
// key per add) and creates the key at "0" when it is missing; the
// counter's value is the key's value plus the deltas of the journal
// entries created at or after the key's mod_revision, and the value an add
// returns is the one at its own revision (the transaction's reads see its
// puts). Every add commits at once, in parallel with the others: etcd gives
// each its own revision, so contenders never retry. A put of the key
// (set, compare_set, append) starts it over: older entries stop counting.
// Journals live under "<prefix>\0ccrun-add/<key length>:<key>/", apart from
// every user key; num_keys() does not count them.
std::string journal_prefix(const std::string& prefix, const std::string& key);
// A range of every entry of journal `jp` (as of `revision` when > 0).
json journal_range_op(const std::string& jp, int64_t revision);
// Folds the journal of a range reply into `s`: s.value becomes the counter's
// value when live entries exist (left as it is, with not_counter set, when
// the key's own value is not a counter or the sum overflows: add reports it).
void apply_journal(KeyState& s, const json& journal_range_reply);
// Each time a journal reaches a multiple of this many live entries, the add
// that brought it there folds them into the key's value: guarded_txn with
// the value (one more transaction; skipped when it loses a race).
inline constexpr size_t kJournalFold = 32;

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

// The key (full name) and its journal `jp` at one revision, returned in
// `revision`.
KeyState read_with_journal(EtcdConnection& c, const std::string& key, const std::string& jp,
                           int64_t& revision);

// append and compare_set: read the key with its journal (at `revision`),
// then this transaction, which applies the put `success` only if neither
// changed since (same mod_revision, 0 for a missing key; no journal entry
// newer than `revision`), and empties the journal (the put starts the
// counter over); on a conflict the failure branch's read (failure_state,
// which sets `revision`) is the new starting point.
json guarded_txn(const std::string& key, const std::string& jp, int64_t mod_revision,
                 int64_t revision, json success);
KeyState failure_state(const json& reply, int64_t& revision);

// After a lost race on a key, waits a random time below `rtt`, the round
// trip of the lost transaction, so that the losers of one commit do not all
// arrive together at the next. (Longer, exponential pauses measured no
// faster: N contended adds are a chain of N commits either way, see
// docs/store.md.)
void conflict_backoff(EtcdConnection& c, Clock::duration rtt);

}  // namespace ccrun::store::etcd
