"""The ccrun binary's own surface: --help, --version, --print-config of every
example in configs/, and bad flags or YAML (exit status 2, a clear message)."""
import glob
import os

import pytest

from helpers import run_ccrun

SOURCE = os.environ.get("CCRUN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_help_and_version():
    r = run_ccrun("--help")
    assert r.returncode == 0
    assert "--nproc-per-node,--nproc_per_node" in r.stdout and "Examples:" in r.stdout
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


@pytest.mark.parametrize("args,message", [
    (["--nnodes", "3:2", "x"], '--nnodes "3:2": min is larger than max'),
    (["--master-port", "70000", "x"], '--master-port "70000": must be between 1 and 65535'),
    (["--nproc-per-node", "0", "x"], '--nproc-per-node "0"'),
    (["--nprc-per-node", "2", "x"], 'did you mean "--nproc-per-node"'),
    (["--rdzv-backend", "c10d", "x"], "needs --rdzv-endpoint"),
    ([], "no program to run"),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:abc", "x"],
     '--rdzv-endpoint: endpoint "127.0.0.1:abc": the port "abc" is not a number'),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:99999", "x"],
     'endpoint "127.0.0.1:99999": the port "99999" is above 65535'),
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1:29400", "x"], "'[' without ']'"),
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
