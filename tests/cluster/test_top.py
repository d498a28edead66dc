# ctest: RUN_SERIAL
"""`ccrun top` on the namespace cluster: a job of two nodes, each its own address and host
name, behind a ccrun-rendezvous on node 0; `top` runs in a real terminal (tmux) inside node 1's
namespace, so it reaches the store over the cluster's network as a user's machine would. Every
rank's row shows its own node and host, the steps move at the refresh rate though the nodes beat
every 30 s (the reader's lease), and then the hang's culprit on node 1 is highlighted."""
import time

from helpers import Tmux, binary, top_rows as rows
from test_chaos import start_daemon

SLOW_BEATS = "keep_alive_interval=30,keep_alive_max_attempt=3,join_timeout=60,last_call_timeout=1"




def test_top_in_another_namespace_shows_both_nodes_live_then_the_culprit(make_cluster):
    c = make_cluster(2)
    start_daemon(c.nodes[0])
    endpoint = f"{c.nodes[0].addr}:29400"
    worker = ["--no-python", binary("tests", "collectives_progress_worker"), "--steps", "100000",
              "--step-ms", "20", "--sleep-rank", "3", "--sleep-before", "1000", "--sleep-s", "300"]
    for node in c.nodes:
        node.run([binary("launcher", "ccrun"), "--nnodes", "2", "--nproc-per-node", "2",
                  "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "ctop",
                  "--rdzv-conf", SLOW_BEATS, "--stop-grace", "3", "--hang-timeout", "4",
                  "--max-restarts", "0", *worker], name=f"agent{node.index}")
    top = " ".join(["ip", "netns", "exec", c.nodes[1].ns, binary("launcher", "ccrun"), "top",
                    "--rdzv-endpoint", endpoint, "--rdzv-id", "ctop"])
    # The store may not know the job for a moment: top exits 3 then, and is started again.
    t = Tmux(f"until {top}; do sleep 0.5; done")
    try:
        screen = t.wait_for(lambda s: {"0", "1", "2", "3"} <= set(rows(s)) and
                            all(rows(s)[r][3].isdigit() and int(rows(s)[r][3]) > 0
                                for r in ("0", "1", "2", "3")),
                            "the four ranks' rows with steps", timeout=120)
        nodes = {r: rows(screen)[r][1:3] for r in ("0", "1", "2", "3")}
        assert nodes == {"0": ["0", "node0"], "1": ["0", "node0"], "2": ["1", "node1"],
                         "3": ["1", "node1"]}, screen
        # Live: rank 2's step (node 1) at three values well within one 30 s heartbeat.
        seen = set()

        def moved(s):
            step = rows(s).get("2", [None] * 4)[3]
            if step and step.isdigit():
                seen.add(int(step))
            return len(seen) >= 3
        t.wait_for(moved, "rank 2's step at three values", timeout=20)
        screen = t.wait_for(lambda s: "HUNG:" in s and "CULPRIT" in rows(s).get("3", []),
                            "the hang verdict with rank 3 as its culprit", timeout=120)
        assert "HUNG: rank 3 has not issued all_reduce #1000" in screen, screen
        t.keys("q")
        deadline = time.monotonic() + 30
        while "TOP_EXIT=" not in t.screen() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        t.close()
