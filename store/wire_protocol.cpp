// Parsing of TCPStore requests (both dialects) and encoding of replies.
// See wire_protocol.h for the framing; the parser is incremental: it says
// how many bytes it needs and never trusts a length before checking it
// against the limits.
#include "wire_protocol.h"

#include <cstring>

namespace ccrun::store::wire {
namespace {

std::string human_bytes(uint64_t n) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  if (n >= kGiB) return std::to_string(n / kGiB) + " GiB";
  if (n >= kMiB) return std::to_string(n / kMiB) + " MiB";
  if (n >= kKiB) return std::to_string(n / kKiB) + " KiB";
  return std::to_string(n) + " bytes";
}

// Reads fields from the front of a request. Every read either succeeds or
// records why it could not (more bytes needed, or a bound exceeded).
class Reader {
 public:
  Reader(std::string_view data, const Limits& limits, size_t pos = 0)
      : data_(data), limits_(limits), pos_(pos) {}

  size_t pos() const { return pos_; }
  bool needs_more() const { return error_.empty() && needed_ > 0; }

  template <typename T>
  bool fixed(T& v) {
    if (!have(sizeof(T))) return false;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));  // little-endian host
    pos_ += sizeof(T);
    return true;
  }

  // A uint64 length then that many bytes, at most `limit`.
  bool string(std::string& out, uint64_t limit, const char* what) {
    uint64_t len = 0;
    if (!fixed(len)) return false;
    if (len > limit) {
      error_ = std::string(what) + " of " + human_bytes(len) + ", limit " +
               human_bytes(limit);
      return false;
    }
    if (!have(len)) return false;
    out.assign(data_.data() + pos_, len);
    pos_ += len;
    return true;
  }

  bool key(std::string& out) {
    return string(out, limits_.max_key_bytes, "key");
  }
  bool value(std::string& out) {
    return string(out, limits_.max_value_bytes, "value");
  }

  // A count of keys, at most max_keys_per_request.
  bool count(uint64_t& n) {
    if (!fixed(n)) return false;
    if (n > limits_.max_keys_per_request) {
      error_ = "request for " + std::to_string(n) + " keys, limit " +
               std::to_string(limits_.max_keys_per_request);
      return false;
    }
    return true;
  }

  ParseResult result() const {
    ParseResult r;
    if (!error_.empty()) {
      r.status = ParseStatus::kError;
      r.error = error_;
    } else if (needed_ > 0) {
      r.status = ParseStatus::kNeedMore;
      r.needed = needed_;
    } else {
      r.status = ParseStatus::kComplete;
      r.consumed = pos_;
    }
    return r;
  }

  void fail(std::string why) { error_ = std::move(why); }

 private:
  bool have(uint64_t n) {
    if (data_.size() - pos_ >= n) return true;
    needed_ = pos_ + n;
    return false;
  }

  std::string_view data_;
  const Limits& limits_;
  size_t pos_ = 0;
  size_t needed_ = 0;
  std::string error_;
};

// Parses the items of a list request (keys, or key-value pairs for
// MULTI_SET) from item out.keys.size() on. When the bytes end inside an
// item, that item is dropped and the cursor (if any) remembers where it
// began, so the next call resumes there.
bool list_items(Reader& r, Request& out, uint64_t n, ParseCursor* cursor) {
  const bool pairs = out.type == Query::kMultiSet;
  for (uint64_t i = out.keys.size(); i < n; ++i) {
    size_t item_start = r.pos();
    if (!r.key(out.keys.emplace_back()) ||
        (pairs && !r.value(out.values.emplace_back()))) {
      out.keys.resize(i);
      if (pairs) out.values.resize(i);
      if (cursor && r.needs_more()) {
        cursor->in_list = true;
        cursor->pos = item_start;
        cursor->count = n;
      }
      return false;
    }
  }
  return true;
}

bool parse_args(Reader& r, Request& out, ParseCursor* cursor) {
  switch (out.type) {
    case Query::kValidate:
    case Query::kPing:
      return r.fixed(out.u32);
    case Query::kSet:
    case Query::kAppend:
    case Query::kQueuePush:
      return r.key(out.keys.emplace_back()) &&
             r.value(out.values.emplace_back());
    case Query::kCompareSet:
      return r.key(out.keys.emplace_back()) &&
             r.value(out.values.emplace_back()) &&
             r.value(out.values.emplace_back());
    case Query::kGet:
    case Query::kDeleteKey:
    case Query::kAuthenticate:
    case Query::kQueuePop:
    case Query::kQueueLen:
      return r.key(out.keys.emplace_back());
    case Query::kAdd:
      return r.key(out.keys.emplace_back()) && r.fixed(out.delta);
    case Query::kDeletePrefix:
      return r.key(out.keys.emplace_back()) && r.key(out.keys.emplace_back());
    case Query::kCheck:
    case Query::kWait:
    case Query::kMultiGet:
    case Query::kMultiSet: {
      uint64_t n = 0;
      return r.count(n) && list_items(r, out, n, cursor);
    }
    case Query::kGetNumKeys:
    case Query::kCancelWait:
    case Query::kList:
    case Query::kTime:
      return true;
  }
  return false;
}

