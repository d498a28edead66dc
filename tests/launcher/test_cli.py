"""The ccrun binary's own surface: --help, --version, --print-config of every
example in configs/, and bad flags or YAML (exit status 2, a clear message)."""
import glob
import os
import subprocess

import pytest

from helpers import ccrun_cmd, free_port, run_ccrun

SOURCE = os.environ.get("CCRUN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_help_and_version():
    r = run_ccrun("--help")
    assert r.returncode == 0
    assert "--nproc-per-node N|auto|cpu|gpu" in r.stdout and "Examples:" in r.stdout
    # Every line fits in 100 columns; values are named, not TEXT.
    assert all(len(line) <= 100 for line in r.stdout.splitlines()), r.stdout
    assert " TEXT" not in r.stdout
    assert "Usage: ccrun [OPTIONS] PROGRAM [ARGS...]\n" in r.stdout
    assert "  or:  ccrun status --rdzv-endpoint HOST:PORT --rdzv-id ID" in r.stdout
    assert "  or:  ccrun top --rdzv-endpoint HOST:PORT --rdzv-id ID" in r.stdout
    assert "  or:  ccrun report RUN_DIR... [--output FILE]" in r.stdout
    r = run_ccrun("--version")
    assert r.returncode == 0 and r.stdout.startswith("ccrun ")


@pytest.mark.parametrize("config", sorted(glob.glob(os.path.join(SOURCE, "configs", "*.yaml"))))
def test_every_example_config_loads(config, tmp_path):
    r = run_ccrun("--config", config, "--print-config", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode == 0, r.stderr
    assert "nproc_per_node:" in r.stdout
    again = tmp_path / "again.yaml"
    again.write_text(r.stdout)
    r2 = run_ccrun("--config", str(again), "--print-config", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout == r.stdout


def test_print_config_keeps_gpu_as_written_on_a_machine_without_one():
    r = run_ccrun("--config", os.path.join(SOURCE, "configs", "elastic.yaml"), "--print-config",
                  env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    assert "nproc_per_node: gpu\n" in r.stdout
    r = run_ccrun("--nproc-per-node", "gpu", "--no-python", "x", env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2 and "no CUDA device is visible on this machine" in r.stderr, r.stderr


SHOW_ARGV = "#!/bin/sh\necho \"argv: $0 $*\"\n"


@pytest.mark.parametrize("args,under_python", [
    (["train.py", "--lr", "1"], True),
    (["-m", "pkg.train", "x"], True),
    (["--run-path", "tool.py", "y"], True),
    (["--no-python", "./show_argv.sh", "x"], False),
    (["./show_argv.sh", "x"], False),
], ids=["script", "module", "run_path", "no_python", "command"])
def test_a_printed_job_file_runs_the_same_worker_command_under_another_nodes_python(
        args, under_python, tmp_path):
    # Printed where the workers run /usr/bin/python3; run where PYTHON_EXEC names another
    # interpreter (a stand-in that shows how it was called): the file's workers run as the
    # flags' do there, under that node's interpreter.
    for name in ("venv-python", "show_argv.sh"):
        (tmp_path / name).write_text(SHOW_ARGV)
        (tmp_path / name).chmod(0o755)
    printed = run_ccrun("--print-config", *args, env={"PYTHON_EXEC": "/usr/bin/python3"},
                        cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "/usr/bin/python3" not in printed.stdout, printed.stdout
    job = tmp_path / "job.yaml"
    job.write_text(printed.stdout)
    there = {"PYTHON_EXEC": str(tmp_path / "venv-python")}
    runs = [run_ccrun("--master-port", str(free_port()), *how, env=there, cwd=tmp_path)
            for how in (args, ["--config", str(job)])]
    for r in runs:
        assert r.returncode == 0, r.stderr
    [flags_argv, file_argv] = [[l for l in r.stdout.splitlines() if "argv: " in l] for r in runs]
    assert len(flags_argv) == 1 and file_argv == flags_argv, (flags_argv, file_argv)
    shown = str(tmp_path / "venv-python") if under_python else "./show_argv.sh"
    assert f"argv: {shown} " in flags_argv[0], flags_argv


@pytest.mark.parametrize("args,message", [
    (["--standalone", "--rdzv-endpoint", "10.0.0.1:29400"],
     'warning: --rdzv-endpoint "10.0.0.1:29400" is ignored: --standalone serves its own store'),
    (["--standalone", "--rdzv-backend", "etcd"],
     'warning: --rdzv-backend "etcd" is ignored: --standalone uses c10d on its own store'),
    (["--rdzv-endpoint", "10.0.0.1:29400"],
     'warning: --rdzv-endpoint "10.0.0.1:29400" is ignored by the static rendezvous'),
])
def test_settings_a_rendezvous_ignores_are_warned_about(args, message):
    r = run_ccrun(*args, "--print-config", "--no-python", "x")
    assert r.returncode == 0, r.stderr
    assert message in r.stderr
    r = run_ccrun("--standalone", "--rdzv-backend", "c10d", "--print-config", "--no-python", "x")
    assert "warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("args,message", [
    (["--nnodes", "3:2", "x"], '--nnodes "3:2": min is larger than max'),
    (["--master-port", "70000", "x"], '--master-port "70000": must be between 0 and 65535'),
    (["--nnodes", "2", "--master-port", "0", "x"], "0 (a free port) works for one node only"),
    (["--config", "/tmp", "x"], '--config "/tmp": is a directory'),
    (["--nproc-per-node", "2", "--local-ranks-filter", "99", "x"], "local rank 99 does not exist"),
    (["--nproc-per-node", "2", "--redirects", "0:1,5:2", "x"],
     '--redirects "0:1,5:2": local rank 5 does not exist: this node runs 2 worker(s)'),
    (["--nproc-per-node", "2", "--tee", "2:3", "x"], '--tee "2:3": local rank 2 does not exist'),
    (["--start_method", "thread", "x"], "spawn, fork or forkserver"),
    (["--nproc-per-node", "0", "x"], '--nproc-per-node "0"'),
    (["--nprc-per-node", "2", "x"], 'did you mean "--nproc-per-node"'),
    (["--nproc_per_nodes=2", "x"], 'unknown flag "--nproc_per_nodes=2"; did you mean "--nproc_per_node"?'),
    (["--master_address", "10.0.0.1", "x"], 'did you mean "--master_addr"?'),
    (["--rdzv-backend", "etcd", "x"], "needs --rdzv-endpoint"),
    ([], "no program to run"),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:abc", "x"],
     '--rdzv-endpoint: endpoint "127.0.0.1:abc": the port "abc" is not a number'),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:99999", "x"],
     'endpoint "127.0.0.1:99999": the port "99999" is above 65535'),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1:29400", "x"], "'[' without ']'"),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:29400:1", "x"],
     '--rdzv-endpoint: endpoint "localhost:29400:1": more than one \':\' and not an IPv6 address'),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "http://localhost:29400", "x"],
     '"http://" is a URL scheme, which an endpoint does not take; drop it and give host:port: '
     'localhost:29400'),
    (["--rdzv-backend", "etcd", "--rdzv-endpoint", "http://localhost:2379", "x"],
     '"http://" is not taken; drop it and give host:port'),
])
def test_bad_flags(args, message):
    r = run_ccrun(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("ccrun: ")
    assert message in r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr


def test_bad_yaml_names_key_and_line(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("nproc_per_node: 2\nmax_restart: 1\nprogram: x\n")
    r = run_ccrun("--config", str(job))
    assert r.returncode == 2
    assert f"{job}:2: max_restart: unknown key" in r.stderr
    assert 'did you mean "max_restarts"' in r.stderr


def test_pet_variables_configure_ccrun():
    r = run_ccrun("--print-config", "--no-python", "x",
                  env={"PET_NPROC_PER_NODE": "3", "PET_MAX_RESTARTS": "2"})
    assert r.returncode == 0
    assert "nproc_per_node: 3" in r.stdout and "max_restarts: 2" in r.stdout


@pytest.mark.parametrize("text,message", [
    ("nproc_per_node: 2\nnproc_per_node: 3\nprogram: x\n",
     ":2: nproc_per_node: duplicate key (first on line 1)"),
    ("env:\n  A=B: 1\nprogram: x\n", ":2: env.A=B: a variable name cannot hold '='"),
    ("env:\n  '': 1\nprogram: x\n", ":2: env: an empty variable name"),
    ("nproc_per_node: [2]\nprogram: x\n", ":1: nproc_per_node: expected a single value, not a list"),
    ("rdzv_backend: c10d\nprogram: x\n",
     ":1: rdzv_backend: unknown key at the top; the rendezvous settings go under rdzv:, "
     "write rdzv: {backend: ...}"),
])
def test_bad_yaml_values(tmp_path, text, message):
    job = tmp_path / "job.yaml"
    job.write_text(text)
    r = run_ccrun("--config", str(job))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"ccrun: {job}") and message in r.stderr


def test_print_config_numbers_and_quotes():
    r = run_ccrun("--print-config", "--nnodes", "1:4", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", "h", "--no-python", "x")
    assert r.returncode == 0, r.stderr
    assert "\nmonitor_interval: 0.1\n" in r.stdout
    assert 'nnodes: "1:4"' in r.stdout


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_start_method_accepted(method):
    r = run_ccrun("--start_method", method, "--no-python", "true", timeout=60)
    assert r.returncode == 0, r.stderr


def test_master_port_0_picks_a_free_port():
    r = run_ccrun("--master-port", "0", "--no-python", "sh", "-c", "echo port=$MASTER_PORT", timeout=60)
    assert r.returncode == 0, r.stderr
    port = int(r.stdout.split("port=")[1].split()[0])
    assert 0 < port < 65536


def test_hostfile_in_print_config(tmp_path):
    hf = tmp_path / "hostfile"
    hf.write_text("# two nodes\nnode1 slots=4\n\nnode2  # nproc_per_node\n")
    r = run_ccrun("--hostfile", str(hf), "--nproc-per-node", "2", "--print-config", "--no-python", "x")
    assert r.returncode == 0, r.stderr
    assert "nnodes: 2\n" in r.stdout and "master_addr: node1\n" in r.stdout
    assert "- {host: node1, slots: 4}" in r.stdout and "- {host: node2, slots: 2}" in r.stdout
    r = run_ccrun("--hostfile", str(hf), "--include", "node1:0,9", "x")
    assert r.returncode == 2
    assert 'ccrun: --include "node1:0,9": host "node1" has slots 0 to 3; there is no slot 9' in r.stderr
    hf.write_text("node1 slots=4\nnode2 slots=two\n")
    r = run_ccrun("--hostfile", str(hf), "x")
    assert r.returncode == 2 and f"ccrun: {hf}:2:7: \"slots=two\"" in r.stderr


def slurm_env(node_id, nodes="2", nodelist="127.0.0.[1-2]"):
    """What srun sets for one task per node (a job step of job 777)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_"))}
    env.update({"SLURM_JOB_ID": "777", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": nodes,
                "SLURM_NNODES": nodes, "SLURM_NODEID": str(node_id), "SLURM_LOCALID": "0",
                "SLURM_PROCID": str(node_id), "SLURM_JOB_NODELIST": nodelist})
    return env


def test_slurm_print_config():
    env = slurm_env(2, nodes="4", nodelist="gpu[01-02,07],cpu3")
    r = subprocess.run(ccrun_cmd("--print-config", "--no-python", "x"), capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    for line in ("nnodes: 4\n", "node_rank: 2\n", "master_addr: gpu01\n", "id: 777\n"):
        assert line in r.stdout
    r = subprocess.run(ccrun_cmd("--print-config", "--node-rank", "0", "--no-python", "x"),
                       capture_output=True, text=True, env=env, timeout=60)
    assert "node_rank: 0\n" in r.stdout
    env["SLURM_JOB_NODELIST"] = "gpu[01-x]"
    r = subprocess.run(ccrun_cmd("--print-config", "--no-python", "x"), capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 2
    assert 'ccrun: SLURM_JOB_NODELIST "gpu[01-x]": column 8:' in r.stderr


def test_slurm_two_nodes_without_node_flags():
    """Two ccruns as srun would start them on two nodes (here both on loopback):
    no node flags, only SLURM_* variables and the port."""
    port = str(free_port())
    procs = [subprocess.Popen(ccrun_cmd("--master-port", port, "--no-python", "sh", "-c",
                                        "echo rank=$RANK of $WORLD_SIZE at $MASTER_ADDR "
                                        "id=$TORCHELASTIC_RUN_ID"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=slurm_env(i), start_new_session=True)
             for i in range(2)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, 9)
            raise
        assert p.returncode == 0, err
        outs.append(out)
    assert "rank=0 of 2 at 127.0.0.1 id=777" in outs[0]
    assert "rank=1 of 2 at 127.0.0.1 id=777" in outs[1]


@pytest.mark.parametrize("args,near", [
    (["status", "--jsn"], "--json"),
    (["top", "--onec"], "--once"),
    (["report", "--outptu", "x"], "--output"),
])
def test_a_subcommands_mistyped_flag_gets_did_you_mean(args, near):
    r = run_ccrun(*args, timeout=30)
    assert r.returncode == 2, r.stderr
    assert f'did you mean "{near}"?' in r.stderr, r.stderr
    assert f"see ccrun {args[0]} --help" in r.stderr, r.stderr
