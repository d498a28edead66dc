# ctest: LABELS torch
"""ccrun end to end on one machine: worker environment, restarts, failure
reports, signals, logs, and a real PyTorch gloo job. Every test runs the real
binary; two agents on one machine stand for two nodes."""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import (build_dir, ccrun_cmd, communicate_all, free_port, parse_env_lines, run_ccrun,
                     spawn_ccrun)

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable  # Debian's python3, with torch
PRINT_ENV = os.path.join(HERE, "print_env.py")


def two_nodes(nnodes_args, progs, timeout=120, env=None):
    """Starts one ccrun per entry of progs (list of extra args), returns outputs."""
    procs = [spawn_ccrun(*nnodes_args, *p, env=env) for p in progs]
    return communicate_all(procs, timeout, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))


def test_env_one_node_four_workers():
    port = str(free_port())
    r = run_ccrun("--master-port", port, "--nproc-per-node", "4", "--no-python", PY, PRINT_ENV,
                  env={"EXTRA": "x", "OMP_NUM_THREADS": ""})
    assert r.returncode == 0, r.stderr
    envs = parse_env_lines(r.stdout)
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, e in envs.items():
        assert e["LOCAL_RANK"] == str(rank)
        assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "4"
        assert e["GROUP_RANK"] == "0" and e["GROUP_WORLD_SIZE"] == "1"
        assert e["ROLE_RANK"] == str(rank) and e["ROLE_NAME"] == "default"
        assert e["MASTER_ADDR"] == "127.0.0.1" and e["MASTER_PORT"] == port
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert e["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        # No --log-dir: the temporary run's flat layout (agent/run_logs.h).
        assert e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/error_{rank}.json")
        assert e["EXTRA"] == "x"
    # Every console line carries its rank's prefix.
    for line in r.stdout.splitlines():
        assert line.startswith("["), line


def test_env_two_nodes_of_three_static():
    port = str(free_port())
    outs = two_nodes(["--nnodes", "2", "--nproc-per-node", "3", "--master-port", port],
                     [["--node-rank", str(n), "--no-python", PY, PRINT_ENV] for n in (0, 1)])
    envs = {}
    for rc, out, err in outs:
        assert rc == 0, err
        envs.update(parse_env_lines(out))
    assert sorted(envs) == list(range(6))
    for rank, e in envs.items():
        assert e["GROUP_RANK"] == str(rank // 3) and e["LOCAL_RANK"] == str(rank % 3)
        assert e["WORLD_SIZE"] == "6" and e["GROUP_WORLD_SIZE"] == "2"
        assert e["MASTER_PORT"] == port


def test_env_heterogeneous_nodes_dynamic():
    port = str(free_port())
    common = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "hetero"]
    outs = two_nodes(common, [["--nproc-per-node", "1", "--no-python", PY, PRINT_ENV],
                              ["--nproc-per-node", "3", "--no-python", PY, PRINT_ENV]])
    envs = {}
    for rc, out, err in outs:
        assert rc == 0, err
        envs.update(parse_env_lines(out))
    assert sorted(envs) == [0, 1, 2, 3]
    assert all(e["WORLD_SIZE"] == "4" for e in envs.values())
    sizes = sorted(e["LOCAL_WORLD_SIZE"] for e in envs.values())
    assert sizes == ["1", "3", "3", "3"]
    # Global ranks are contiguous per node.
    by_node = {}
    for rank, e in envs.items():
        by_node.setdefault(e["GROUP_RANK"], []).append(rank)
    for ranks in by_node.values():
        assert sorted(ranks) == list(range(min(ranks), max(ranks) + 1))
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 1
    # torch 2.x: the rank-0 agent serves the workers' store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE).
    assert all(e["TORCHELASTIC_USE_AGENT_STORE"] == "True" for e in envs.values())


CRASH = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then '
         'echo "rank 1 is failing" >&2; exit 3; fi; echo "attempt $TORCHELASTIC_RESTART_COUNT ok"')


def test_crash_with_a_restart_left_succeeds():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--max-restarts", "1", "--no-python", "/bin/sh", "-c", CRASH)
    assert r.returncode == 0, r.stderr
    assert "[0]:attempt 1 ok" in r.stdout and "[1]:attempt 1 ok" in r.stdout
    assert "[1]:attempt 0 ok" not in r.stdout  # rank 1 failed in attempt 0


