// libFuzzer target for the store's request parser: any bytes, as one
// connection's stream, must parse into requests, ask for more bytes, or be
// rejected with a message; never read out of bounds, loop, or allocate what
// a length merely claims. The same stream fed in pieces (as reads deliver
// it, with a ParseCursor resuming list requests) must parse the same.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <string_view>
#include <vector>

#include "wire_protocol.h"

using namespace ccrun::store::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view stream(reinterpret_cast<const char*>(data), size);
  Limits limits;
  limits.max_key_bytes = 1024;
  limits.max_value_bytes = 64 * 1024;
  limits.max_keys_per_request = 256;
  Dialect dialect = detect_dialect(stream);
  if (dialect == Dialect::kUnknown) return 0;
  Request req;
  std::vector<Request> whole;  // the requests parsed from the whole stream
  ParseStatus end = ParseStatus::kNeedMore;
  size_t pos = 0;
  while (pos < stream.size()) {
    ParseResult r = parse_request(stream.substr(pos), dialect, limits, req);
    end = r.status;
    if (r.status != ParseStatus::kComplete) {
      if (r.status == ParseStatus::kNeedMore && r.needed <= stream.size() - pos) __builtin_trap();
      if (r.status == ParseStatus::kError && r.error.empty()) __builtin_trap();
      break;
    }
    if (r.consumed == 0 || r.consumed > stream.size() - pos) __builtin_trap();
    for (const auto& k : req.keys) {
      if (k.size() > limits.max_key_bytes) __builtin_trap();
    }
    whole.push_back(req);
    pos += r.consumed;
    end = ParseStatus::kNeedMore;
  }
  // Again in pieces of a size the input picks, resuming with a cursor.
  size_t step = 1 + (size ? data[size - 1] % 7 : 0);
  ParseCursor cursor;
  size_t start = 0, have = 0, n = 0;
  ParseStatus last = ParseStatus::kNeedMore;
  while (start < stream.size()) {
    have = std::min(stream.size(), have + step);
    ParseResult r = parse_request(stream.substr(start, have - start), dialect, limits, req,
                                  &cursor);
    last = r.status;
    if (r.status == ParseStatus::kError) break;
    if (r.status == ParseStatus::kNeedMore) {
      if (have == stream.size()) break;
      continue;
    }
    if (n >= whole.size() || req.type != whole[n].type || req.keys != whole[n].keys ||
        req.values != whole[n].values || req.delta != whole[n].delta) {
      __builtin_trap();
    }
    ++n;
    start += r.consumed;
    last = ParseStatus::kNeedMore;
  }
  if (n != whole.size() || (last == ParseStatus::kError) != (end == ParseStatus::kError)) {
    __builtin_trap();
  }
  return 0;
}
