"""Fixtures of the cluster tests: a fresh namespace cluster per test."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cluster import Cluster, cluster_unavailable  # noqa: E402


@pytest.fixture
def make_cluster():
    reason = cluster_unavailable()
    if reason:
        pytest.skip(f"skipped: cannot build a namespace cluster here: {reason}")
    made = []

    def make(n):
        c = Cluster(n)
        made.append(c)
        return c

    yield make
    for c in made:
        c.teardown()
