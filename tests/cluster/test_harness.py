# ctest: RUN_SERIAL
"""The cluster harness itself: nodes reach each other, netem adds delay, a cut link drops
traffic, teardown leaves nothing (no namespace, no process, no file of a killed agent's)."""
import os
import subprocess
import time

import pytest

from cluster import _ip
from helpers import binary


def ping(node, addr, wait="1"):
    return node.sh("ping", "-c", "1", "-W", wait, addr).returncode == 0


def test_nodes_reach_each_other(make_cluster):
    c = make_cluster(3)
    for a in c.nodes:
        for b in c.nodes:
            assert ping(a, b.addr), (a.ns, b.addr)


def test_latency_and_link_cut(make_cluster):
    c = make_cluster(2)
    a, b = c.nodes
    error = a.add_latency(100)
    if error is None:
        t0 = time.time()
        assert ping(b, a.addr, "3")
        assert time.time() - t0 >= 0.09
    a.link(False)
    assert not ping(b, a.addr)
    a.link(True)
    deadline = time.time() + 10
    while not ping(b, a.addr, "3") and time.time() < deadline:
        pass
    assert ping(b, a.addr, "3")
    if error is not None:
        pytest.skip(f"skipped the latency half: tc netem is unavailable here ({error})")


def test_teardown_removes_namespaces(make_cluster):
    c = make_cluster(2)
    names = list(c.namespaces)
    p = c.nodes[0].run(["sleep", "60"])
    c.teardown()
    listed = _ip("netns", "list").stdout
    assert all(n not in listed for n in names)
    assert p.popen.poll() is not None
    assert not os.path.exists(c.logdir)  # nor the commands' output files


def test_teardown_leaves_no_file_of_a_running_agent(make_cluster, tmp_path):
    # An agent killed by the teardown leaves its workers' progress records and its temporary
    # run folder to its janitor to remove; killing the janitor too left them behind.
    c = make_cluster(1)
    records, temp = tmp_path / "records", tmp_path / "temp"
    records.mkdir()
    temp.mkdir()
    p = c.nodes[0].run([binary("launcher", "ccrun"), "--nproc-per-node", "2", "--no-python",
                        "/bin/sh", "-c", "echo up; exec sleep 60"],
                       env={"CCRUN_PROGRESS_DIR": str(records), "TMPDIR": str(temp)})
    deadline = time.time() + 30
    while p.out().count("up") < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert p.out().count("up") == 2, p.err()
    assert os.listdir(records) and os.listdir(temp)  # what the teardown must not leave
    c.teardown()
    assert os.listdir(records) == [] and os.listdir(temp) == []