def test_crash_without_restarts_reports_root_cause(tmp_path):
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--log-dir", str(tmp_path), "--rdzv-id", "crashjob",
                  "--no-python", "/bin/sh", "-c", CRASH + "; sleep 30")
    assert r.returncode == 1
    assert "Root cause" in r.stderr
    assert "rank      : 1 (local_rank 1)" in r.stderr
    assert "exit code 3" in r.stderr
    assert "rank 1 is failing" in r.stderr
    # One directory per run: <log-dir>/<run_id>_<random>/.
    runs = list(tmp_path.glob("crashjob_*"))
    assert len(runs) == 1, runs
    report = json.loads((runs[0] / "failure_report.json").read_text())
    assert report["root_cause"]["rank"] == 1 and report["root_cause"]["exit_code"] == 3
    assert report["reason"].startswith("no restarts left")
    # Per attempt and rank log files.
    assert (runs[0] / "attempt_0" / "1" / "stderr.log").read_text() == "rank 1 is failing\n"
    assert "give --log-dir DIR to keep" not in r.stderr
    # The attempt's incident folder: the failure records and every rank's last lines.
    incident = runs[0] / "incident_0"
    assert f"incident: {incident}" in r.stderr
    assert json.loads((incident / "verdict.json").read_text())["failures"][0]["rank"] == 1
    assert "rank 1 is failing" in (incident / "logs" / "rank_1.log").read_text()


def test_without_log_dir_a_failure_says_the_report_is_all_that_is_kept():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "1",
                  "--no-python", "/bin/sh", "-c", "exit 3")
    assert r.returncode == 1 and "Root cause" in r.stderr
    assert ("this report is all that is kept; give --log-dir DIR to keep every rank's output, "
            "error files and failure_report.json") in r.stderr


def test_sigsegv_is_named_in_the_report():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c",
                  'if [ "$RANK" = 1 ]; then kill -SEGV $$; fi; sleep 30')
    assert r.returncode == 1
    assert "SIGSEGV" in r.stderr


def signal_two_workers_once_up(script, sig, *flags):
    """Runs `script` as 2 workers; once both printed "up", sends `sig` to
    ccrun and waits for it to end. Returns its exit status and stderr."""
    p = spawn_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", *flags,
                    "--no-python", "/bin/sh", "-c", script)
    deadline = time.time() + 30
    seen = ""
    while seen.count("up") < 2 and time.time() < deadline:
        seen += p.stdout.readline()
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    return p.returncode, err


def test_sigterm_to_ccrun_stops_workers_and_exits_143(tmp_path):
    marker = tmp_path / "got"
    script = (f'trap "echo $RANK >> {marker}; exit 0" TERM; echo up; '
              'while true; do sleep 0.05; done')
    rc, err = signal_two_workers_once_up(script, signal.SIGTERM)
    assert rc == 143, err
    assert sorted(marker.read_text().split()) == ["0", "1"]


def test_a_worker_that_ignores_sigterm_is_named_when_stop_grace_runs_out():
    # Rank 1 ignores SIGTERM; rank 0 stops at once.
    script = ('[ "$RANK" = 1 ] && trap "" TERM; echo up; '
              'while true; do sleep 0.05; done')
    rc, err = signal_two_workers_once_up(script, signal.SIGTERM, "--stop-grace", "1")
    assert rc == 143, err
    assert re.search(r"rank 1 \(pid \d+\) still running 1\.0s after SIGTERM \(--stop-grace\); "
                     r"killing with SIGKILL", err), err
    [line] = [l for l in err.splitlines() if "still running" in l]
    assert "rank 0" not in line, err


def test_background_processes_a_worker_left_are_killed_and_said():
    # One in the worker's process group, one in a session of its own (it waits for the setsid).
    script = ('sleep 300 & echo bg=$!; setsid sleep 301 & '
              'while [ "$(cut -d" " -f6 /proc/$!/stat)" != "$!" ]; do sleep 0.01; done; exit 0')
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "1", "--no-python",
                  "/bin/sh", "-c", script)
    assert r.returncode == 0, r.stderr
    assert re.search(r"rank 0 \(pid \d+\) exited and left 2 processes running \(background "
                     r"jobs it started, 1 outside its process group\); ccrun killed them",
                     r.stderr), r.stderr
    bg = int(r.stdout.split("bg=")[1].split()[0])
    assert not os.path.exists(f"/proc/{bg}") or open(f"/proc/{bg}/stat").read().split()[2] == "Z"


