//===- wire_protocol.h - PyTorch's TCPStore protocol, both dialects -*- C++ -*-//
//
// The constants of the TCPStore wire protocol that StoreServer serves and
// TcpStore speaks (see ../shared/protocol/TCPSTORE.md for what is known of
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

namespace ccrun::rendezvous::wire {

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
  // ccrun's extensions (2.x dialect only). torch clients never send these.
  kAuthenticate = 0xC0,  // string token -> 1 byte AuthResponse
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

}  // namespace ccrun::rendezvous::wire
