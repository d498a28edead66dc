// Flags, PET_* variables and YAML job files into one validated JobSpec
// resolve_*.cpp turn each concern's settings into the spec.
#include "job_builder.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <sstream>

#include "ccrun/error.h"
#include "completion.h"
#include "flag_prefixes.h"
#include "help_formatter.h"
#include "mpi_program.h"
#include "report_command.h"
#include "resolve.h"
#include "exclusion_file.h"
#include "slurm.h"
#include "status_command.h"
#include "top_command.h"

extern char** environ;

namespace ccrun::launcher {
namespace {

// The command line as CLI11 read it.
struct Flags {
  std::map<std::string, std::string> values;  // options, by setting key
  std::map<std::string, bool> switches;       // switches, by setting key
  std::map<std::string, CLI::Option*> opts;   // every setting's option
  std::string config;
  bool print_config = false, version = false;
  std::vector<std::string> exports;  // --export, repeatable
  bool exit_on_stdin_eof = false;    // hidden: given by the ssh fan-out alone
  std::string completion;            // --print-completion SHELL
  // The fixed values of the options that have them, for the completion.
  std::map<const CLI::Option*, std::vector<std::string>> choices;
};

// The shells --print-completion writes a script for.
constexpr const char* kCompletionShell = "bash";

// The help with ccrun's usage lines (help_formatter.h for the rest).
class MainHelpFormatter : public HelpFormatter {
 public:
  // CLI11 knows no program after the options (prefix_command), nor the
  // status command, which main() dispatches before parsing.
  std::string make_usage(const CLI::App*, std::string name) const override {
    // GNU's "  or:" lines, which help2man reads as one synopsis.
    return "Usage: " + name + " [OPTIONS] PROGRAM [ARGS...]\n"
           "  or:  " + name + " --config JOB.yaml [OPTIONS] [PROGRAM [ARGS...]]\n"
           "  or:  " + name + " status --rdzv-endpoint HOST:PORT --rdzv-id ID [--json]\n"
           "  or:  " + name + " top --rdzv-endpoint HOST:PORT --rdzv-id ID [--once]\n"
           "  or:  " + name + " report RUN_DIR... [--output FILE]\n"
           "(status: a running job's state; top: the same, live; report: a --log-dir run as a\n"
           "page; " + name + " status --help, " + name + " top --help, " + name + " report --help)\n";
  }
};

// CLI11's parser for every setting, bound to `f`.
std::unique_ptr<CLI::App> make_app(Flags& f) {
  auto app = std::make_unique<CLI::App>(
      "ccrun: launch a distributed training job, torchrun-compatible.\n"
      "Every flag can also be set by PET_<FLAG> (e.g. PET_NPROC_PER_NODE=4)\n"
      "or by a YAML job file (--config); flags win over variables, variables\n"
      "over the file. A unique prefix of a long flag stands for it (--redirect=3),\n"
      "as in torchrun, and torchrun's underscored spellings (--nproc_per_node) work too.",
      "ccrun");
  app->footer(
      "Examples:\n"
      "  ccrun --nproc-per-node 4 train.py --lr 0.1\n"
      "  ccrun --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 8 train.py\n"
      "  ccrun --nnodes 1:4 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 \\\n"
      "        --rdzv-id job7 --max-restarts 3 --no-python ./trainer --steps 1000\n"
      "  ccrun --hostfile hosts.txt --nproc-per-node 8 train.py     # every host, over ssh\n"
      "  srun --ntasks-per-node=1 ccrun --nproc-per-node gpu train.py  # under Slurm\n"
      "  ccrun --config configs/single_node.yaml\n"
      "${local_rank} in the program's arguments becomes each worker's local rank.");
  app->prefix_command();  // everything from the program on belongs to it
  auto help = std::make_shared<MainHelpFormatter>();
  help->column_width(44);
  app->formatter(help);
  for (const auto& s : settings()) {
    CLI::Option* o;
    if (s.text) {
      o = app->add_option(s.flags, f.values[s.key], s.help)->default_str(default_text(s));
      o->type_name(std::string(value_name(s)));
    } else {
      o = app->add_flag(s.flags, f.switches[s.key], s.help);
    }
    o->group(s.group);
    f.opts[s.key] = o;
    f.choices[o].assign(s.choices.begin(), s.choices.end());
  }
  app->add_option("--config", f.config, "YAML job file (see configs/)")->group("Job file")->type_name("FILE");
  app->add_flag("--print-config", f.print_config, "Print the effective job as YAML and exit")
      ->group("Job file");
  app->add_flag("--version", f.version, "Print ccrun's version and exit");
  f.choices[app->add_option("--print-completion", f.completion,
                            "Print the completion script of SHELL (bash) and exit; the "
                            "package installs it")
                 ->type_name("SHELL")]
      .push_back(kCompletionShell);
  app->add_option("--export", f.exports,
                  "Forward this variable to every host of the host list (repeatable; NAME or A,B)")
      ->group("Hosts")
      ->type_name("NAME")
      ->delimiter(',')
      ->allow_extra_args(false);  // one value per --export: the program may follow
  app->add_flag("--exit-on-stdin-eof", f.exit_on_stdin_eof)->group("");  // hidden
  return app;
}

// Every option's spellings, for the abbreviations torchrun takes.
std::vector<FlagNames> flag_names(const CLI::App& app) {
  std::vector<FlagNames> out;
  for (const CLI::Option* o : app.get_options()) {
    FlagNames f;
    for (const auto& n : o->get_lnames()) f.long_names.push_back("--" + n);
    for (const auto& n : o->get_snames()) f.short_names.push_back("-" + n);
    f.takes_value = o->get_items_expected_max() != 0;
    out.push_back(std::move(f));
  }
  return out;
}

// Every visible option, for the completion script.
std::vector<FlagCompletion> flag_completions(const CLI::App& app, const Flags& f) {
  std::vector<FlagCompletion> out;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_group().empty()) continue;  // hidden
    auto it = f.choices.find(o);
    out.push_back(flag_completion(*o, it != f.choices.end() ? it->second : std::vector<std::string>{}));
  }
  return out;
}

}  // namespace