def test_a_child_that_had_exited_unwaited_is_not_said_to_be_left_running(tmp_path):
    # os.popen's shell has exited (its output was read to the end) but nobody waited for it: a
    # zombie in the worker's group when the worker exits, nothing left running, nothing killed.
    prog = tmp_path / "popen.py"
    prog.write_text("import os\nprint('rank', os.popen('echo $RANK').read().strip())\n")
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", str(prog),
                  env={"PYTHON_EXEC": "/usr/bin/python3"})
    assert r.returncode == 0, r.stderr
    assert "rank 0" in r.stdout and "rank 1" in r.stdout, r.stdout
    assert "left" not in r.stderr and "killed" not in r.stderr, r.stderr


def test_sigint_reaches_the_workers_once_and_no_sigterm_cuts_their_cleanup_short(tmp_path):
    # As torchrun: the signal ccrun got goes to the workers once, SIGKILL only
    # after --stop-grace. A worker saving a checkpoint on SIGINT
    # (KeyboardInterrupt) is not cut short by a SIGTERM right behind it.
    marker = tmp_path / "got"
    script = (f"trap 'stop=1' INT; trap 'echo term $RANK >> {marker}' TERM; echo up; "
              'while [ -z "$stop" ]; do sleep 0.05; done; '
              f"sleep 0.5; echo saved $RANK >> {marker}")
    rc, err = signal_two_workers_once_up(script, signal.SIGINT, "--stop-grace", "10")
    assert rc == 130, err
    assert sorted(marker.read_text().splitlines()) == ["saved 0", "saved 1"]


def pids_in_session(sid):
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    pids.append(int(d))
            except (OSError, IndexError):
                pass
    return pids


def test_sigkill_to_ccrun_leaves_no_worker(tmp_path):
    p = spawn_ccrun("--master-port", str(free_port()), "--nproc-per-node", "3", "--no-python", "/bin/sh", "-c", "echo up; sleep 60")
    seen = ""
    deadline = time.time() + 30
    while seen.count("up") < 3 and time.time() < deadline:
        seen += p.stdout.readline()
    sid = p.pid  # start_new_session: the session id is ccrun's pid
    assert len(pids_in_session(sid)) >= 4
    p.kill()
    p.wait()
    deadline = time.time() + 10
    while pids_in_session(sid) and time.time() < deadline:
        time.sleep(0.05)
    assert pids_in_session(sid) == []


def test_local_ranks_filter_and_line_integrity():
    script = 'i=0; while [ $i -lt 200 ]; do echo "rank-$RANK-line-$i-xxxxxxxxxxxxxxxxxxxxxxxx"; i=$((i+1)); done'
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "3", "--local-ranks-filter", "0,2", "--no-python",
                  "/bin/sh", "-c", script)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 400
    for line in lines:
        prefix, rest = line.split(":", 1)
        rank = prefix.strip("[]")
        assert rank in ("0", "2")
        assert rest.startswith(f"rank-{rank}-line-") and rest.endswith("x" * 24)


# Busy ranks (a write every 2 ms) are read on the agent's shared output tick, a quiet one at each
# write: a burst, a pause long enough for the stream to leave the tick, another burst, and a last
# line without its newline just before the exit.
BUSY_THEN_QUIET = """
import os, sys, time
rank = os.environ["RANK"]
for burst in range(2):
    for i in range(300):
        sys.stdout.write(f"r{rank}-b{burst}-{i}\\n"); sys.stdout.flush()
        time.sleep(0.002)
    time.sleep(0.3)
sys.stdout.write(f"r{rank}-last"); sys.stdout.flush()
"""


def test_busy_ranks_lose_no_line_and_keep_their_order():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "4", "--no-python", PY, "-c",
                  BUSY_THEN_QUIET, timeout=120)
    assert r.returncode == 0, r.stderr
    by_rank = {}
    for line in r.stdout.splitlines():
        prefix, rest = line.split(":", 1)
        by_rank.setdefault(prefix, []).append(rest)
    for rank in range(4):
        want = [f"r{rank}-b{b}-{i}" for b in range(2) for i in range(300)] + [f"r{rank}-last"]
        assert by_rank[f"[{rank}]"] == want


