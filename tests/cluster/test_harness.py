# ctest: RUN_SERIAL
"""The cluster harness itself, with no ccrun involved: nodes reach each other,
netem adds delay, a cut link drops traffic, teardown leaves nothing."""
import os
import subprocess
import time

import pytest

from cluster import _ip


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
