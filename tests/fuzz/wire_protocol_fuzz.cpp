// libFuzzer target for the store's request parser: any bytes, as one
// connection's stream, must parse into requests, ask for more bytes, or be
// rejected with a message; never read out of bounds, loop, or allocate what
// a length merely claims.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "wire_protocol.h"

using namespace ccrun::rendezvous::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view stream(reinterpret_cast<const char*>(data), size);
  Limits limits;
  limits.max_key_bytes = 1024;
  limits.max_value_bytes = 64 * 1024;
  limits.max_keys_per_request = 256;
  Dialect dialect = detect_dialect(stream);
  if (dialect == Dialect::kUnknown) return 0;
  Request req;
  size_t pos = 0;
  while (pos < stream.size()) {
    ParseResult r = parse_request(stream.substr(pos), dialect, limits, req);
    if (r.status != ParseStatus::kComplete) {
      if (r.status == ParseStatus::kNeedMore && r.needed <= stream.size() - pos) __builtin_trap();
      if (r.status == ParseStatus::kError && r.error.empty()) __builtin_trap();
      break;
    }
    if (r.consumed == 0 || r.consumed > stream.size() - pos) __builtin_trap();
    for (const auto& k : req.keys) {
      if (k.size() > limits.max_key_bytes) __builtin_trap();
    }
    pos += r.consumed;
  }
  return 0;
}
