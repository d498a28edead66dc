// PMI-1 lines parsed, and what a node's server does with each request
// (agent/mpi/pmi_wire.h): one table row per line.
#include "mpi/pmi_wire.h"

#include <catch2/catch.hpp>

using namespace ccrun::agent::mpi;
using Kind = PmiAction::Kind;

namespace {

PmiJob job() {
  PmiJob j;
  j.kvsname = "kvs_ccrun_job_0";
  j.world_size = 8;
  j.num_nodes = 2;
  j.nproc_per_node = 4;
  return j;
}

}  // namespace

TEST_CASE("pmi wire: lines that are requests", "[pmi]") {
  auto r = parse_request("cmd=put kvsname=kvs key=bc-0 value=a b=c d\n");
  REQUIRE(r);
  CHECK(r->cmd == "put");
  REQUIRE(r->args.size() == 3);
  CHECK(*r->arg("kvsname") == "kvs");
  CHECK(*r->arg("key") == "bc-0");
  CHECK(*r->arg("value") == "a b=c d");  // a value runs to the end of the line
  CHECK(r->arg("missing") == nullptr);

  r = parse_request("  cmd=barrier_in  \r\n");
  REQUIRE(r);
  CHECK(r->cmd == "barrier_in");
  CHECK(r->args.empty());

  r = parse_request("cmd=put kvsname=k key=x value=");
  REQUIRE(r);
  CHECK(r->arg("value")->empty());
}

TEST_CASE("pmi wire: lines that are not requests", "[pmi]") {
  const char* bad[] = {
      "",                       // nothing
      "\n",                     // an empty line
      "key=x cmd=get",          // cmd= not first
      "cmd=",                   // an empty command
      "cmd=get key",            // a token without '='
      "cmd=get =x",             // an empty key
      "cmd=get key =x",         // a space before '='
      "mcmd=spawn",             // PMI's multi-line spawn: not served
  };
  for (const char* line : bad) {
    INFO(line);
    CHECK_FALSE(parse_request(line));
  }
  CHECK_FALSE(parse_request("cmd=put key=k value=" + std::string(kMaxLine, 'x')));
}

TEST_CASE("pmi wire: replies", "[pmi]") {
  CHECK(format_reply("barrier_out", {}) == "cmd=barrier_out\n");
  CHECK(format_reply("get_result", {{"rc", "-1"}, {"msg", "no such key\n"}}) ==
        "cmd=get_result rc=-1 msg=no_such_key_\n");
  CHECK(get_reply("k", std::string("v")) == "cmd=get_result rc=0 msg=success value=v\n");
  CHECK(get_reply("k", std::nullopt) == "cmd=get_result rc=-1 msg=key_k_not_found\n");
}

TEST_CASE("pmi wire: the process mapping and the kvsname", "[pmi]") {
  CHECK(process_mapping(2, 4, 8) == "(vector,(0,2,4))");
  CHECK(process_mapping(1, 1, 1) == "(vector,(0,1,1))");
  CHECK(process_mapping(2, 4, 7).empty());  // nodes of different counts: no mapping
  CHECK(process_mapping(0, 4, 0).empty());
  CHECK(kvs_name("kvs_ccrun_my job/1_0") == "kvs_ccrun_my_job_1_0");
  CHECK(kvs_name(std::string(300, 'a')).size() == size_t(kKvsNameMax));
}

// One row: a request line, what the server does, and the reply it sends at
// once ("" when the answer comes later or never).
struct Row {
  const char* line;
  Kind kind;
  const char* reply;
};