// Maps a 1.13 query type onto the 2.x one; false when there is none.
bool from_legacy(uint8_t type, Request& out) {
  switch (static_cast<LegacyQuery>(type)) {
    case LegacyQuery::kSet: out.type = Query::kSet; return true;
    case LegacyQuery::kCompareSet: out.type = Query::kCompareSet; return true;
    case LegacyQuery::kGet: out.type = Query::kGet; return true;
    case LegacyQuery::kAdd: out.type = Query::kAdd; return true;
    case LegacyQuery::kCheck: out.type = Query::kCheck; return true;
    case LegacyQuery::kWait: out.type = Query::kWait; return true;
    case LegacyQuery::kGetNumKeys: out.type = Query::kGetNumKeys; return true;
    case LegacyQuery::kWatchKey:
      out.type = Query::kGet;  // same argument: one key
      out.legacy_watch = true;
      return true;
    case LegacyQuery::kDeleteKey: out.type = Query::kDeleteKey; return true;
  }
  return false;
}

bool is_known(uint8_t type) {
  return type <= static_cast<uint8_t>(Query::kList) ||
         type == static_cast<uint8_t>(Query::kAuthenticate) ||
         type == static_cast<uint8_t>(Query::kDeletePrefix) ||
         type == static_cast<uint8_t>(Query::kTime);
}

}  // namespace

Dialect detect_dialect(std::string_view first) {
  if (first.empty()) return Dialect::kUnknown;
  if (first[0] != 0) return Dialect::kTorch113;
  if (first.size() < 5) return Dialect::kUnknown;
  uint32_t magic;
  std::memcpy(&magic, first.data() + 1, sizeof magic);
  // A 1.13 SET starts with type 0 too, but its key length would then begin
  // with the magic's bytes: about 1 GiB, far over any key limit.
  return magic == kValidationMagic ? Dialect::kTorch2 : Dialect::kTorch113;
}

ParseResult parse_request(std::string_view data, Dialect dialect,
                          const Limits& limits, Request& out,
                          ParseCursor* cursor) {
  if (cursor && cursor->in_list) {
    // The type, the count and the items before cursor->pos are in `out`.
    Reader r(data, limits, cursor->pos);
    list_items(r, out, cursor->count, cursor);
    ParseResult result = r.result();
    if (result.status != ParseStatus::kNeedMore) cursor->reset();
    return result;
  }
  out.clear();
  Reader r(data, limits);
  uint8_t type = 0;
  if (!r.fixed(type)) return r.result();
  if (dialect == Dialect::kTorch113) {
    if (!from_legacy(type, out)) {
      r.fail("unknown query type " + std::to_string(type) +
             " (torch 1.13 dialect)");
      return r.result();
    }
  } else {
    if (!is_known(type)) {
      r.fail("unknown query type " + std::to_string(type) +
             " (torch 2.x dialect)");
      return r.result();
    }
    out.type = static_cast<Query>(type);
  }
  parse_args(r, out, cursor);
  ParseResult result = r.result();
  if (cursor && result.status != ParseStatus::kNeedMore) cursor->reset();
  return result;
}

void append_u8(std::string& out, uint8_t v) { out.push_back(char(v)); }

void append_u32(std::string& out, uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void append_i64(std::string& out, int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void append_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void append_bytes(std::string& out, std::string_view bytes) {
  append_u64(out, bytes.size());
  out.append(bytes);
}

std::string query_name(Query q) {
  switch (q) {
    case Query::kValidate: return "VALIDATE";
    case Query::kSet: return "SET";
    case Query::kCompareSet: return "COMPARE_SET";
    case Query::kGet: return "GET";
    case Query::kAdd: return "ADD";
    case Query::kCheck: return "CHECK";
    case Query::kWait: return "WAIT";
    case Query::kGetNumKeys: return "GETNUMKEYS";
    case Query::kDeleteKey: return "DELETE_KEY";
    case Query::kAppend: return "APPEND";
    case Query::kMultiGet: return "MULTI_GET";
    case Query::kMultiSet: return "MULTI_SET";
    case Query::kCancelWait: return "CANCEL_WAIT";
    case Query::kPing: return "PING";
    case Query::kQueuePush: return "QUEUE_PUSH";
    case Query::kQueuePop: return "QUEUE_POP";
    case Query::kQueueLen: return "QUEUE_LEN";
    case Query::kList: return "LIST";
    case Query::kAuthenticate: return "AUTHENTICATE";
    case Query::kDeletePrefix: return "DELETE_PREFIX";
    case Query::kTime: return "TIME";
  }
  return "query " + std::to_string(static_cast<int>(q));
}

}  // namespace ccrun::store::wire
