// host:port parsing and printing (see include/ccrun/endpoint.h).
#include "ccrun/endpoint.h"

#include <arpa/inet.h>

#include <optional>

#include "ccrun/error.h"

namespace ccrun::store {
namespace {

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw ConfigError("endpoint \"" + std::string(text) + "\": " + why);
}

// Why `port` is not a port number (0-65535), or "" when it is one (then
// `value` holds it).
std::string port_error(std::string_view port, uint16_t& value) {
  uint32_t v = 0;
  for (char c : port) {
    if (c < '0' || c > '9') {
      return "the port \"" + std::string(port) + "\" is not a number; give a port from 0 to 65535";
    }
    v = v * 10 + uint32_t(c - '0');
    if (v > 65535) {
      return "the port \"" + std::string(port) + "\" is above 65535; give a port from 0 to 65535";
    }
  }
  value = uint16_t(v);
  return {};
}

uint16_t endpoint_port(std::string_view text, std::string_view port) {
  if (port.empty()) bad(text, "the port after ':' is empty; give host:port, e.g. 10.0.0.1:29400");
  uint16_t value = 0;
  if (std::string why = port_error(port, value); !why.empty()) bad(text, why);
  return value;
}

// Throws when `text` starts with a URL scheme ("http://h:p"): an endpoint
// is host:port alone.
void reject_scheme(std::string_view text) {
  auto sep = text.find("://");
  if (sep == std::string_view::npos) return;
  std::string rest(text.substr(sep + 3));
  bad(text, "\"" + std::string(text.substr(0, sep + 3)) + "\" is a URL scheme, which an endpoint "
            "does not take; drop it and give host:port" + (rest.empty() ? "" : ": " + rest));
}

// Throws unless `host` (two or more colons, no brackets) is an IPv6
// address, with an optional %zone: "h:1:2" is a mistake, not a host.
void check_bare_ipv6(std::string_view text, const std::string& host) {
  std::string address = host.substr(0, host.find('%'));
  in6_addr unused{};
  if (::inet_pton(AF_INET6, address.c_str(), &unused) == 1) return;
  bad(text, "more than one ':' and not an IPv6 address; give host:port, e.g. "
            "10.0.0.1:29400 (an IPv6 address as [::1]:29400)");
}

Endpoint parse(std::string_view text, std::optional<uint16_t> default_port) {
  if (text.empty()) bad(text, "empty; give host or host:port");
  reject_scheme(text);
  Endpoint ep;
  std::optional<std::string_view> port;
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) bad(text, "'[' without ']'; write an IPv6 address as [::1]:29400");
    ep.host = std::string(text.substr(1, close - 1));
    std::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        bad(text, "unexpected \"" + std::string(after) + "\" after ']'; write [v6]:port");
      }
      port = after.substr(1);
    }
    if (ep.host.find_first_of("[]") != std::string::npos) bad(text, "unbalanced brackets");
  } else if (text.find(']') != std::string_view::npos) {
    bad(text, "']' without '['; write an IPv6 address as [::1]:29400");
  } else if (auto colon = text.find(':'); colon == std::string_view::npos) {
    ep.host = std::string(text);
  } else if (text.find(':', colon + 1) == std::string_view::npos) {
    ep.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  } else {
    ep.host = std::string(text);  // a bare IPv6 address: no port
    check_bare_ipv6(text, ep.host);
  }
  if (ep.host.empty()) bad(text, "the host is empty; give host:port, e.g. 10.0.0.1:29400");
  if (port) {
    ep.port = endpoint_port(text, *port);
  } else if (default_port) {
    ep.port = *default_port;
  } else {
    bad(text, "no port; give host:port, e.g. 10.0.0.1:29400 (an IPv6 address as [::1]:29400)");
  }
  return ep;
}

}  // namespace

std::string format_host_port(std::string_view host, uint16_t port) {
  std::string h(host);
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return h + ":" + std::to_string(port);
}

std::string Endpoint::to_string() const { return format_host_port(host, port); }

Endpoint parse_endpoint(std::string_view text, uint16_t default_port) { return parse(text, default_port); }

Endpoint parse_endpoint(std::string_view text) { return parse(text, std::nullopt); }

uint16_t parse_port(std::string_view port) {
  if (port.empty()) throw ConfigError("the port is empty; give a port from 0 to 65535");
  uint16_t value = 0;
  if (std::string why = port_error(port, value); !why.empty()) throw ConfigError(why);
  return value;
}

}  // namespace ccrun::store
