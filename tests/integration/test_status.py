"""`ccrun status` against real jobs on a ccrun-rendezvous: unknown, forming,
running, restarting, failed and finished, through the real binaries."""
import json
import subprocess
import time

from helpers import binary, spawn_ccrun, start_daemon

FAST = "keep_alive_interval=0.3,keep_alive_max_attempt=3,last_call_timeout=1"


def status(daemon, run_id, *extra):
    start = time.time()
    r = subprocess.run([binary("launcher", "ccrun"), "status", "--rdzv-endpoint",
                        f"127.0.0.1:{daemon.port}", "--rdzv-id", run_id, *extra],
                       capture_output=True, text=True, timeout=10)
    return r, time.time() - start


def status_json(daemon, run_id):
    r, _ = status(daemon, run_id, "--json")
    return r.returncode, json.loads(r.stdout)


def wait_state(daemon, run_id, state, timeout=30, until=lambda st: True):
    """Polls `ccrun status` until the job is in `state` and `until(st)` holds
    (a job is "running" once its round closed; its nodes' first heartbeats,
    which fill the node table, come a moment later)."""
    deadline = time.time() + timeout
    st = {}
    while time.time() < deadline:
        rc, st = status_json(daemon, run_id)
        if st.get("state") == state and until(st):
            return rc, st
        time.sleep(0.1)
    raise AssertionError(f"never {state}: last {st}")


def agent(daemon, run_id, program, nproc=2, restarts=0, grace=3):
    return spawn_ccrun("--nnodes", "2", "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", f"127.0.0.1:{daemon.port}", "--rdzv-id", run_id,
                       "--rdzv-conf", FAST, "--max-restarts", str(restarts), "--stop-grace",
                       str(grace), "--no-python", "/bin/sh", "-c", program)


