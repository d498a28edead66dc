// The nodes' shares of a hang's evidence as the comparing node reads them:
// a share that did not come, or is not one, is a missing node, said once.
#include "evidence_shares.h"

#include <catch2/catch.hpp>

using namespace ccrun::agent;
using nlohmann::json;

TEST_CASE("parse_shares: null where a share did not come or is not JSON", "[evidence-shares]") {
  auto shares = parse_shares({R"({"stack_classes": []})", "", "{cut", "[1]"});
  REQUIRE(shares.size() == 4);
  CHECK(shares[0].is_object());
  CHECK(shares[1].is_null());
  CHECK(shares[2].is_null());
  CHECK(shares[3] == json::array({1}));
}

TEST_CASE("missing_shares: every node but this one whose share is not an object", "[evidence-shares]") {
  auto shares = parse_shares({"", R"({"stack_classes": []})", "[1]", "{}"});
  CHECK(missing_shares(shares, 1) == std::vector<int>{0, 2});
  CHECK(missing_shares(shares, 0) == std::vector<int>{2});  // its own is never missing
  CHECK(missing_shares({}, 0).empty());                     // one node: no shares
}

TEST_CASE("missing_shares_line: one line for the stacks and the flight records alike", "[evidence-shares]") {
  using std::chrono::milliseconds;
  CHECK(missing_shares_line({}, milliseconds(5000)).empty());
  CHECK(missing_shares_line({2}, milliseconds(5000)) ==
        "the evidence of node 2 did not come within 5s: its ranks' stacks and flight records are in its own "
        "report");
  CHECK(missing_shares_line({2, 3, 4, 7}, milliseconds(5000)) ==
        "the evidence of nodes 2-4,7 did not come within 5s: their ranks' stacks and flight records are in "
        "their own report");
}
