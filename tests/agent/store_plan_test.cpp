// Where the job's store is and who serves it, case by case (store_plan.h).
#include <catch2/catch.hpp>

#include "store_plan.h"

using namespace ccrun;
using namespace ccrun::agent;
using Mode = StorePlan::Mode;

namespace {

JobSpec c10d(const std::string& endpoint) {
  JobSpec spec;
  spec.rdzv.backend = rendezvous::Backend::kC10d;
  spec.rdzv.endpoint = endpoint;
  return spec;
}

}  // namespace

TEST_CASE("store plan: --standalone serves on the loopback, a free port, and says so",
          "[store_plan]") {
  JobSpec spec = c10d("127.0.0.1:0");  // what the launcher makes of --standalone
  spec.standalone = true;
  StorePlan p = plan_store(spec, false);
  CHECK(p.mode == Mode::kServe);
  CHECK(p.bind_host == "127.0.0.1");
  CHECK(p.endpoint.port == 0);
  CHECK(p.address == "tcp://127.0.0.1:0");
  CHECK(p.announce);
  CHECK(p.random_id);
  CHECK(p.worker_store);
  CHECK(p.worker_bind_host("127.0.0.1") == "127.0.0.1");
  spec.rdzv.id = "job7";
  CHECK_FALSE(plan_store(spec, false).random_id);
}

TEST_CASE("store plan: static node 0 serves at --master-port, the others join it",
          "[store_plan]") {
  JobSpec spec;
  spec.master_addr = "10.0.0.1";
  spec.master_port = 29500;
  StorePlan p = plan_store(spec, false);
  CHECK(p.mode == Mode::kServe);
  CHECK(p.bind_host == "0.0.0.0");
  CHECK(p.address == "tcp://10.0.0.1:29500");
  CHECK_FALSE(p.worker_store);  // the workers use the job's store itself
  CHECK_FALSE(p.announce);
  spec.node_rank = 1;
  CHECK(plan_store(spec, false).mode == Mode::kJoin);
  spec.master_addr = "fd00::1";
  CHECK(plan_store(spec, false).address == "tcp://[fd00::1]:29500");
  spec.node_rank = 0;
  CHECK(plan_store(spec, false).bind_host == "::");
}

TEST_CASE("store plan: c10d serves an endpoint of this machine, or joins another's",
          "[store_plan]") {
  StorePlan here = plan_store(c10d("localhost:29400"), false);
  CHECK(here.mode == Mode::kServeOrJoin);  // another agent here may serve it already
  CHECK(here.bind_host == "127.0.0.1");
  StorePlan away = plan_store(c10d("192.0.2.7"), false);
  CHECK(away.mode == Mode::kJoin);
  CHECK(away.address == "tcp://192.0.2.7:29400");  // torch's default port
  CHECK(away.worker_bind_host("192.0.2.9") == "0.0.0.0");
  CHECK(away.worker_bind_host("fd00::9") == "::");
  JobSpec told = c10d("192.0.2.7:29400");
  told.rdzv.is_host = true;  // is_host=1: serve it, or fail
  CHECK(plan_store(told, false).mode == Mode::kServe);
  told.rdzv.is_host = false;
  CHECK(plan_store(c10d("localhost:29400"), false).worker_store);
  CHECK_FALSE(plan_store(c10d("localhost:29400"), true).worker_store);  // torch 1.x's way
  told.rdzv.endpoint = "localhost:29400";
  CHECK(plan_store(told, false).mode == Mode::kJoin);  // is_host=0 here: join
}

TEST_CASE("store plan: etcd is joined, nothing served here", "[store_plan]") {
  JobSpec spec;
  spec.rdzv.backend = rendezvous::Backend::kEtcd;
  spec.rdzv.endpoint = "10.0.0.5:2379,10.0.0.6:2379/jobs";
  StorePlan p = plan_store(spec, false);
  CHECK(p.mode == Mode::kEtcd);
  CHECK_FALSE(p.serves());
  CHECK(p.address == "etcd://10.0.0.5:2379,10.0.0.6:2379/jobs");
  CHECK(p.endpoint.host == "10.0.0.5");
  CHECK(p.worker_store);
  CHECK(store_address_hint(spec, p) == "10.0.0.5:2379,10.0.0.6:2379/jobs");
}

TEST_CASE("forget hint: etcd's command deletes the id's keys under the endpoint's prefix, a TCP "
          "store's is the daemon's expiry", "[store_plan]") {
  JobSpec spec;
  spec.rdzv.backend = rendezvous::Backend::kEtcd;
  spec.rdzv.endpoint = "10.0.0.5:2379,10.0.0.6:2379/jobs";
  CHECK_THAT(forget_hint(plan_store(spec, false), "job7"),
             Catch::EndsWith("etcdctl del --prefix 'jobs/ccrun/job7/'"));
  spec.rdzv.endpoint = "10.0.0.5:2379";  // the default prefix
  CHECK_THAT(forget_hint(plan_store(spec, false), "job7"),
             Catch::EndsWith("etcdctl del --prefix 'ccrun/ccrun/job7/'"));
  CHECK_THAT(forget_hint(plan_store(c10d("store-host:29400"), false), "job7"),
             Catch::Contains("--finished-job-ttl, 600 s by default"));
}
