# ctest: LABELS torch
"""ccrun run as a torchrun user runs torchrun: each case is one
behaviour torchrun 2.x has (its agent, api.py and local_elastic_agent.py, and
its own tests, test_run.py and local_elastic_agent_test.py), checked on the
real binary. Two agents on one machine stand for two nodes."""
import json
import os
import signal
import sys

import pytest

from helpers import communicate_all, free_port, parse_env_lines, run_ccrun, spawn_ccrun, \
    start_daemon

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
PRINT_ENV = os.path.join(HERE, "print_env.py")


def agents(args_per_node, timeout=120):
    """Starts one ccrun per entry (its arguments), returns (rc, out, err) of each."""
    procs = [spawn_ccrun(*args) for args in args_per_node]
    return communicate_all(procs, timeout, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))


def envs_of(outs):
    envs = {}
    for rc, out, err in outs:
        assert rc == 0, err
        envs.update(parse_env_lines(out))
    return envs


# torchrun's macros.substitute on every argument after the program
# ("$$" excepted: kept as written, docs/cli.md "Differences from torchrun").
def test_local_rank_macro_in_the_arguments():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--no-python",
                  "/bin/echo", "--local_rank=${local_rank}", "$local_rank", "pid$$", "${LOCAL_RANK}")
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == ["[0]:--local_rank=0 0 pid$$ ${LOCAL_RANK}",
                     "[1]:--local_rank=1 1 pid$$ ${LOCAL_RANK}"]


# attempt_<n>/<local_rank>/ on every node, the error file too.
def test_second_node_logs_are_named_by_local_rank(tmp_path):
    port = str(free_port())
    prog = ['/bin/sh', '-c', 'echo "rank $RANK"; echo "$TORCHELASTIC_ERROR_FILE"']
    outs = agents([["--nnodes", "2", "--node-rank", str(n), "--master-port", port,
                    "--log-dir", str(tmp_path / str(n)), "--rdzv-id", "logs", "--no-python", *prog]
                   for n in (0, 1)])
    for n, (rc, out, err) in enumerate(outs):
        assert rc == 0, err
        [run] = (tmp_path / str(n)).glob("logs_*")
        assert (run / "attempt_0" / "0" / "stdout.log").read_text().startswith(f"rank {n}\n")
        assert not (run / "attempt_0" / "1").exists()
        assert out.strip().endswith(str(run / "attempt_0" / "0" / "error.json"))


# ROLE_RANK and ROLE_WORLD_SIZE count the nodes of one --role, in
# node-rank order (torchrun's _assign_worker_ranks).
def test_role_ranks_count_per_role_static():
    port = str(free_port())
    nodes = [("trainer", 2), ("ps", 1), ("trainer", 1)]
    outs = agents([["--nnodes", "3", "--node-rank", str(n), "--master-port", port,
                    "--role", role, "--nproc-per-node", str(nproc), "--no-python", PY, PRINT_ENV]
                   for n, (role, nproc) in enumerate(nodes)])
    envs = envs_of(outs)
    got = {rank: (e["ROLE_NAME"], e["ROLE_RANK"], e["ROLE_WORLD_SIZE"]) for rank, e in envs.items()}
    assert got == {0: ("trainer", "0", "3"), 1: ("trainer", "1", "3"), 2: ("ps", "0", "1"),
                   3: ("trainer", "2", "3")}
    assert all(e["WORLD_SIZE"] == "4" for e in envs.values())


def test_role_ranks_count_per_role_c10d():
    with start_daemon("--host", "127.0.0.1") as d:
        outs = agents([["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                        f"127.0.0.1:{d.port}", "--rdzv-id", "roles", "--role", role,
                        "--nproc-per-node", "2", "--no-python", PY, PRINT_ENV]
                       for role in ("reader", "learner")])
    envs = envs_of(outs)
    assert sorted(envs) == [0, 1, 2, 3]
    for e in envs.values():
        assert e["ROLE_WORLD_SIZE"] == "2" and e["WORLD_SIZE"] == "4"
        assert e["ROLE_RANK"] == e["LOCAL_RANK"]  # each role is one node