Environment Environment::from_process() {
  Environment e;
  for (char** p = environ; *p; ++p) {
    std::string s = *p;
    auto eq = s.find('=');
    if (eq != std::string::npos) e.vars[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return e;
}

std::optional<std::string> Environment::get(const std::string& name) const {
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

Sources::Sources(FlagLookup flag, const Environment& env, const YamlJob& yaml)
    : flag_(std::move(flag)), env_(env), yaml_(yaml), slurm_(slurm_settings(env)) {}

Raw Sources::get(const std::string& key) const {
  const Setting& s = *find_setting(key);
  if (auto v = flag_(key)) return Raw{*v, first_flag(s), false};
  if (auto v = env_.get(pet_name(key))) return Raw{pet_value(s, *v), pet_name(key), false};
  for (const char* name : s.more_env) {
    if (auto v = env_.get(name)) return Raw{pet_value(s, *v), name, false};
  }
  if (auto it = slurm_.find(key); it != slurm_.end()) return it->second;
  if (auto it = yaml_.raws.find(key); it != yaml_.raws.end()) return it->second;
  return Raw{default_text(s), first_flag(s) + " (default)", false};
}

bool Sources::given(const std::string& key) const {
  const Setting& s = *find_setting(key);
  bool more = std::any_of(s.more_env.begin(), s.more_env.end(),
                          [&](const char* name) { return env_.get(name).has_value(); });
  return flag_(key) || env_.get(pet_name(key)) || more || slurm_.count(key) > 0 ||
         yaml_.raws.count(key) > 0;
}

Command parse_command_line(const std::vector<std::string>& args, const Environment& env) {
  Flags f;
  auto app = make_app(f);
  std::vector<std::string> expanded = expand_flag_prefixes(flag_names(*app), args);
  std::vector<std::string> argv_rev(expanded.rbegin(), expanded.rend());
  Command cmd;
  try {
    app->parse(argv_rev);
  } catch (const CLI::CallForHelp&) {
    cmd.message = app->help();
    return cmd;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(std::string(e.what()) + "; see ccrun --help");
  }
  if (f.version) {
    cmd.message = std::string("ccrun ") + CCRUN_VERSION + "\n";
    return cmd;
  }
  if (!f.completion.empty()) {
    if (f.completion != kCompletionShell) {
      throw ConfigError("--print-completion \"" + f.completion + "\": only " + kCompletionShell +
                        " is supported (ccrun --print-completion bash)");
    }
    cmd.message = bash_completion_script("ccrun", flag_completions(*app, f),
                                         {{"status", status_flag_completions()},
                                          {"top", top_flag_completions()},
                                          {"report", report_flag_completions()}});
    return cmd;
  }
  cmd.print_config = f.print_config;

  YamlJob job;
  if (!f.config.empty()) job = load_yaml(f.config);
  // PET_* variables count as flags given (CLI11's envname reads only the
  // process environment; ours is explicit for testing).
  Sources src(
      [&f](const std::string& key) -> std::optional<std::string> {
        if (f.opts.at(key)->count() == 0) return std::nullopt;
        return find_setting(key)->text ? f.values[key] : "true";
      },
      env, job);

  JobSpec& spec = cmd.spec;
  resolve_nodes(src, spec);
  resolve_hosts(src, spec);
  if (!f.print_config) check_workers_counted(src, spec);
  resolve_fanout(src, f.exports, spec);
  spec.exit_on_stdin_eof = f.exit_on_stdin_eof;
  spec.started_by_fanout = f.exit_on_stdin_eof;  // only the fan-out gives the flag
  resolve_rendezvous(src, spec);
  if (!f.print_config && !f.exit_on_stdin_eof) skip_excluded_hosts(src, spec);
  if (src.under_slurm()) spec.exclusion_file = exclusion_file(env, spec.rdzv.id).string();
  resolve_restarts(src, spec);
  resolve_logs(src, spec);
  resolve_placement(src, spec);
  resolve_warm_start(src, spec);
  if (!resolve_program(src, app->remaining(), spec) && !f.print_config) {
    throw ConfigError("no program to run; give it after the flags, e.g. ccrun --nproc-per-node 2 "
                      "train.py (or `program:` in the job file)");
  }
  if (!f.print_config) {
    if (std::string why = mpi_program_problem(spec); !why.empty()) throw ConfigError(why);
  }
  return cmd;
}

}  // namespace ccrun::launcher
