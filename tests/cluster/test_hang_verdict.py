# ctest: RUN_SERIAL
"""A hang across two nodes of the namespace cluster: node 0's agent judges
the job from both nodes' published progress and names the rank on node 1
that holds the others up; node 1's agent reports its ranks' stacks, and
compares its ranks' NCCL flight records with node 0's."""
import os
import re

from cluster import wait_all
from helpers import binary
from test_scenarios import HERE, start_static


def hang_on_two_nodes(make_cluster, worker, timeout, *extra):
    """Runs `worker` on two nodes of two ranks under --hang-timeout; both agents end with 1:
    their stderr."""
    c = make_cluster(2)
    procs = start_static(c, worker, nproc=2, extra=("--hang-timeout", str(timeout), *extra))
    codes = wait_all(procs, 120)
    err0, err1 = procs[0].err(), procs[1].err()
    assert codes == [1, 1], err0[-3000:] + err1[-3000:]
    return err0, err1


def assert_verdict_in_time(err, timeout, verdict):
    """`verdict` (a pattern whose group 1 is the seconds it gives) is node 0's, in time: the
    ranks' progress is published with each heartbeat (0.5 s here), read by node 0 each second."""
    m = re.search(rf"the job is hung \(--hang-timeout {timeout}s\): {verdict}", err)
    assert m, err[-3000:]
    assert float(m.group(1)) <= timeout + 2, "the verdict came late"


def test_a_rank_on_another_node_is_named(make_cluster, tmp_path):
    timeout = 3
    worker = ["--no-python", binary("tests", "collectives_progress_worker"), "--steps", "40",
              "--sleep-rank", "3", "--sleep-before", "15", "--sleep-s", "300"]
    err0, err1 = hang_on_two_nodes(make_cluster, worker, timeout, "--log-dir", str(tmp_path))
    assert_verdict_in_time(err0, timeout, r"rank 3 has not issued all_reduce #15 of the world "
                           r"group \(1024 elements\), which ranks 0-2 have waited in for ([\d.]+)s")
    assert re.search(r"rank 3 \(host \S+, node 1, pid \d+\): not in a collective", err0)
    # Node 1 prints the job's stacks merged across both nodes: ranks 0-2 wait in the same
    # collective, on two nodes; node 0 says in a line what its ranks' are.
    assert re.findall(r"stacks of (ranks? [\d,\-]+(?: \(\d+\))? on nodes? [\d,\-]+)", err1) == \
        ["ranks 0-2 (3) on nodes 0,1", "rank 3 on node 1"], err1[-3000:]
    assert "ccrun: stacks of" not in err0, err0[-3000:]
    assert re.search(r"this node's ranks' stacks: ranks 0,1 \(2\) \(node 1 prints the job's", err0), \
        err0[-3000:]
    assert "did not come within" not in err1
    # ... and keeps them in its incident folder, beside its own ranks' stacks.
    [merged] = list(tmp_path.glob("*/incident_0/stacks/job_merged.txt"))
    assert (merged.parent / "rank_3.native.txt").exists()
    titles = [l for l in merged.read_text().splitlines() if " on node" in l]
    assert titles == ["ranks 0-2 (3) on nodes 0,1", "rank 3 on node 1"], merged.read_text()[-2000:]
    for err in (err0, err1):
        assert "cause     : hang" in err and re.search(r"rank      : 3 \(local_rank 1\)", err), err[-2000:]


def test_a_rank_on_another_node_behind_in_calls_that_return_once_queued_is_named(make_cluster):
    # NCCL's case across nodes (tests/tools/collectives_queued_worker.cpp): every rank's calls
    # return once queued, so no rank waits in one; rank 3, on node 1, never issues call #15.
    timeout = 3
    worker = ["--no-python", binary("tests", "collectives_queued_worker"), "--steps", "40",
              "--skip-rank", "3", "--skip-at", "15"]
    err0, err1 = hang_on_two_nodes(make_cluster, worker, timeout)
    assert_verdict_in_time(err0, timeout, r"rank 3 has not issued all_reduce #15 of the world "
                           r"group \(1024 elements\), which ranks 0-2 issued \(its last: #14\); "
                           r"no rank has progressed for ([\d.]+)s \(none waits in a call")
    for err in (err0, err1):
        assert "cause     : hang" in err and re.search(r"rank      : 3 \(local_rank 1\)", err), err[-2000:]


def test_four_nodes_stacks_are_printed_once_for_the_job(make_cluster):
    # 4 nodes of 2 ranks, rank 5 (node 2) behind: node 1 prints one block per class for the
    # whole job; nodes 0, 2 and 3 one line each about their own ranks.
    c = make_cluster(4)
    worker = ["--no-python", binary("tests", "collectives_progress_worker"), "--steps", "40",
              "--sleep-rank", "5", "--sleep-before", "15", "--sleep-s", "300"]
    procs = start_static(c, worker, nproc=2, extra=("--hang-timeout", "3"))
    codes = wait_all(procs, 120)
    errs = [p.err() for p in procs]
    assert codes == [1] * 4, "".join(e[-2000:] for e in errs)
    blocks = [re.findall(r"ccrun: stacks of (ranks? [\d,\-]+(?: \(\d+\))? on nodes? [\d,\-]+)", e)
              for e in errs]
    assert blocks == [[], ["ranks 0-4,6,7 (7) on nodes 0-3", "rank 5 on node 2"], [], []], errs[1][-3000:]
    # (rank 5's node: rank 4 waits, rank 5 sleeps)
    own = {0: "ranks 0,1 (2) (", 2: "rank 4; rank 5 (", 3: "ranks 6,7 (2) ("}
    for node, titles in own.items():
        assert "this node's ranks' stacks: " + titles in errs[node], errs[node][-3000:]
    assert "did not come within" not in errs[1]


def test_nccl_flight_records_are_compared_across_nodes(make_cluster):
    # torch's flight recorder needs a GPU: tests/integration/fake_flight_recorder.py plays it
    # (rank 0 issued all_reduce #21, rank 1 only #20). Each node dumps its own ranks; the
    # rank behind is on node 1, the one ahead on node 0: only the two compared say who is
    # behind. Node 0 dumps first (it judged the hang) and publishes its ranks' records; node 1
    # compares them with its own and says what they say, once for the job.
    c = make_cluster(2)
    fake = os.path.join(HERE, "..", "integration", "fake_flight_recorder.py")
    prog = (f"/usr/bin/python3 -I {fake} & exec {binary('tests', 'collectives_progress_worker')} "
            "--steps 40 --sleep-rank 1 --sleep-before 10 --sleep-s 300")
    procs = start_static(c, ["--no-python", "/bin/sh", "-c", prog], nproc=1,
                         extra=("--hang-timeout", "2"))
    codes = wait_all(procs, 120)
    err0, err1 = procs[0].err(), procs[1].err()
    assert codes == [1, 1], err0[-3000:] + err1[-3000:]
    behind = ("ccrun: NCCL flight recorder: rank 1 has not issued all_reduce #21 of group 0 "
              "(default_pg), which rank 0 issued (last issued: #20)")
    running = ("ccrun: NCCL flight recorder: rank 0: all_reduce #21 of group 0 (default_pg), "
               "256 Float, issued ")
    assert behind in err1 and running in err1, err1[-3000:]
    # Node 0's own findings are in its report; its console says who compares.
    assert running not in err0 and behind not in err0, err0[-3000:]
    assert "NCCL flight recorder: node 1 compares every rank's records" in err0, err0[-3000:]
    assert "did not come within" not in err1