# torch 2.x's rank-0 agent shares a store with its workers in a
# dynamic rendezvous (TORCHELASTIC_USE_AGENT_STORE=True, every worker a client
# of MASTER_PORT); TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 makes rank 0's first
# worker host it, as before. Real torch DDP workers over gloo both ways.
DDP_STEP = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print("SUM", int(t.item()), os.environ["TORCHELASTIC_USE_AGENT_STORE"], os.environ["MASTER_PORT"],
      flush=True)
"""


def test_agent_store_shared_with_the_workers_c10d(tmp_path):
    script = tmp_path / "ddp_step.py"
    script.write_text(DDP_STEP)
    for opt_out, shared in (("0", "True"), ("1", "False")):
        with start_daemon("--host", "127.0.0.1") as d:
            procs = [spawn_ccrun("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                 f"127.0.0.1:{d.port}", "--rdzv-id", "share" + opt_out,
                                 "--nproc-per-node", "2", "--no-python", PY, str(script),
                                 env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": opt_out})
                     for _ in range(2)]
            outs = communicate_all(procs, 120, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))
        lines = [l.split()[1:] for rc, out, err in outs for l in out.splitlines() if "SUM" in l]
        assert all(rc == 0 for rc, _, _ in outs), [err for _, _, err in outs]
        assert len(lines) == 4 and {tuple(l[:2]) for l in lines} == {("10", shared)}, lines
        assert len({l[2] for l in lines}) == 1  # one MASTER_PORT for all


def test_agent_store_is_renewed_for_each_round(tmp_path):
    # attempt 0 fails; attempt 1's workers meet in a new, empty store.
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--no-python",
                  "/bin/sh", "-c", 'echo "PORT $TORCHELASTIC_RESTART_COUNT $MASTER_PORT '
                  '$TORCHELASTIC_USE_AGENT_STORE"; [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]')
    assert r.returncode == 0, r.stderr
    ports = {tuple(l.split()[-3:]) for l in r.stdout.splitlines() if "PORT" in l}
    assert {(a, s) for a, _, s in ports} == {("0", "True"), ("1", "True")}, ports
    assert len({p for _, p, _ in ports}) == 2, ports


# -r 3 with -t 3 shows every line (tee wins for the console) and
# writes the files.
def test_tee_wins_over_redirects_for_the_console(tmp_path):
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "-r", "3", "-t", "3",
                  "--log-dir", str(tmp_path), "--rdzv-id", "tee", "--no-python", "/bin/sh", "-c",
                  'echo "out $RANK"; echo "err $RANK" >&2')
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0]:out 0", "[1]:out 1"]
    assert "[1]:err 1" in r.stderr.splitlines()
    [run] = tmp_path.glob("tee_*")
    assert (run / "attempt_0" / "1" / "stdout.log").read_text() == "out 1\n"
    # -r 3 -t 1: stdout on the console and in the file, stderr in the file only (kept under
    # TMPDIR without --log-dir: the test's own folder).
    r = run_ccrun("--master-port", str(free_port()), "-r", "3", "-t", "1", "--no-python",
                  "/bin/sh", "-c", 'echo out; echo err >&2', env={"TMPDIR": str(tmp_path)})
    assert r.stdout == "[0]:out\n" and "err" not in r.stderr


def test_log_line_prefix_template():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--role", "trainer",
                  "--no-python", "/bin/echo", "hi",
                  env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name}/${rank}/$local_rank>"})
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["<trainer/0/0>hi", "<trainer/1/1>hi"]


# A scheduler's TORCHELASTIC_ERROR_FILE for ccrun itself gets the root
# cause's record (torchrun's main is decorated with torch's @record).
RECORDED = """
from torch.distributed.elastic.multiprocessing.errors import record
import os, time
@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("boom on rank 1")
    time.sleep(30)