TEST_CASE("pmi wire: each request's action", "[pmi]") {
  const Row rows[] = {
      {"cmd=init pmi_version=1 pmi_subversion=1", Kind::kReply,
       "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"},
      {"cmd=init pmi_version=2 pmi_subversion=0", Kind::kReply,
       "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n"},
      {"cmd=get_maxes", Kind::kReply,
       "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0\n"},
      {"cmd=get_appnum", Kind::kReply, "cmd=appnum appnum=0 rc=0\n"},
      {"cmd=get_universe_size", Kind::kReply, "cmd=universe_size size=8 rc=0\n"},
      {"cmd=get_my_kvsname", Kind::kReply, "cmd=my_kvsname kvsname=kvs_ccrun_job_0 rc=0\n"},
      {"cmd=put kvsname=kvs_ccrun_job_0 key=bc-1 value=xyz", Kind::kPut,
       "cmd=put_result rc=0 msg=success\n"},
      {"cmd=put key=bc-1 value=xyz", Kind::kPut, "cmd=put_result rc=0 msg=success\n"},
      {"cmd=put kvsname=other key=bc-1 value=xyz", Kind::kReply,
       "cmd=put_result rc=-1 msg=kvsname_other_is_not_this_job's\n"},
      {"cmd=put kvsname=kvs_ccrun_job_0 value=xyz", Kind::kReply,
       "cmd=put_result rc=-1 msg=no_key\n"},
      {"cmd=put kvsname=kvs_ccrun_job_0 key=k", Kind::kReply,
       "cmd=put_result rc=-1 msg=no_value\n"},
      {"cmd=get kvsname=kvs_ccrun_job_0 key=bc-1", Kind::kGet, ""},
      {"cmd=get kvsname=other key=bc-1", Kind::kReply,
       "cmd=get_result rc=-1 msg=kvsname_other_is_not_this_job's\n"},
      {"cmd=get kvsname=kvs_ccrun_job_0 key=PMI_process_mapping", Kind::kReply,
       "cmd=get_result rc=0 msg=success value=(vector,(0,2,4))\n"},
      {"cmd=barrier_in", Kind::kBarrier, ""},
      {"cmd=finalize", Kind::kFinalize, "cmd=finalize_ack rc=0\n"},
      {"cmd=abort exitcode=7", Kind::kAbort, ""},
      {"cmd=publish_name service=s port=p", Kind::kReply,
       "cmd=publish_name_result rc=-1 msg=command_publish_name_is_not_served_by_ccrun\n"},
  };
  for (const Row& row : rows) {
    INFO(row.line);
    auto r = parse_request(row.line);
    REQUIRE(r);
    PmiAction a = decide(*r, job());
    CHECK(a.kind == row.kind);
    CHECK(a.reply == row.reply);
  }
}

TEST_CASE("pmi wire: limits and the fields of an action", "[pmi]") {
  PmiAction put = decide(*parse_request("cmd=put key=bc-3 value=card 3"), job());
  CHECK(put.key == "bc-3");
  CHECK(put.value == "card 3");
  PmiAction get = decide(*parse_request("cmd=get key=bc-3"), job());
  CHECK(get.key == "bc-3");
  PmiAction abort = decide(*parse_request("cmd=abort exitcode=12"), job());
  CHECK(abort.exit_code == 12);
  CHECK(decide(*parse_request("cmd=abort exitcode=x"), job()).exit_code == 1);

  std::string long_key(size_t(kKeyMax) + 1, 'k');
  PmiAction a = decide(*parse_request("cmd=put key=" + long_key + " value=v"), job());
  CHECK(a.kind == Kind::kReply);
  CHECK(a.reply == "cmd=put_result rc=-1 msg=key_longer_than_64\n");
  std::string long_value(size_t(kValueMax) + 1, 'v');
  a = decide(*parse_request("cmd=put key=k value=" + long_value), job());
  CHECK(a.reply == "cmd=put_result rc=-1 msg=value_longer_than_1024\n");

  PmiJob uneven = job();
  uneven.world_size = 7;  // nodes of 4 and 3 ranks: MPICH asks the host names instead
  a = decide(*parse_request("cmd=get key=PMI_process_mapping"), uneven);
  CHECK(a.reply == "cmd=get_result rc=-1 msg=key_PMI_process_mapping_not_found\n");
}