# Each attempt: rank 0 counts the agent's open descriptors first, then both ranks print busily (their
# streams go to the output tick); rank 0 then fails, for a restart (rank 1 ends well, or is stopped).
BUSY_THEN_FAIL = """
import os, sys, time
if os.environ["RANK"] == "0":
    fds = len(os.listdir(f"/proc/{os.getppid()}/fd"))
    print(f"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']} agent fds {fds}", flush=True)
for i in range(200):
    sys.stdout.write(f"line {i}\\n"); sys.stdout.flush()
    time.sleep(0.002)
sys.exit(1 if os.environ["RANK"] == "0" else 0)
"""


def test_an_agent_keeps_its_descriptors_over_restarts_of_busy_workers():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--max-restarts", "2",
                  "--no-python", PY, "-c", BUSY_THEN_FAIL, timeout=120)
    assert r.returncode == 1, r.stderr
    counts = [int(l.rsplit(" ", 1)[1]) for l in r.stdout.splitlines() if " agent fds " in l]
    assert len(counts) == 3, r.stdout[-2000:]
    assert len(set(counts[1:])) == 1, counts  # none leaked, none closed twice
    assert r.stdout.count("[0]:line 199") == 3, r.stdout[-2000:]


# A progress bar: each redraw ends in '\r', the bar's last state in '\n'. The worker waits, after
# its first redraw, until the test has seen that redraw on ccrun's stdout.
PROGRESS_BAR = """
import os, sys, time
sys.stdout.write("10%\\r"); sys.stdout.flush()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
sys.stdout.write("20%\\r100%\\n"); sys.stdout.flush()
"""


