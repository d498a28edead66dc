//===- wire_protocol.h - PyTorch's TCPStore protocol, both dialects -*- C++ -*-//
//
// The constants of the TCPStore wire protocol that StoreServer serves and
// TcpStore speaks (see docs/tcpstore_protocol.md for what is known of
// it). A request is one query-type byte followed by its arguments; strings
// and byte strings are a uint64 little-endian length then the bytes;
// integers are raw little-endian. There is no frame length: a reader parses
// arguments as they arrive.
//
// Two dialects, chosen per connection from its first bytes:
//   - torch 2.x: the first request is VALIDATE + uint32 magic.
//   - torch 1.13 (Debian's python3-torch): no VALIDATE; older type numbers.
// ccrun's own extensions take type numbers neither dialect uses and are
// accepted on the 2.x dialect only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace ccrun::store::wire {

// The uint32 that follows a VALIDATE query.
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// Query types of the torch 2.x dialect (TCPStoreBackend.hpp).
enum class Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  // Queues (torch >= 2.6, libuv server): a FIFO of byte strings per key,
  // apart from the keys' values. WAIT and CHECK see a key with a non-empty
  // queue as present; a blocking pop is WAIT then QUEUE_POP.
  kQueuePush = 14,  // key, bytes -> no reply; wakes one waiter of the key
  kQueuePop = 15,   // key -> int64 length before the pop, then the bytes
                    //        popped when that length was > 0
  kQueueLen = 16,   // key -> int64 length
  // torch >= 2.10's TCPStore.list_keys (LIST): no argument -> int64 count,
  // then each key that has a value as a string (uint64 length, bytes).
  kList = 17,
  // ccrun's extensions (2.x dialect only). torch clients never send these.
  kAuthenticate = 0xC0,  // string token -> 1 byte AuthResponse
  // string prefix, string guard key -> int64: the keys deleted, or -1 (and
  // nothing deleted) when the guard key does not exist. The guard must
  // begin with the prefix: a job's "done" marker guards the job's keys.
  kDeletePrefix = 0xC1,
  // no argument -> int64: the server host's wall clock, microseconds since
  // the Unix epoch (a node's clock skew against the store's host, read by
  // the health gate).
  kTime = 0xC2,
};

// Query types of the torch 1.13 dialect (verified by capture).
enum class LegacyQuery : uint8_t {
  kSet = 0,
  kCompareSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kGetNumKeys = 6,
  kWatchKey = 7,
  kDeleteKey = 8,
};

// The one-byte answer to CHECK.
enum class CheckResponse : uint8_t { kReady = 0, kNotReady = 1 };

// The one-byte answers to WAIT (STOP_WAITING) and CANCEL_WAIT.
enum class WaitResponse : uint8_t { kStopWaiting = 0, kWaitCanceled = 1 };

// The one-byte answer to AUTHENTICATE.
enum class AuthResponse : uint8_t { kAccepted = 0, kDenied = 1 };

}  // namespace ccrun::store::wire

//===----------------------------------------------------------------------===//
// Parsing requests and encoding replies.
//===----------------------------------------------------------------------===//

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ccrun::store::wire {

// Which protocol a connection speaks; fixed by its first bytes.
enum class Dialect : uint8_t {
  kUnknown,   // not enough bytes seen yet
  kTorch2,    // began with VALIDATE + magic
  kTorch113,  // anything else
};

// Bounds on what one request may carry. A request over a bound ends its
// connection; it never makes the server allocate the stated size.
struct Limits {
  uint64_t max_key_bytes = 64 * 1024;
  uint64_t max_value_bytes = 256ull * 1024 * 1024;
  uint64_t max_keys_per_request = 128 * 1024;  // torch 2.x's own limit
};

// One request, in the 2.x dialect's terms whatever the connection speaks.
// Reused across requests by a session: clear() keeps the capacity.
struct Request {
  Query type = Query::kPing;
  std::vector<std::string> keys;    // every key argument, in order
  std::vector<std::string> values;  // SET/APPEND/MULTI_SET values, or
                                    // COMPARE_SET's expected then desired
  int64_t delta = 0;                // ADD
  uint32_t u32 = 0;                 // VALIDATE magic, PING nonce
  bool legacy_watch = false;        // a 1.13 WATCH_KEY (unsupported)

  void clear() {
    keys.clear();
    values.clear();
    delta = 0;
    u32 = 0;
    legacy_watch = false;
  }
};

enum class ParseStatus {
  kComplete,  // `out` holds a request of `consumed` bytes
  kNeedMore,  // the request is incomplete: at least `needed` bytes in all
  kError,     // the bytes break the protocol: `error` says how
};

// Where an incomplete request with a list of keys (CHECK, WAIT, MULTI_GET,
// MULTI_SET) stopped, so that the next parse of the same bytes (with more
// appended) resumes there instead of parsing every key again: a request of
// n keys arriving in pieces then costs O(n), not O(n^2). Owned by the
// caller, one per connection; reset() after a request completes or fails.
struct ParseCursor {
  bool in_list = false;  // `out` holds the type and the items before `pos`
  size_t pos = 0;        // offset of the first item not yet parsed
  uint64_t count = 0;    // items the request announced

  void reset() { *this = ParseCursor{}; }
};

struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  size_t consumed = 0;  // kComplete: bytes of the request
  size_t needed = 0;    // kNeedMore: total bytes needed (a lower bound)
  std::string error;    // kError: a sentence naming the bound or the byte
};

// Decides the dialect from a connection's first bytes. Returns kUnknown while
// fewer than 5 bytes are known and the first byte alone cannot tell.
Dialect detect_dialect(std::string_view first_bytes);

// Parses one request from the start of `data`. Never reads past `data`,
// never allocates more than the bytes present justify. With a cursor, an
// incomplete list request keeps its parsed items in `out` and its position
// in `cursor`, and the next call (same `data` start, more bytes) resumes.
ParseResult parse_request(std::string_view data, Dialect dialect,
                          const Limits& limits, Request& out,
                          ParseCursor* cursor = nullptr);

// Reply encoding: integers little-endian, strings uint64 length + bytes.
void append_u8(std::string& out, uint8_t v);
void append_u32(std::string& out, uint32_t v);
void append_i64(std::string& out, int64_t v);
void append_u64(std::string& out, uint64_t v);
void append_bytes(std::string& out, std::string_view bytes);

// Human name of a query type for log lines ("SET", "0x7f").
std::string query_name(Query q);

}  // namespace ccrun::store::wire
