"""ccrun's collectives library in real processes: launched by ccrun itself at
world sizes 2, 3, 4 and 8 (the group bootstraps from the agent's store), and
the tcp:// and file:// init methods with plain processes."""
import os
import subprocess

import pytest

from helpers import binary, free_port, run_ccrun


@pytest.mark.parametrize("nproc", [2, 3, 4, 8])
def test_every_op_under_ccrun(nproc):
    r = run_ccrun("--nproc-per-node", str(nproc), "--no-python",
                  binary("tests", "collectives_check"), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count(": ok") == nproc


def test_two_agents_two_nodes_of_two():
    port = str(free_port())
    procs = [subprocess.Popen(
        [binary("launcher", "ccrun"), "--nnodes", "2", "--node-rank", str(n), "--nproc-per-node",
         "2", "--master-port", port, "--no-python", binary("tests", "collectives_check")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert sum(out.count(": ok") for out, _ in outs) == 4


def run_plain(method, size=3):
    procs = []
    for rank in range(size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size))
        for k in ("CCRUN_STORE_ADDR", "CCRUN_STORE_PORT", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        procs.append(subprocess.Popen([binary("tests", "collectives_check"), method], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert ": ok" in out


def test_tcp_init_method():
    run_plain(f"tcp://127.0.0.1:{free_port()}")


def test_file_init_method(tmp_path):
    run_plain(f"file://{tmp_path}/store")
