//===- ccrun/endpoint.h - host:port, parsed in one place --------*- C++ -*-===//
//
// Every address ccrun takes as one piece of text (`--rdzv-endpoint`,
// `tcp://` init methods, host lists) is parsed here, so that every
// component accepts the same forms and rejects the same mistakes:
//
//   host            10.0.0.1, node7        default port
//   host:port       10.0.0.1:29400
//   [v6]            [fe80::1]              default port
//   [v6]:port       [::1]:29400
//   v6              ::1, fe80::1           default port (a bare IPv6
//                                          address cannot carry a port)
//
//   Endpoint ep = parse_endpoint("[::1]:29400", 29400);
//   // ep.host == "::1" (no brackets), ep.port == 29400
//   std::string text = ep.to_string();                  // "[::1]:29400"
//   std::string v4 = format_host_port("10.0.0.1", 80);  // "10.0.0.1:80"
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ccrun::store {

struct Endpoint {
  std::string host;   // a name or an address, IPv6 without brackets
  uint16_t port = 0;  // 0 = any free port, where the caller allows it

  // "host:port", or "[v6]:port" when the host holds a ':' (format_host_port).
  std::string to_string() const;
};

// How ccrun prints every address: "host:port", or "[v6]:port" when the host
// holds a ':', so that what it prints parse_endpoint reads back. For hosts
// and ports kept apart (options, sockets), where no Endpoint is at hand.
[[nodiscard]] std::string format_host_port(std::string_view host, uint16_t port);

// Parses `text` in one of the forms above; `default_port` is the port when
// the text gives none. Throws ccrun::ConfigError naming the text and the
// fix when the text starts with a URL scheme ("http://"), the host is empty,
// a bracket is unbalanced, text with two or more ':' and no brackets is not
// an IPv6 address ("h:1:2"), or the port is empty, not a number, or above
// 65535.
[[nodiscard]] Endpoint parse_endpoint(std::string_view text, uint16_t default_port);

// The same, but the text must give the port (`host:port`, `[v6]:port`).
[[nodiscard]] Endpoint parse_endpoint(std::string_view text);

// A port alone ("29400", e.g. MASTER_PORT): 0 to 65535. Throws
// ccrun::ConfigError saying what is wrong with it (the caller names where it
// came from).
[[nodiscard]] uint16_t parse_port(std::string_view port);

}  // namespace ccrun::store