main()
"""


def test_launcher_error_file_gets_the_root_cause_record(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(RECORDED)
    err = tmp_path / "launcher_error.json"
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--no-python", PY,
                  str(script), env={"TORCHELASTIC_ERROR_FILE": str(err)})
    assert r.returncode == 1, r.stderr
    record = json.loads(err.read_text())
    assert record["message"]["message"] == "ValueError: boom on rank 1"
    assert "py_callstack" in record["message"]["extraInfo"]
    assert record["message"]["errorCode"] == 1
    # No @record in the worker: a record made from the failure.
    r = run_ccrun("--master-port", str(free_port()), "--no-python", "/bin/sh", "-c",
                  "echo dying >&2; exit 3", env={"TORCHELASTIC_ERROR_FILE": str(err)})
    assert r.returncode == 1
    record = json.loads(err.read_text())
    assert record["message"]["message"].startswith("ChildFailedError: rank 0 (local_rank 0) on ")
    assert record["message"]["errorCode"] == 3
    assert "dying" in record["message"]["extraInfo"]["py_callstack"]


# ccrun's own errors: torchrun's main is decorated with @record, so a
# rendezvous that timed out, a bad flag or a signal leaves a record too.
def test_launcher_error_file_gets_ccruns_own_errors(tmp_path):
    err = tmp_path / "launcher_error.json"
    env = {"TORCHELASTIC_ERROR_FILE": str(err)}
    r = run_ccrun("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                  f"127.0.0.1:{free_port()}", "--rdzv-conf", "join_timeout=1", "--no-python",
                  "/bin/true", env=env)
    assert r.returncode == 1, r.stderr
    message = json.loads(err.read_text())["message"]
    assert message["message"].startswith("ccrun::TimeoutError: rendezvous")
    assert "1 of at least 2 nodes joined" in message["message"]
    assert int(message["extraInfo"]["timestamp"]) > 1.7e9
    r = run_ccrun("--nnodes", "x", "/bin/true", env=env)
    assert r.returncode == 2
    assert json.loads(err.read_text())["message"]["message"].startswith(
        'ccrun::ConfigError: --nnodes "x"')
    p = spawn_ccrun("--master-port", str(free_port()), "--no-python", "/bin/sh", "-c",
                    "echo up; exec sleep 60", env=env)
    assert p.stdout.readline().strip().endswith("up")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    assert json.loads(err.read_text())["message"]["message"].startswith(
        "SignalException: ccrun (pid")


# argparse's abbreviations of long flags, and --logs-specs.
def test_unique_prefixes_of_long_flags_and_logs_specs(tmp_path):
    r = run_ccrun("--master-port", str(free_port()), "--nproc=2", "--redirect=1", "--logs-specs",
                  "default", "--no-py", "/bin/echo", "hidden", env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    r = run_ccrun("--n", "2", "--no-python", "/bin/true")
    assert r.returncode == 2
    assert "ambiguous abbreviation" in r.stderr and "--nnodes" in r.stderr
    r = run_ccrun("--logs-specs", "mine", "--no-python", "/bin/true")
    assert r.returncode == 2 and "default" in r.stderr


# torch 2.x's --numa-binding, on this machine's real CPUs. hwloc's
# HWLOC_XMLFILE gives the CPU-only test machine two GPUs near its CPUs 0
# and 1 (tests/agent/data/two_cpus_2_gpus.xml); each worker reports the
# affinity the kernel gave it.
TOPO = os.path.join(os.path.dirname(HERE), "agent", "data", "two_cpus_2_gpus.xml")
AFFINITY = ["/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"]


def bound_cpus(mode, env):
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--numa-binding",
                  mode, "--no-python", *AFFINITY, env=env)
    assert r.returncode == 0, r.stderr
    return dict(line.split(":Cpus_allowed_list:") for line in r.stdout.split("\n") if line), r.stderr


def test_numa_binding_sets_each_workers_affinity():
    if os.sched_getaffinity(0) != {0, 1}:
        import pytest
        pytest.skip("needs CPUs 0 and 1 (the XML topology's)")
    env = {"HWLOC_XMLFILE": TOPO, "CUDA_VISIBLE_DEVICES": "0,1"}
    cpus, err = bound_cpus("exclusive", env)
    assert {k: v.strip() for k, v in cpus.items()} == {"[0]": "0", "[1]": "1"}
    assert "local rank 1 on CPUs 1, memory of NUMA node(s) 0" in err
    cpus, _ = bound_cpus("node", env)
    assert {v.strip() for v in cpus.values()} == {"0-1"}
    cpus, _ = bound_cpus("core-complex", env)  # one L3 a CPU here
    assert {k: v.strip() for k, v in cpus.items()} == {"[0]": "0", "[1]": "1"}


def test_numa_binding_without_a_gpu_fails_before_any_worker():
    env = {"CUDA_VISIBLE_DEVICES": ""}
    r = run_ccrun("--numa-binding", "node", "--no-python", "/bin/echo", "ran", env=env)
    assert r.returncode == 2 and "ran" not in r.stdout
    assert "local rank 0 has no GPU: this node has 0 GPU(s)" in r.stderr
    r = run_ccrun("--numa_binding", "numa", "--no-python", "/bin/true")
    assert r.returncode == 2
    assert "node, socket, exclusive or core-complex" in r.stderr


# --virtual-local-rank (torch 2.x's _set_local_rank_env).
def test_virtual_local_rank():
    prog = ["/bin/sh", "-c", 'echo "$LOCAL_RANK $CUDA_VISIBLE_DEVICES"']
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2",
                  "--virtual-local-rank", "--no-python", *prog, env={"CUDA_VISIBLE_DEVICES": "5, 7"})
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0]:0 5", "[1]:0 7"]
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "3",
                  "--virtual_local_rank", "--no-python", *prog, env={"CUDA_VISIBLE_DEVICES": "5,7"})
    assert r.returncode == 1
    assert "local rank 2 exceeds available GPUs in CUDA_VISIBLE_DEVICES=5,7" in r.stderr


# --duplicate-stdout-filters: the tee'd lines holding a needle, of
# every tee'd rank, also in attempt_<n>/filtered_stdout.log (",," a comma).
def test_duplicate_stdout_filters(tmp_path):
    prog = ["/bin/sh", "-c", "echo apple pie; echo banana; echo or,ange; echo err apple >&2"]
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--tee", "0:3",
                  "-r", "3", "--log-dir", str(tmp_path), "--rdzv-id", "dup",
                  "--duplicate-stdout-filters", "apple,or,,ange", "--no-python", *prog)
    assert r.returncode == 0, r.stderr
    [run] = tmp_path.glob("dup_*")
    lines = (run / "attempt_0" / "filtered_stdout.log").read_text().splitlines()
    assert lines == ["[0]:apple pie", "[0]:or,ange"]  # rank 1 is not tee'd
    assert not (run / "attempt_0" / "filtered_stderr.log").exists()


# --event-log-handler console: torch's end-of-run event on stderr.
def test_event_log_handler_console():
    r = run_ccrun("--master-port", str(free_port()), "--event-log-handler", "console",
                  "--rdzv-id", "ev", "--no-python", "/bin/true")
    assert r.returncode == 0, r.stderr
    [line] = [l for l in r.stderr.splitlines() if l.startswith('{"name"')]
    event = json.loads(line)
    assert event["name"] == "torchelastic.worker.status.SUCCEEDED"
    assert event["source"] == "AGENT"
    md = event["metadata"]
    assert (md["run_id"], md["state"], md["rdzv_backend"], md["group_rank"]) == \
        ("ev", "SUCCEEDED", "static", 0)
    assert json.loads(md["metadata"]) == {"group_world_size": 1, "entry_point": "/bin/true"}
    r = run_ccrun("--master-port", str(free_port()), "--no-python", "/bin/true")
    assert '{"name"' not in r.stderr


# docs/cli.md "torchrun 2.x, flag by flag": every flag of torchrun 2.x's
# run.py (the newest torch read for it), with a value ccrun must accept; the
# table's rows must be exactly these, and each flag must run.
TORCHRUN_2X_FLAGS = {
    "--nnodes": ["1:2", "--rdzv-backend", "c10d"], "--nproc-per-node": ["2"],
    "--rdzv-backend": ["c10d", "--rdzv-endpoint", "127.0.0.1:29400"],
    "--rdzv-endpoint": ["127.0.0.1:29400", "--rdzv-backend", "c10d"], "--rdzv-id": ["job"],
    "--rdzv-conf": ["join_timeout=5,timeout=5"], "--standalone": [], "--max-restarts": ["1"],
    "--monitor-interval": ["0.5"], "--start-method": ["fork"],
    "--event-log-handler": ["console"], "--role": ["trainer"], "-m": [], "--module": [],
    "--no-python": [], "--run-path": [], "--log-dir": ["/tmp"], "-r": ["3"],
    "--redirects": ["0:1"], "-t": ["3"], "--tee": ["1"], "--local-ranks-filter": ["0"],
    "--duplicate-stdout-filters": ["loss,,acc"], "--duplicate-stderr-filters": ["err"],
    "--node-rank": ["0"], "--master-addr": ["127.0.0.1"], "--master-port": ["29511"],
    "--local-addr": ["127.0.0.1"], "--logs-specs": ["default"], "--numa-binding": ["node"],
    "--signals-to-handle": ["SIGTERM,SIGUSR1"], "--shutdown-timeout": ["10"],
    "--virtual-local-rank": [],
}
TORCHRUN_2X_VARIABLES = {
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE",
    "OMP_NUM_THREADS", "TORCHELASTIC_ENABLE_FILE_TIMER", "TORCHELASTIC_TIMER_FILE",
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "LOGLEVEL", "PYTHON_EXEC", "PET_<FLAG>",
}
CLI_MD = os.path.join(HERE, "..", "..", "docs", "cli.md")


def doc_table(name):
    """The rows of the table between <!-- name:begin --> and its end: (names, status)."""
    text = open(CLI_MD).read()
    body = text.split(f"<!-- {name}:begin -->")[1].split(f"<!-- {name}:end -->")[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = [n.strip("` ") for n in cells[0].split(",")]
        rows.append((names, cells[2]))
    return rows


def test_the_torchrun_2x_table_lists_every_flag_and_variable():
    flags = doc_table("torchrun-flags")
    variables = doc_table("torchrun-variables")
    for _, status in flags + variables:
        assert status in ("same", "extended", "differs"), status
    listed = {n for names, _ in flags for n in names if n.startswith("-")}
    assert listed == set(TORCHRUN_2X_FLAGS), listed ^ set(TORCHRUN_2X_FLAGS)
    assert {n for names, _ in variables for n in names} == TORCHRUN_2X_VARIABLES


def test_every_torchrun_2x_flag_runs_in_both_spellings():
    for flag, value in TORCHRUN_2X_FLAGS.items():
        spellings = {flag, flag.replace("-", "_").replace("__", "--", 1)} if len(flag) > 2 \
            else {flag}
        for spelling in spellings:
            r = run_ccrun(spelling, *value, "--print-config", "/bin/true")
            assert r.returncode == 0, (spelling, r.stderr)


def test_torchrun_2x_worker_variables_are_set(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--no-python", PY, PRINT_ENV,
                  env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1"})
    assert r.returncode == 0, r.stderr
    envs = parse_env_lines(r.stdout)
    worker_vars = {"LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
                   "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
                   "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                   "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                   "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                   "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS", "TORCHELASTIC_TIMER_FILE"}
    assert worker_vars <= TORCHRUN_2X_VARIABLES
    for e in envs.values():
        missing = [v for v in worker_vars if not e.get(v)]
        assert not missing, missing


@pytest.mark.parametrize("how", ["flag", "env", "yaml"])
def test_an_empty_line_prefix_template_passes_lines_through_unchanged(how, tmp_path):
    args, env = ["--master-port", str(free_port()), "--nproc-per-node", "2"], {}
    if how == "flag":
        args += ["--log-line-prefix-template", ""]
    elif how == "env":
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = ""
    else:
        (tmp_path / "job.yaml").write_text('log_line_prefix_template: ""\n')
        args += ["--config", str(tmp_path / "job.yaml")]
    r = run_ccrun(*args, "--no-python", "/bin/sh", "-c", 'echo "rank $RANK"', env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["rank 0", "rank 1"]
