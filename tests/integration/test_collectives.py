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
