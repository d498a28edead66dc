"""ccrun's collectives library launched by ccrun itself, at world sizes 1, 2, 3, 4
and 8 (the group bootstraps from the agent's store) and with two agents. The
tcp:// and file:// init methods and a dying rank are in
tests/collectives/test_processes.py."""
import subprocess

import pytest

from helpers import binary, free_port, run_ccrun


@pytest.mark.parametrize("nproc", [1, 2, 3, 4, 8])
def test_every_op_under_ccrun(nproc):
    r = run_ccrun("--standalone", "--nproc-per-node", str(nproc), "--no-python",
                  binary("tests", "collectives_check"), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("all operations correct") == nproc


def test_two_agents_two_nodes_of_two():
    port = str(free_port())
    procs = [subprocess.Popen(
        [binary("launcher", "ccrun"), "--nnodes", "2", "--node-rank", str(n), "--nproc-per-node",
         "2", "--master-port", port, "--no-python", binary("tests", "collectives_check")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert sum(out.count("of 4: all operations correct") for out, _ in outs) == 4


def test_a_token_protected_agent_store_serves_its_workers(tmp_path):
    # With CCRUN_STORE_TOKEN_FILE the agent's store asks for the secret; the
    # workers inherit the variable and present it (init_process_group opens
    # the store through open_store, which reads it).
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--no-python",
                  binary("tests", "collectives_check"), timeout=180,
                  env={"CCRUN_STORE_TOKEN_FILE": str(token)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("all operations correct") == 2


def test_an_empty_token_file_is_named(tmp_path):
    token = tmp_path / "token"
    token.write_text("")
    r = run_ccrun("--standalone", "--no-python", "true", timeout=60,
                  env={"CCRUN_STORE_TOKEN_FILE": str(token)})
    assert r.returncode != 0
    assert f'CCRUN_STORE_TOKEN_FILE "{token}": the file is empty' in r.stderr, r.stderr
