"""`ccrun top` against real jobs on a ccrun-rendezvous, drawn in a real
terminal (tmux): every rank's row, the keys, the terminal restored after q
and Ctrl-C, --once, a job the store does not know, a store that stops
answering, a hang whose culprit is highlighted, and a job of two nodes. Every wait is for a
state on the screen, with a deadline."""
import os
import subprocess
import time

import pytest

from helpers import Tmux, binary, spawn_ccrun, start_daemon, top_rows as rows

FAST = "keep_alive_interval=0.3,keep_alive_max_attempt=3,last_call_timeout=1"
WORKER = ("tests", "collectives_progress_worker")

@pytest.fixture
def tmux_sessions():
    made = []

    def make(command):
        t = Tmux(command)
        made.append(t)
        return t
    yield make
    for t in made:
        t.close()




def agent(daemon, run_id, *worker_args, nproc=2, nnodes=1, extra=()):
    return spawn_ccrun("--nnodes", str(nnodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", f"127.0.0.1:{daemon.port}", "--rdzv-id", run_id,
                       "--rdzv-conf", FAST, "--stop-grace", "1", *extra, "--no-python",
                       binary(*WORKER), *worker_args)


def wait_running(daemon, run_id, timeout=60):
    """Polls `ccrun status` until the store knows the job as running: `top`
    is for a job that exists."""
    deadline = time.monotonic() + timeout
    r = None
    while time.monotonic() < deadline:
        r = subprocess.run([binary("launcher", "ccrun"), "status", "--rdzv-endpoint",
                            f"127.0.0.1:{daemon.port}", "--rdzv-id", run_id, "--json"],
                           capture_output=True, text=True, timeout=30)
        if '"state": "running"' in r.stdout:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {run_id} never running: {r.stdout if r else ''}")


def top_cmd(daemon, run_id, *extra):
    return [binary("launcher", "ccrun"), "top", "--rdzv-endpoint", f"127.0.0.1:{daemon.port}",
            "--rdzv-id", run_id, *extra]


def top_line(daemon, run_id, *extra):
    return " ".join(top_cmd(daemon, run_id, *extra))


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, 9)
    p.wait()


def restored(screen):
    """The shell's screen is back (the alternate screen left) in cooked mode."""
    return "TOP_EXIT=" in screen and " icanon " in screen and " echo " in screen


def test_every_rank_is_shown_live_the_sort_cycles_and_q_restores_the_terminal(tmux_sessions):
    with start_daemon("--host", "127.0.0.1") as d:
        job = agent(d, "top1", "--steps", "100000", "--step-ms", "20")
        try:
            wait_running(d, "top1")
            t = tmux_sessions(top_line(d, "top1"))
            screen = t.wait_for(lambda s: {"0", "1"} <= set(rows(s)) and
                                all(int(rows(s)[r][3]) > 0 for r in ("0", "1")),
                                "both ranks' rows with steps")
            assert "job 'top1'" in screen and "running" in screen
            assert "sorted by rank" in screen
            # Steps per second from two beats: above 0 once the counter moved between them.
            t.wait_for(lambda s: all(float(rows(s).get(r, ["0"] * 5)[4]) > 0 for r in ("0", "1")),
                       "steps per second for both ranks")
            t.keys("s")
            t.wait_for(lambda s: "sorted by step" in s, "the sort by step")
            t.keys("q")
            screen = t.wait_for(restored, "the terminal restored")
            assert "TOP_EXIT=0" in screen
            assert "sorted by" not in screen  # the frame was on the alternate screen
        finally:
            stop(job)


def test_a_watched_job_publishes_at_the_refresh_rate_between_its_heartbeats(tmux_sessions):
    """Heartbeats every 30 s: unwatched, a node's status changes at its first sample and then
    only with its beats. `top` holds a lease, so every node publishes each second: the steps
    on screen move at least three times well within one heartbeat."""
    slow = "keep_alive_interval=30,keep_alive_max_attempt=3,last_call_timeout=1"
    with start_daemon("--host", "127.0.0.1") as d:
        job = spawn_ccrun("--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", f"127.0.0.1:{d.port}", "--rdzv-id", "toplive",
                          "--rdzv-conf", slow, "--stop-grace", "1", "--no-python",
                          binary(*WORKER), "--steps", "100000", "--step-ms", "20")
        try:
            wait_running(d, "toplive")
            t = tmux_sessions(top_line(d, "toplive"))
            seen = set()

            def moved_three_times(screen):
                step = rows(screen).get("0", [None] * 4)[3]
                if step and step.isdigit() and int(step) > 0:
                    seen.add(int(step))
                return len(seen) >= 3
            t.wait_for(moved_three_times, "rank 0's step shown at three values", timeout=20)
            t.keys("q")
            t.wait_for(restored, "the terminal restored")
        finally:
            stop(job)