def test_unknown_job_and_bad_usage():
    with start_daemon("--host", "127.0.0.1") as d:
        r, took = status(d, "nosuchjob")
        assert r.returncode == 3
        assert "has no job 'nosuchjob'" in r.stderr
        assert took < 5.0  # no wait for a job that never comes (a bound for a loaded machine)
    r = subprocess.run([binary("launcher", "ccrun"), "status", "--rdzv-id", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "rdzv-endpoint" in r.stderr


def test_a_program_named_status_still_runs(tmp_path):
    prog = tmp_path / "status"
    prog.write_text("#!/bin/sh\necho I am a program named status\n")
    prog.chmod(0o755)
    r = subprocess.run([binary("launcher", "ccrun"), "--standalone", "--no-python", "--",
                        str(prog)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "I am a program named status" in r.stdout


def test_forming_running_restarting_failed(tmp_path):
    fail = tmp_path / "fail"  # rank 0 of the first attempt fails once the test made this file
    with start_daemon("--host", "127.0.0.1") as d:
        # The second node's workers ignore SIGTERM: its stop lasts the grace
        # period, long enough to see the job restarting.
        first = agent(d, "st1", 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; '
                                f'then while [ ! -e {fail} ]; do sleep 0.05; done; exit 3; fi; '
                                'sleep 30', restarts=1)
        rc, st = wait_state(d, "st1", "forming")
        assert rc == 0 and st["joined"] == 1
        second = agent(d, "st1", 'trap "" TERM; sleep 30', restarts=1)
        rc, st = wait_state(d, "st1", "running", until=lambda st: st.get("world_size") == 4)
        assert rc == 0
        assert st["num_nodes"] == 2 and st["world_size"] == 4 and st["attempt"] == 0
        nodes = sorted(st["nodes"], key=lambda n: n["node_rank"])
        assert [n["first_rank"] for n in nodes] == [0, 2]
        assert all(n["addr"] == "127.0.0.1" and n["heartbeat_age_s"] < 5 for n in nodes)
        r, took = status(d, "st1")
        assert "running" in r.stdout and "last heartbeat" in r.stdout
        # It reads the store and answers, waiting for nothing: the bound catches a wait on a
        # key or a timeout, not slowness (process start-up on a loaded 2-core machine running
        # the suite's heavier tests, or a sanitizer build, takes seconds).
        assert took < 5.0
        fail.touch()
        rc, st = wait_state(d, "st1", "restarting")
        assert rc == 0 and st["last_failure"]["exit_code"] == 3
        # The second attempt fails for good when the first node is stopped.
        rc, st = wait_state(d, "st1", "running", until=lambda st: st.get("attempt") == 1)
        assert st["attempt"] == 1
        first.terminate()
        rc, st = wait_state(d, "st1", "stopped")
        assert rc == 1 and "SIGTERM" in st["reason"]
        for p in (first, second):
            p.kill()
            p.wait()


def test_finished_and_failed():
    with start_daemon("--host", "127.0.0.1") as d:
        ps = [agent(d, "ok", "true", nproc=1) for _ in range(2)]
        for p in ps:
            p.communicate(timeout=60)
        rc, st = status_json(d, "ok")
        assert rc == 0 and st["state"] == "finished"
        ps = [agent(d, "bad", 'exit $RANK', nproc=1) for _ in range(2)]
        for p in ps:
            p.communicate(timeout=60)
        r, _ = status(d, "bad")
        assert r.returncode == 1
        assert "failed" in r.stdout and "last failure: node" in r.stdout and "exit code 1" in r.stdout
        # Its rows are the last heartbeats, said as such, not shown as live.
        assert "the job is over: the rows below are its nodes' and ranks' last heartbeats" in r.stdout


def test_a_standalone_job_says_how_to_see_it():
    # Its run id and its store's port are random: the line is ready to paste.
    import re
    import shlex
    from helpers import read_stderr_until
    p = spawn_ccrun("--standalone", "--nproc-per-node", "1", "--no-python", "/bin/sleep", "30")
    try:
        seen = read_stderr_until(p, "to see it: ccrun status")
        m = re.search(r"to see it: (ccrun status .*)$", seen, re.M)
        args = shlex.split(m.group(1))[1:]
        deadline = time.time() + 30
        while True:
            r = subprocess.run([binary("launcher", "ccrun"), *args, "--json"], capture_output=True,
                               text=True, timeout=30)
            state = json.loads(r.stdout).get("state") if r.stdout.strip() else None
            if state == "running" or time.time() > deadline:
                break
            time.sleep(0.2)
        assert state == "running", (r.stdout, r.stderr)
    finally:
        p.kill()
        p.wait()


def test_top_and_status_show_the_same_ranks_of_a_program_that_reports_nothing():
    # Three shell workers (no hook, no progress calls), default keep-alive: the ranks are written
    # at the attempt's first progress sample, not a heartbeat later, and both readers list them.
    with start_daemon("--host", "127.0.0.1") as d:
        p = spawn_ccrun("--nnodes", "1", "--nproc-per-node", "3", "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", f"127.0.0.1:{d.port}", "--rdzv-id", "quiet",
                        "--no-python", "/bin/sh", "-c", "sleep 60")
        try:
            _, st = wait_state(d, "quiet", "running", until=lambda st: len(st.get("ranks", [])) == 3)
            assert {r["startup_summary"] for r in st["ranks"]} == {"running"}, st
            top = subprocess.run([binary("launcher", "ccrun"), "top", "--once", "--rdzv-endpoint",
                                  f"127.0.0.1:{d.port}", "--rdzv-id", "quiet"],
                                 capture_output=True, text=True, timeout=30)
            assert top.returncode == 0, top.stderr
            rows = [l.split()[0] for l in top.stdout.splitlines()[2:] if l.strip()]
            assert sorted(rows) == sorted(str(r["rank"]) for r in st["ranks"]), top.stdout
        finally:
            p.kill()
            p.communicate(timeout=30)
