// Reaching a running job's store: the flags, the store and the records that
// `ccrun status` and `ccrun top` share (see job_reader.h).
#include "job_reader.h"

#include <cstdio>
#include <sstream>

#include "ccrun/endpoint.h"
#include "ccrun/error.h"
#include "ccrun/signal_names.h"
#include "ccrun/store_address.h"
#include "rdzv_conf.h"

namespace ccrun::launcher {
namespace {

// --rdzv-backend's value, or ConfigError naming the flag and the valid ones.
rendezvous::Backend parse_backend_flag(const std::string& text) {
  try {
    return rendezvous::parse_backend(text);
  } catch (const ConfigError& e) {
    throw ConfigError("--rdzv-backend \"" + text + "\": " + e.what());
  }
}

}  // namespace

void add_job_store_options(CLI::App& app, JobStoreArgs& a) {
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", a.endpoint,
                 "HOST:PORT of the job's store (ccrun-rendezvous or the hosting agent), the "
                 "etcd members with --rdzv-backend etcd, or a store address (tcp://, etcd://)")
      ->required()
      ->type_name("HOST:PORT");
  app.add_option("--rdzv-id,--rdzv_id", a.run_id, "the job's --rdzv-id")->required()->type_name("ID");
  app.add_option("--rdzv-backend,--rdzv_backend", a.backend_text,
                 "the job's --rdzv-backend, " + rendezvous::backend_names() +
                     " (etcd: the endpoint is the etcd cluster's)")
      ->type_name("BACKEND");
  app.add_option("--rdzv-conf,--rdzv_conf", a.conf_text,
                 "the job's --rdzv-conf (key=value,...; etcd_user, etcd_ca and the other "
                 "etcd_* options are read)")
      ->type_name("KEY=VALUE,...");
  app.add_option("--timeout", a.timeout_s, "seconds to wait for the store to answer")
      ->check(CLI::Validator(CLI::PositiveNumber).description(""))
      ->type_name("SECONDS");
}

std::vector<FlagCompletion> job_store_flag_completions(const CLI::App& app) {
  std::vector<FlagCompletion> out;
  for (const CLI::Option* o : app.get_options()) {
    std::vector<std::string> choices;
    if (o->check_lname("rdzv-backend")) {
      for (const auto& b : rendezvous::kBackendNames) choices.emplace_back(b.name);
    }
    out.push_back(flag_completion(*o, std::move(choices)));
  }
  return out;
}

std::shared_ptr<store::Store> open_store_of_job(const JobStoreArgs& a, const char* command) {
  rendezvous::Backend backend = parse_backend_flag(a.backend_text);
  RendezvousSpec rdzv;
  for (const auto& w : apply_rdzv_conf(split_rdzv_conf(Raw{a.conf_text, "--rdzv-conf", false}), rdzv)) {
    std::fprintf(stderr, "ccrun %s: warning: %s\n", command, w.c_str());
  }
  // A store address (tcp://, etcd://) as given, or the endpoint of the
  // job's backend, as the agents were given it.
  std::string address =
      a.endpoint.find("://") != std::string::npos ? a.endpoint
      : backend == rendezvous::Backend::kEtcd
          ? store::etcd_address(a.endpoint)
          : store::tcp_address(store::parse_endpoint(a.endpoint, rendezvous::kDefaultRendezvousPort));
  store::OpenStoreOptions opts;
  opts.conf = rdzv.conf;
  opts.timeout = std::chrono::milliseconds(int64_t(a.timeout_s * 1000));
  opts.connect_timeout = opts.timeout;
  return store::open_store(address, opts);
}

std::vector<RankView> job_rank_views(const JobState& job) {
  std::vector<RankView> views;
  for (const auto& n : job.node_statuses) {
    if (n) views.insert(views.end(), n->ranks.begin(), n->ranks.end());
  }
  return views;
}

std::string describe_failure(const Failure& f) {
  std::ostringstream o;
  o << "node " << f.node_rank << " rank " << f.rank << ": ";
  if (f.cause == FailureCause::kHang) {  // stopped by ccrun: its exit says nothing
    o << "hung";
  } else if (f.signal) {
    o << signal_name(f.signal);
  } else if (f.rank < 0) {
    o << (f.message.empty() ? std::string("node failure") : f.message);
  } else {
    o << "exit code " << f.exit_code;
  }
  o << " at " << format_utc(f.time_ms) << " (attempt " << f.attempt << ")";
  return o.str();
}

std::string no_such_job_message(const JobStoreArgs& a) {
  return "the store at " + a.endpoint + " has no job '" + a.run_id +
         "'; check --rdzv-id (and that this is the job's store)";
}

}  // namespace ccrun::launcher