def test_a_progress_bar_reaches_the_console_as_it_is_drawn(tmp_path):
    go = tmp_path / "go"
    # Bytes, not text: text mode would read each '\r' as a line end.
    p = subprocess.Popen(ccrun_cmd("--master-port", str(free_port()), "--nproc-per-node", "1",
                                   "--no-python", PY, "-c", PROGRESS_BAR, str(go)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        seen = b""
        deadline = time.monotonic() + 60
        while b"[0]:10%\r" not in seen:  # the first redraw, before its line is done
            assert time.monotonic() < deadline and p.poll() is None, seen
            chunk = os.read(p.stdout.fileno(), 4096)
            assert chunk, seen
            seen += chunk
        go.touch()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, err
    # Each redraw keeps the rank's prefix; the line is not written a second time at its '\n'.
    assert seen + out == b"[0]:10%\r[0]:20%\r[0]:100%\n"


def read_until(p, seen, wanted, what):
    """Reads ccrun's stdout (bytes) until `wanted` is in it; returns what was read."""
    deadline = time.monotonic() + 60
    while wanted not in seen:
        assert time.monotonic() < deadline and p.poll() is None, (what, seen)
        chunk = os.read(p.stdout.fileno(), 4096)
        assert chunk, (what, seen)
        seen += chunk
    return seen


# A line written in parts, each part waiting for the test to have seen the one before on ccrun's
# stdout: a prompt-like part, then tqdm's way of drawing (each state after a '\r', none ending in
# one), then the line's end.
PARTS = """
import os, sys, time
def part(text, name):
    sys.stdout.write(text); sys.stdout.flush()
    while not os.path.exists(os.path.join(sys.argv[1], name)):
        time.sleep(0.02)
part("loading model... ", "a")
part("done", "b")
part("\\r0/2", "c")
part("\\r1/2", "d")
part("\\r2/2\\n", "e")
"""


def test_parts_of_a_line_reach_the_console_as_they_are_written(tmp_path):
    p = subprocess.Popen(ccrun_cmd("--master-port", str(free_port()), "--nproc-per-node", "1",
                                   "--no-python", PY, "-c", PARTS, str(tmp_path)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        seen = b""
        for wanted, name in ((b"[0]:loading model... ", "a"), (b"done", "b"), (b"0/2", "c"),
                             (b"1/2", "d")):
            seen = read_until(p, seen, wanted, name)  # shown before the worker writes more
            (tmp_path / name).touch()
        (tmp_path / "e").touch()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, err
    # One prefix for the line's start and one for each redraw; nothing written twice.
    assert seen + out == b"[0]:loading model... done\r[0]:0/2\r[0]:1/2\r[0]:2/2\n", seen + out


@pytest.mark.parametrize("conf", [
    "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",  # quotes kept: no shell (torchrun's tests)
    "--rdzv_conf=timeout=5",
])
def test_torchrun_rdzv_conf_spellings(conf):
    r = run_ccrun(conf, "--standalone", "--nproc-per-node", "2", "--no-python", "/bin/true", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr


def test_unknown_rdzv_conf_key_is_a_warning():
    r = run_ccrun("--rdzv-conf", "join_timeout=5,no_such_key=1", "--standalone", "--nproc-per-node", "1",
                  "--no-python", "/bin/true", timeout=60)
    assert r.returncode == 0, r.stderr
    assert 'ccrun: warning: --rdzv-conf no_such_key: unknown rendezvous setting "no_such_key"' in r.stderr
    assert "known: join_timeout, " in r.stderr


def test_a_missing_program_is_reported():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "1", "--no-python", "/nonexistent/trainer")
    assert r.returncode == 1
    assert 'cannot execute "/nonexistent/trainer"' in r.stderr


def test_torch_gloo_two_nodes_two_workers_restarted_once():
    port = str(free_port())
    script = os.path.join(HERE, "torch_allreduce.py")
    env = {"PYTHON_EXEC": PY}
    outs = two_nodes(
        ["--nnodes", "2", "--nproc-per-node", "2", "--master-port", port, "--max-restarts", "1"],
        [["--node-rank", str(n), script, "--fail-rank", "3"] for n in (0, 1)],
        timeout=240, env=env)
    results = []
    for rc, out, err in outs:
        assert rc == 0, err[-3000:]
        results += [l for l in out.splitlines() if "RESULT" in l]
    assert len(results) == 4
    for line in results:
        assert "world=4" in line and "attempt=1" in line and "sum=10.0" in line and "ok=True" in line


def test_an_ipv6_store_endpoint_is_hosted_and_serves_the_workers():
    import socket
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
    except OSError:
        pytest.skip("skipped: no IPv6 loopback (::1) on this machine")
    port = s.getsockname()[1]
    s.close()
    from helpers import binary
    r = run_ccrun("--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", f"[::1]:{port}", "--rdzv-id", "v6", "--no-python",
                  binary("tests", "collectives_check"), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("all operations correct") == 2
    assert "master [::1]:" in r.stderr


@pytest.mark.skipif(bool(os.environ.get("CCRUN_SANITIZED")),
                    reason="a sanitizer's runtime and shadow memory are most of the RSS")
def test_a_one_worker_launch_stays_under_7_mib_resident(tmp_path):
    # The launcher's peak resident set for a plain launch stays under its
    # 7 MiB target (bench-launch.sh measures the same with /usr/bin/time). The
    # lowest of 7 runs: a run can touch a few pages more (runs of one binary
    # spread over 250 KiB on a loaded machine), a regression (a library
    # linked back in: libcrypto was +3 MiB) moves them all.
    peaks = []
    for _ in range(7):
        # /usr/bin/time (Debian's time, as bench-launch.sh uses): a child
        # forked from this Python would carry Python's resident set into
        # its maximum.
        out = tmp_path / "maxrss"
        r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(out),
                            *ccrun_cmd("--nproc-per-node", "1", "--master-port", str(free_port()),
                                       "--no-python", "/bin/true")],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        peaks.append(int(out.read_text().split()[-1]))  # KiB
    assert min(peaks) <= 7 * 1024, f"launcher peak RSS {peaks} KiB, the target is 7168"


@pytest.mark.parametrize("nodes", [1, 2], ids=["one_node", "two_nodes"])
def test_a_restarted_static_job_finds_no_key_of_the_attempt_before(nodes):
    # torch 2.x's workers meet in MASTER_PORT's store with no per-attempt prefix.
    port = str(free_port())
    script = os.path.join(HERE, "stale_keys.py")
    common = ["--nnodes", str(nodes), "--nproc-per-node", "2", "--master-port", port,
              "--max-restarts", "1"]
    outs = two_nodes(common, [["--node-rank", str(n), script] for n in range(nodes)],
                     timeout=120, env={"PYTHON_EXEC": PY})
    found = {}
    for rc, out, err in outs:
        assert rc == 0, err[-3000:]
        for line in out.splitlines():
            if "LEFTOVER" in line:
                _, rank, count = line.split()[-3:]
                found[int(rank)] = int(count)
    assert found == {r: 0 for r in range(2 * nodes)}


def test_restarts_that_fail_at_the_same_step_stop_with_the_do_not_requeue_status(tmp_path):
    # Every attempt fails before its first step (an import error's pattern); the stop is asked for.
    script = tmp_path / "fails_at_start.py"
    script.write_text("import sys\nprint('attempt', flush=True)\nsys.exit(3)\n")
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--max-restarts",
                  "10", "--stop-without-progress", "4", str(script), env={"PYTHON_EXEC": PY},
                  timeout=120)
    assert r.returncode == 4, r.stderr[-3000:]
    assert "reason    : 4 attempts in a row failed at step 0 with the same error: restarts do not " \
           "help (--stop-without-progress 4; exit 4: do not requeue)" in r.stderr, r.stderr[-3000:]
    assert re.search(r"failed \(exit 4\) after [\d.]+s: 4 attempt\(s\)", r.stderr), r.stderr


def test_max_restarts_are_torchruns_a_script_that_fails_at_start_up_5_times_then_works(tmp_path):
    # A data server not up yet: the first 5 attempts fail at start-up alike, the 6th works. torchrun
    # with --max-restarts 6 runs it to success; so does ccrun, with no stop of its own by default.
    script = tmp_path / "waits_for_its_server.py"
    script.write_text("import os, sys\n"
                      "attempt = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
                      "print('attempt', attempt, flush=True)\n"
                      "if attempt < 5:\n"
                      "    sys.exit('ConnectionRefusedError: the data server is not up')\n")
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--max-restarts",
                  "6", str(script), env={"PYTHON_EXEC": PY}, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"succeeded \(exit 0\) after [\d.]+s: 6 attempt\(s\)", r.stderr), r.stderr
    # A failing attempt's other rank may be stopped before it prints; the last one's both print.
    assert "[0]:attempt 5\n" in r.stdout and "[1]:attempt 5\n" in r.stdout, r.stdout


def test_restarts_spent_on_one_failure_say_so_and_name_the_stop_that_would_have_saved_them(tmp_path):
    script = tmp_path / "fails_at_start.py"
    script.write_text("import sys\nsys.exit('ConnectionRefusedError: the data server is not up')\n")
    log_dir = tmp_path / "logs"
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "1", "--max-restarts",
                  "6", "--log-dir", str(log_dir), str(script), env={"PYTHON_EXEC": PY}, timeout=180)
    assert r.returncode == 1, r.stderr[-3000:]
    note = ("no restarts left (--max-restarts 6); all 7 attempts failed at step 0 with the same "
            "error: --stop-without-progress 4 would have stopped the job after 4 (exit 4: do not "
            "requeue)")
    assert "reason    : " + note in r.stderr, r.stderr[-3000:]
    [report] = glob.glob(str(log_dir / "*" / "failure_report.json"))
    with open(report) as f:
        assert json.load(f)["reason"] == note


def test_ddp_steps_are_the_steps_that_restarts_are_judged_by(tmp_path):
    # Each attempt makes 3 DDP steps, each with 2 more all_reduces of its own, then fails: the
    # agent counts the DDP steps (3), not the collectives (6), so the attempts stuck at the same
    # step end the job as making no progress. The workers get the hook's C wrappers where the
    # build has them (the agent puts their folder on PYTHONPATH after the hook's).
    script = tmp_path / "ddp_fails.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        print("wrappers:", type(dist.all_reduce).__name__, type(DDP.forward).__name__)
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 1))
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            for _ in range(2):
                dist.all_reduce(torch.ones(1))
        sys.exit(3)
    """))
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "1", "--max-restarts",
                  "10", "--stop-without-progress", "4", str(script), env={"PYTHON_EXEC": PY},
                  timeout=120)
    assert r.returncode == 4, r.stderr[-3000:]
    assert "4 attempts in a row failed at step 3 with the same error: restarts do not help" \
        in r.stderr, r.stderr[-3000:]
    built = glob.glob(os.path.join(build_dir(), "agent", "python", "_ccrun_hook*.so"))
    kinds = "Collective DdpForward" if built else "function function"
    assert r.stdout.count(f"wrappers: {kinds}") == 4, r.stdout


def test_restarts_that_get_further_go_on_until_the_budget_is_spent(tmp_path):
    # Attempt n makes n steps before it fails: each gets further than the one before.
    script = tmp_path / "fails_later.py"
    script.write_text("import os, sys\nimport ccrun_progress as cp\n"
                      "for _ in range(int(os.environ['TORCHELASTIC_RESTART_COUNT'])):\n"
                      "    cp.step()\n"
                      "sys.exit(3)\n")
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "1", "--max-restarts",
                  "4", str(script), env={"PYTHON_EXEC": PY}, timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "no restarts left (--max-restarts 4)" in r.stderr, r.stderr[-3000:]
