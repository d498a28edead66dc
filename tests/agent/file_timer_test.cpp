// The FileTimer request parser: torch's FileTimerRequest.to_json lines.
#include "file_timer.h"

#include <catch2/catch.hpp>

using ccrun::agent::parse_file_timer_request;

TEST_CASE("parse_file_timer_request: torch's acquire and release lines") {
  auto r = parse_file_timer_request(
      R"({"version": 1, "pid": 4242, "scope_id": "data_loading", "expiration_time": 1795510000.5, "signal": 9})");
  REQUIRE(r.ok);
  CHECK(r.pid == 4242);
  CHECK(r.scope == "data_loading");
  CHECK(r.expiration == 1795510000.5);
  CHECK(r.signal == 9);
  auto release = parse_file_timer_request(
      R"({"version": 1, "pid": 4242, "scope_id": "data_loading", "expiration_time": -1, "signal": 0})");
  REQUIRE(release.ok);
  CHECK(release.expiration < 0);
}

TEST_CASE("parse_file_timer_request: anything else is not a request") {
  CHECK_FALSE(parse_file_timer_request("").ok);
  CHECK_FALSE(parse_file_timer_request("not json").ok);
  CHECK_FALSE(parse_file_timer_request(R"({"pid": 1})").ok);
  CHECK_FALSE(parse_file_timer_request(R"({"pid": "1", "scope_id": "s", "expiration_time": 1})").ok);
  CHECK_FALSE(parse_file_timer_request(R"({"pid": 0, "scope_id": "s", "expiration_time": 1})").ok);
}
