// parse_endpoint: every accepted form, and every rejected one with its reason.
#include "ccrun/endpoint.h"

#include <catch2/catch.hpp>

#include "ccrun/error.h"

using ccrun::ConfigError;
using ccrun::store::Endpoint;
using ccrun::store::parse_endpoint;

namespace {
std::string error_of(std::string_view text, bool port_required = false) {
  try {
    if (port_required) {
      (void)parse_endpoint(text);
    } else {
      (void)parse_endpoint(text, 29400);
    }
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("endpoint: accepted forms", "[endpoint]") {
  auto check = [](std::string_view text, const char* host, uint16_t port) {
    Endpoint ep = parse_endpoint(text, 29400);
    CHECK(ep.host == host);
    CHECK(ep.port == port);
  };
  check("10.0.0.1", "10.0.0.1", 29400);
  check("node7", "node7", 29400);
  check("node7:1234", "node7", 1234);
  check("127.0.0.1:0", "127.0.0.1", 0);
  check("h:65535", "h", 65535);
  check("[::1]", "::1", 29400);
  check("[::1]:29500", "::1", 29500);
  check("[fe80::1%eth0]:7", "fe80::1%eth0", 7);
  check("::1", "::1", 29400);
  check("fe80::1:2", "fe80::1:2", 29400);
  check("fe80::1%eth0", "fe80::1%eth0", 29400);
  CHECK(parse_endpoint("h:5").to_string() == "h:5");
  CHECK(parse_endpoint("[::1]:5").to_string() == "[::1]:5");
}

TEST_CASE("endpoint: rejected forms name the text and the fix", "[endpoint]") {
  CHECK(error_of("127.0.0.1:abc") ==
        "endpoint \"127.0.0.1:abc\": the port \"abc\" is not a number; give a port from 0 to 65535");
  CHECK_THAT(error_of("127.0.0.1:99999"), Catch::Contains("\"99999\" is above 65535"));
  CHECK_THAT(error_of("127.0.0.1:4294967296"), Catch::Contains("above 65535"));
  CHECK_THAT(error_of("127.0.0.1:-1"), Catch::Contains("not a number"));
  CHECK_THAT(error_of("127.0.0.1: 80"), Catch::Contains("not a number"));
  CHECK_THAT(error_of("h:"), Catch::Contains("the port after ':' is empty"));
  CHECK_THAT(error_of(":29400"), Catch::Contains("the host is empty"));
  CHECK_THAT(error_of(""), Catch::Contains("empty"));
  CHECK_THAT(error_of("[::1"), Catch::Contains("'[' without ']'"));
  CHECK_THAT(error_of("::1]:80"), Catch::Contains("']' without '['"));
  CHECK_THAT(error_of("[::1]80"), Catch::Contains("after ']'"));
  CHECK_THAT(error_of("[]:80"), Catch::Contains("the host is empty"));
  CHECK_THAT(error_of("[::1]:"), Catch::Contains("empty"));
  CHECK_THAT(error_of("h", true), Catch::Contains("endpoint \"h\": no port"));
  CHECK_THAT(error_of("::1", true), Catch::Contains("no port"));
}

TEST_CASE("endpoint: two colons that are no IPv6 address, and a URL scheme", "[endpoint]") {
  CHECK_THAT(error_of("localhost:29400:1"),
             Catch::Contains("endpoint \"localhost:29400:1\": more than one ':' and not an IPv6 "
                             "address; give host:port"));
  CHECK_THAT(error_of("h:1:2%eth0"), Catch::Contains("not an IPv6 address"));
  CHECK(error_of("http://localhost:29400") ==
        "endpoint \"http://localhost:29400\": \"http://\" is a URL scheme, which an endpoint "
        "does not take; drop it and give host:port: localhost:29400");
  CHECK_THAT(error_of("tcp://[::1]:5"), Catch::Contains("\"tcp://\" is a URL scheme"));
}

TEST_CASE("parse_port: a port alone, as MASTER_PORT gives it", "[endpoint]") {
  CHECK(ccrun::store::parse_port("29400") == 29400);
  CHECK(ccrun::store::parse_port("0") == 0);
  CHECK(ccrun::store::parse_port("65535") == 65535);
  auto error_of = [](std::string_view port) {
    try {
      (void)ccrun::store::parse_port(port);
    } catch (const ccrun::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("29400x") == "the port \"29400x\" is not a number; give a port from 0 to 65535");
  CHECK_THAT(error_of("65536"), Catch::Contains("above 65535"));
  CHECK_THAT(error_of(""), Catch::Contains("the port is empty"));
}
