// The --rdzv-conf parser: torchrun's spellings (quotes, spaces), its keys,
// the warning for a key nobody knows, and the errors.
#include "rdzv_conf.h"

#include <catch2/catch.hpp>

#include "ccrun/error.h"

using ccrun::RendezvousSpec;
using ccrun::launcher::apply_rdzv_conf;
using ccrun::launcher::Raw;
using ccrun::launcher::split_rdzv_conf;
using std::chrono::milliseconds;

namespace {
std::map<std::string, std::string> values(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const auto& [k, r] : split_rdzv_conf(Raw{text, "--rdzv-conf", false})) out[k] = r.value;
  return out;
}
std::string split_error(const std::string& text) {
  try {
    (void)split_rdzv_conf(Raw{text, "--rdzv-conf", false});
  } catch (const ccrun::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
std::vector<std::string> apply(const std::string& text, RendezvousSpec& rdzv) {
  return apply_rdzv_conf(split_rdzv_conf(Raw{text, "--rdzv-conf", false}), rdzv);
}
}  // namespace

TEST_CASE("rdzv-conf: torchrun's spellings split alike", "[launcher][rdzv_conf]") {
  using M = std::map<std::string, std::string>;
  CHECK(values("join_timeout=5,last_call_timeout=1") == M{{"join_timeout", "5"}, {"last_call_timeout", "1"}});
  // Quotes around the whole text (no shell removed them) and around values.
  CHECK(values("'join_timeout=5,last_call_timeout=1,timeout=5'") ==
        M{{"join_timeout", "5"}, {"last_call_timeout", "1"}, {"timeout", "5"}});
  CHECK(values("\"a=1\"") == M{{"a", "1"}});
  CHECK(values(" a = '1' , b=\"x y\"") == M{{"a", "1"}, {"b", "x y"}});
  CHECK(values("").empty());
  CHECK(values("url=http://h:1/x=y") == M{{"url", "http://h:1/x=y"}});  // the first '=' splits
  CHECK_THAT(split_error("=1"), Catch::Contains("--rdzv-conf \"=1\": expected key=value"));
  CHECK_THAT(split_error("a"), Catch::Contains("expected key=value"));
  CHECK_THAT(split_error("a=1,a=2"), Catch::Contains("\"a\" is given twice"));
}

TEST_CASE("rdzv-conf: torch's keys and what ccrun does with them", "[launcher][rdzv_conf]") {
  RendezvousSpec r;
  CHECK(apply("join_timeout=5,last_call_timeout=1,timeout=7,close_timeout=2,read_timeout=3,"
              "keep_alive_interval=0.5,keep_alive_max_attempt=4,is_host=1",
              r)
            .empty());
  CHECK(r.join_timeout == milliseconds(5000));  // join_timeout wins over timeout
  CHECK(r.last_call_timeout == milliseconds(1000));
  CHECK(r.read_timeout == milliseconds(3000));
  CHECK(r.keep_alive_interval == milliseconds(500));
  CHECK(r.keep_alive_max_attempt == 4);
  CHECK(r.is_host == true);
  RendezvousSpec t;
  CHECK(apply("timeout=7", t).empty());
  CHECK(t.join_timeout == milliseconds(7000));  // torchrun's --rdzv-timeout
  // Accepted and dropped; torch's etcd-v2 names under ccrun's.
  RendezvousSpec e;
  CHECK(apply("use_libuv=1,heartbeat_timeout=5,close_timeout=2,store_type=tcp,rank=0,etcd_prefix=/p,"
              "ssl_cert=c.pem,ssl_cert_key=k.pem,ca_cert=ca.pem,protocol=https,etcd_user=u",
              e)
            .empty());
  CHECK(e.conf == std::map<std::string, std::string>{{"etcd_ca", "ca.pem"},
                                                     {"etcd_cert", "c.pem"},
                                                     {"etcd_key", "k.pem"},
                                                     {"etcd_user", "u"},
                                                     {"protocol", "https"}});
  CHECK_THROWS_WITH(apply("store_type=file", e), Catch::Contains("TCP store only"));
  CHECK_THROWS_WITH(apply("join_timeout=soon", e), Catch::Contains("--rdzv-conf join_timeout \"soon\""));
  CHECK_THROWS_WITH(apply("close_timeout=soon", e), Catch::Contains("--rdzv-conf close_timeout"));
  CHECK_THROWS_WITH(apply("keep_alive_interval=0", e), Catch::Contains("keep_alive_interval must be more than 0"));
}

TEST_CASE("rdzv-conf: a key nobody knows is a warning, not an error", "[launcher][rdzv_conf]") {
  RendezvousSpec r;
  auto warnings = apply("join_timout=5,last_call_timeout=1", r);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("unknown rendezvous setting \"join_timout\"") &&
                              Catch::Contains("did you mean \"join_timeout\"") &&
                              Catch::Contains("ignored") && Catch::Contains("known: join_timeout, "));
  CHECK(r.join_timeout == milliseconds(600'000));
  CHECK(r.last_call_timeout == milliseconds(1000));
  CHECK(r.conf.count("join_timout") == 0);  // not forwarded to the hosts' agents
}