def test_once_prints_one_plain_frame_and_unknown_jobs_are_named(tmux_sessions):
    with start_daemon("--host", "127.0.0.1") as d:
        job = agent(d, "top2", "--steps", "100000", "--step-ms", "20")
        try:
            wait_running(d, "top2")
            deadline = time.monotonic() + 60
            while True:
                r = subprocess.run(top_cmd(d, "top2", "--once"), capture_output=True, text=True,
                                   timeout=30)
                assert r.returncode == 0, r.stderr
                if {"0", "1"} <= set(rows(r.stdout)) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert {"0", "1"} <= set(rows(r.stdout)), r.stdout
            assert "\x1b" not in r.stdout
            # Output that is not a terminal gets the same plain frame without --once.
            r = subprocess.run(top_cmd(d, "top2"), capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and "\x1b" not in r.stdout and "job 'top2'" in r.stdout
        finally:
            stop(job)
        r = subprocess.run(top_cmd(d, "nosuchjob", "--once"), capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 3
        assert "has no job 'nosuchjob'; check --rdzv-id" in r.stderr
        # In a terminal too: one line, no screen drawn, the terminal as it was.
        t = tmux_sessions(top_line(d, "nosuchjob"))
        screen = t.wait_for(restored, "top's exit")
        assert "TOP_EXIT=3" in screen and "has no job 'nosuchjob'" in screen
    r = subprocess.run([binary("launcher", "ccrun"), "top", "--rdzv-id", "x"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "rdzv-endpoint" in r.stderr


def test_a_store_that_stops_answering_is_said_and_q_names_it(tmux_sessions):
    d = start_daemon("--host", "127.0.0.1")
    job = agent(d, "top3", "--steps", "100000", "--step-ms", "20")
    try:
        wait_running(d, "top3")
        t = tmux_sessions(top_line(d, "top3", "--timeout", "1"))
        t.wait_for(lambda s: {"0", "1"} <= set(rows(s)), "both ranks' rows")
        d.stop()
        t.wait_for(lambda s: "the store stopped answering" in s, "the store's problem on screen")
        t.keys("q")
        screen = t.wait_for(restored, "the terminal restored")
        assert "TOP_EXIT=3" in screen
        assert f"the store at 127.0.0.1:{d.port} stopped answering" in screen
    finally:
        stop(job)
        d.stop()


def test_a_hang_shows_its_verdict_and_culprit_and_ctrl_c_restores_the_terminal(tmux_sessions):
    with start_daemon("--host", "127.0.0.1") as d:
        # Rank 1 sleeps before its 20th step: the others wait in all_reduce #20.
        job = agent(d, "top4", "--steps", "1000", "--step-ms", "20", "--sleep-rank", "1",
                    "--sleep-before", "20", "--sleep-s", "300",
                    extra=("--hang-timeout", "3", "--max-restarts", "0"))
        try:
            wait_running(d, "top4")
            t = tmux_sessions(top_line(d, "top4"))
            screen = t.wait_for(lambda s: "HUNG:" in s and "CULPRIT" in rows(s).get("1", []),
                                "the hang verdict with rank 1 as its culprit")
            assert "HUNG: rank 1 has not issued all_reduce #20" in screen
            assert "CULPRIT" not in " ".join(rows(screen)["0"])
            t.keys("C-c")
            screen = t.wait_for(restored, "the terminal restored")
            assert "TOP_EXIT=0" in screen
        finally:
            stop(job)


def test_a_two_node_job_shows_every_rank_with_its_node_then_the_culprit(tmux_sessions):
    """Two agents, nodes 0 and 1 of one job (on loopback), of 2 ranks each: every rank's row
    with its node, then rank 3, on node 1, as the hang's culprit."""
    with start_daemon("--host", "127.0.0.1") as d:
        args = ("--steps", "1000", "--step-ms", "20", "--sleep-rank", "3", "--sleep-before", "60",
                "--sleep-s", "300")
        extra = ("--hang-timeout", "3", "--max-restarts", "0")
        nodes = [agent(d, "top5", *args, nnodes=2, extra=extra) for _ in range(2)]
        try:
            wait_running(d, "top5")
            t = tmux_sessions(top_line(d, "top5"))
            screen = t.wait_for(lambda s: {"0", "1", "2", "3"} <= set(rows(s)) and
                                all(int(rows(s)[r][3]) > 0 for r in ("0", "1", "2", "3")),
                                "the four ranks' rows with steps")
            node_of = {r: rows(screen)[r][1] for r in ("0", "1", "2", "3")}
            assert node_of == {"0": "0", "1": "0", "2": "1", "3": "1"}, screen
            screen = t.wait_for(lambda s: "HUNG:" in s and "CULPRIT" in rows(s).get("3", []),
                                "the hang verdict with rank 3 as its culprit")
            assert "HUNG: rank 3 has not issued all_reduce #60" in screen, screen
            for r in ("0", "1", "2"):
                assert "CULPRIT" not in " ".join(rows(screen)[r])
            t.keys("q")
            t.wait_for(restored, "the terminal restored")
        finally:
            for n in nodes:
                stop(n)
