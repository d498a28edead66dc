"""The agent under signals, stubborn workers, a lost or restarted store, runaway
output and escaping descendants: each test reproduces a crash or hang that a
user met, through the real ccrun binary and real signals."""
import json
import re
import os
import resource
import shutil
import signal
import subprocess
import time

import pytest

from helpers import (binary, ccrun_cmd, free_port, read_stderr_until, run_ccrun, spawn_ccrun,
                     start_daemon, wait_until_signals_held)

CRASH_CODES = (134, 136, 139)  # SIGABRT, SIGFPE, SIGSEGV as a shell reports them
CRASH_WORDS = ("Segmentation", "munmap_chunk", "double free", "malloc", "terminate called",
               "core dumped", "AddressSanitizer")


def assert_no_crash(rc, err):
    assert rc not in CRASH_CODES and rc >= 0, f"ccrun crashed (rc {rc}):\n{err}"
    for w in CRASH_WORDS:
        assert w not in err, f"{w!r} in ccrun's stderr:\n{err}"


def wait_for_lines(p, word, count, timeout=30):
    seen = ""
    deadline = time.time() + timeout
    while seen.count(word) < count and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        seen += line
    assert seen.count(word) >= count, seen


def finish(p, timeout=30):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"ccrun did not end within {timeout}s:\n{err}")
    return p.returncode, out, err


def forming_args(backend):
    """A node of a 2-node job whose other node never comes: it stays forming."""
    port = free_port()
    if backend == "static":
        return ["--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                "--master-port", str(port)]
    return ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", "forming"]


@pytest.mark.parametrize("backend", ["static", "c10d"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_waiting_for_other_nodes(backend, sig):
    # Was: a segfault or heap abort (the rendezvous thread still used the
    # store the agent was freeing), 5 times out of 5 with c10d.
    for later in (0.0, 0.5):
        p = spawn_ccrun(*forming_args(backend), "--no-python", "true")
        seen = read_stderr_until(p, "nodes joined round")  # it is forming
        time.sleep(later)  # and still is: the other node never comes
        start = time.time()
        p.send_signal(sig)
        rc, _, err = finish(p)
        err = seen + err
        assert_no_crash(rc, err)
        assert rc == 128 + sig, err
        assert "while waiting for the other nodes" in err
        assert time.time() - start < 5, "the signal took too long to act"


@pytest.mark.parametrize("backend", ["static", "c10d"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_at_ccruns_first_instruction_is_a_clean_stop(backend, sig):
    # Was: killed by the signal's default action (rc -2 / -15, no message)
    # whenever it came before the agent's handlers existed: every time under
    # ASan, whose start-up takes 0.3 s. The signal goes the moment ccrun's own
    # code runs (the kernel shows the mask), before main, long before the loop.
    for _ in range(3):
        p = spawn_ccrun(*forming_args(backend), "--no-python", "true")
        wait_until_signals_held(p, sig)
        p.send_signal(sig)
        rc, _, err = finish(p)
        assert_no_crash(rc, err)
        assert rc == 128 + sig, err
        assert f"received {signal.Signals(sig).name}" in err
        assert "was stopped" in err  # the summary line


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_daemon_signalled_at_its_first_instruction_stops_cleanly(sig):
    p = subprocess.Popen([binary("store", "ccrun-rendezvous"), "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_signals_held(p, sig)
    p.send_signal(sig)
    rc, out, err = finish(p)
    assert rc == 0, err
    assert "listening on" in out and "received; closing" in out  # spdlog: stdout


@pytest.mark.parametrize("args,message", [
    (["--bogus"], "--bogus"),
    (["--port", "abc"], "--port"),
    (["--port", "70000"], "--port"),
    (["--log-level", "loud"], "loud"),
    (["--max-connections", "-1"], "--max-connections"),
])
def test_daemon_bad_flags_exit_2_with_the_fix(args, message):
    r = subprocess.run([binary("store", "ccrun-rendezvous"), *args], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("ccrun-rendezvous: ") and message in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith("see ccrun-rendezvous --help"), r.stderr


def test_daemon_port_in_use_names_the_port_flag():
    with start_daemon("--host", "127.0.0.1") as d:
        r = subprocess.run([binary("store", "ccrun-rendezvous"), "--host", "127.0.0.1", "--port",
                            str(d.port)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "give another with --port" in r.stderr and "single-node" not in r.stderr, r.stderr


STUBBORN = 'trap "" INT TERM; echo up; while true; do sleep 0.1; done'


def test_ctrl_c_with_stubborn_workers_is_a_stop_not_a_restart():
    # Was: restarted the job ("restarting the workers"), then heap corruption.
    for _ in range(3):
        p = spawn_ccrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                        "--stop-grace", "1", "--no-python", "/bin/sh", "-c", STUBBORN)
        wait_for_lines(p, "up", 2)
        p.send_signal(signal.SIGINT)
        rc, _, err = finish(p)
        assert_no_crash(rc, err)
        assert rc == 130, err
        assert "restarting" not in err
        assert "Root cause" not in err  # ccrun's own SIGKILL is no failure


def test_second_signal_kills_at_once():
    p = spawn_ccrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
                    "--stop-grace", "30", "--no-python", "/bin/sh", "-c", STUBBORN)
    wait_for_lines(p, "up", 2)
    p.send_signal(signal.SIGINT)
    seen = read_stderr_until(p, "received SIGINT")  # the first one is acted on
    start = time.time()
    p.send_signal(signal.SIGINT)
    rc, _, err = finish(p)
    err = seen + err
    assert_no_crash(rc, err)
    assert rc == 130, err
    assert time.time() - start < 5, "the second signal did not kill the workers at once"
    assert "again; killing the workers now" in err


def test_sigterm_without_restarts_exits_143_every_time():
    # Was: exit 1 in 7 of 8 runs, the report blaming the worker's SIGTERM.
    for _ in range(4):
        p = spawn_ccrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
                        "--no-python", "/bin/sh", "-c", "echo up; sleep 30")
        wait_for_lines(p, "up", 2)
        p.send_signal(signal.SIGTERM)
        rc, _, err = finish(p)
        assert rc == 143, err
        assert "Root cause" not in err


def c10d_agents(daemon, run_id, program, n=2):
    return [spawn_ccrun("--nnodes", str(n), "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", f"127.0.0.1:{daemon.port}", "--rdzv-id", run_id,
                        "--rdzv-conf", "keep_alive_interval=1,keep_alive_max_attempt=3",
                        "--no-python", "/bin/sh", "-c", program) for _ in range(n)]


def test_store_lost_mid_job_ends_every_agent_with_a_clear_error():
    # Was: both agents waited forever at the exit barrier.
    d = start_daemon("--host", "127.0.0.1")
    agents = c10d_agents(d, "lost", "echo up; sleep 2")
    for p in agents:
        wait_for_lines(p, "up", 1)
    d.proc.kill()
    d.proc.wait()
    # Each ends within finish()'s deadline (2 s of work + a 3 s keep-alive
    # window leave it wide slack), never waiting forever at the barrier.
    for p in agents:
        rc, _, err = finish(p, timeout=30)
        assert_no_crash(rc, err)
        assert rc == 1, err
        assert f"lost the store 127.0.0.1:{d.port}" in err
        assert "exit barrier" in err


def test_store_restarted_mid_job_recovers():
    # Was: the daemon's restart lost the exit barrier's count; agents hung.
    d = start_daemon("--host", "127.0.0.1")
    port = d.port
    agents = c10d_agents(d, "restarted", 'echo up; sleep $((1 + RANK * 3))')
    for p in agents:
        wait_for_lines(p, "up", 1)
    d.proc.kill()
    d.proc.wait()
    d2 = start_daemon("--host", "127.0.0.1", "--port", str(port))  # same port, empty
    try:
        for p in agents:
            rc, _, err = finish(p, timeout=40)
            assert_no_crash(rc, err)
            assert rc == 0, err
        # Each heartbeat tells the store the node's whole state (round_watch.h),
        # so the emptied store has it again; a node says so when the counter
        # it watches went back (not every restart shows that way).
    finally:
        d2.stop()


def test_unresolvable_endpoint_is_said_and_signals_work():
    # Was: silent for join_timeout, SIGTERM ignored for 20 s.
    p = spawn_ccrun("--nnodes", "1", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "no-such-host.invalid:29400", "--no-python", "true")
    deadline = time.time() + 20
    err = ""
    while "no answer yet from the store" not in err and time.time() < deadline:
        err += p.stderr.readline()
    assert "no-such-host.invalid" in err
    start = time.time()
    p.send_signal(signal.SIGTERM)
    rc, _, rest = finish(p)
    assert rc == 143, err + rest
    assert time.time() - start < 5


def session_pids(sid, pattern):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if pattern in cmd and state != "Z":
            out.append(int(d))
    return out


def test_setsid_descendants_die_with_ccrun(tmp_path):
    tag = f"sleep 7{os.getpid() % 1000:03d}"
    prog = f'setsid {tag}1 & (setsid sh -c "{tag}2" &); echo up; sleep 60'
    p = spawn_ccrun("--standalone", "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c", prog)
    wait_for_lines(p, "up", 2)
    deadline = time.time() + 30  # the setsid'd sleeps start beside "up"
    while len(session_pids(p.pid, tag)) < 4 and time.time() < deadline:
        time.sleep(0.05)
    assert len(session_pids(p.pid, tag)) >= 4
    p.kill()  # SIGKILL: only the orphan killer is left to clean up
    p.wait()
    deadline = time.time() + 10
    while session_pids(p.pid, tag) and time.time() < deadline:
        time.sleep(0.05)
    assert session_pids(p.pid, tag) == []


def test_setsid_descendants_stop_with_the_group():
    tag = f"sleep 8{os.getpid() % 1000:03d}"
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--no-python", "/bin/sh", "-c",
                  f"setsid {tag} & exit 0")
    assert r.returncode == 0, r.stderr
    # Killed by the agent's walk of its own tree (it is their subreaper); a
    # SIGKILLed process may take a moment to go: gone within moments, never
    # left running.
    deadline = time.time() + 10
    while session_pids(0, tag) and time.time() < deadline:
        time.sleep(0.05)
    assert session_pids(0, tag) == []


def test_a_setsid_grandchild_dies_with_its_worker_while_the_others_run():
    # Rank 0 leaves a setsid'd grandchild (its parent, a subshell, exits
    # first: the orphan reparents to the agent, its subreaper) and exits;
    # rank 1 runs on with its own. Rank 0's must go at once, rank 1's stay.
    tag = f"sleep 6{os.getpid() % 1000:03d}"
    prog = (f'(setsid {tag}$RANK &); echo up; '
            f'if [ "$RANK" = 0 ]; then exit 0; fi; sleep 60')
    p = spawn_ccrun("--standalone", "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c", prog)
    try:
        wait_for_lines(p, "up", 2)
        deadline = time.time() + 10
        while (session_pids(p.pid, f"{tag}0") or not session_pids(p.pid, f"{tag}1")) \
                and time.time() < deadline:
            time.sleep(0.05)
        assert session_pids(p.pid, f"{tag}0") == [], "rank 0's grandchild outlived rank 0"
        assert session_pids(p.pid, f"{tag}1") != [], "rank 1's grandchild died with rank 0"
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        rc, _, err = finish(p)
        assert rc == 143, err
        deadline = time.time() + 10
        while session_pids(p.pid, tag) and time.time() < deadline:
            time.sleep(0.05)
        assert session_pids(p.pid, tag) == []
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def count_openat(args):
    """openat calls by ccrun and its orphan killer (not its workers: they exec)."""
    import tempfile
    # LeakSanitizer cannot run under ptrace: in the ASan build its exit
    # check would fail the run (harmless elsewhere).
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = dict(os.environ, ASAN_OPTIONS=(asan + ":" if asan else "") + "detect_leaks=0")
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as log:
        r = subprocess.run(["strace", "-f", "-c", "-e", "trace=openat", "-o", log.name,
                            *ccrun_cmd(*args)], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0, r.stderr
        for line in log.read().splitlines():
            fields = line.split()
            if fields and fields[-1] == "openat":
                return int(fields[3])
    return 0


def test_finding_descendants_costs_nothing_per_unrelated_process():
    # Was: every worker exit read every process's /proc/<pid>/environ, so a
    # node with 1,000 other processes cost 8 x 1,000 reads per x8 launch.
    if shutil.which("strace") is None:
        pytest.skip("skipped: strace is not installed")
    args = ("--standalone", "--nproc-per-node", "8", "--no-python", "/bin/true")
    quiet = count_openat(args)
    idle = [subprocess.Popen(["sleep", "600"]) for _ in range(1000)]
    try:
        busy = count_openat(args)
    finally:
        for s in idle:
            s.kill()
        for s in idle:
            s.wait()
    # The same job: the same files, give or take a few the libraries open.
    assert busy - quiet < 50, f"{quiet} openat calls on a quiet node, {busy} beside 1,000 processes"


def test_a_huge_line_does_not_exhaust_memory():
    # Was: 885 MB RSS for 300 MB without a newline (the line was kept whole).
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    r = subprocess.run([binary("launcher", "ccrun"), "--standalone", "--no-python", "/bin/sh",
                        "-c", "head -c 64000000 /dev/zero | tr '\\0' x"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if not os.environ.get("CCRUN_SANITIZED"):  # ASan's quarantine keeps freed memory
        assert peak_kib < 120 * 1024 or peak_kib == before, f"peak RSS {peak_kib} KiB"
    assert r.stdout.count(b"[ccrun: line longer than 1 MiB, continued]") == 61
    assert r.stdout.count(b"x") == 64000000


def test_each_run_gets_its_own_log_dir_and_every_failure_is_reported(tmp_path):
    # Rank 0 fails; rank 1 succeeds (a failing rank 1 could have the group
    # stopped before rank 0 wrote its line).
    prog = 'echo "attempt $TORCHELASTIC_RESTART_COUNT" >&2; [ "$RANK" = 0 ] && exit 3; exit 0'
    for _ in range(2):
        r = run_ccrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                      "--log-dir", str(tmp_path), "--rdzv-id", "job", "--no-python",
                      "/bin/sh", "-c", prog)
        assert r.returncode == 1, r.stderr
    runs = sorted(tmp_path.glob("job_*"))
    assert len(runs) == 2
    for run in runs:
        report = json.loads((run / "failure_report.json").read_text())
        attempts = {f["attempt"] for f in report["failures"]}
        assert attempts == {0, 1}, report
        assert report["attempts"] == 2
        assert report["root_cause"]["attempt"] == 1
        assert (run / "attempt_0" / "0" / "stderr.log").read_text() == "attempt 0\n"
        assert (run / "attempt_1" / "0" / "stderr.log").read_text() == "attempt 1\n"


def input_mistakes(tmp_path):
    """(args, env, message) of mistakes in a node's input that the agent
    would meet only once it runs: each is a usage error, exit 2."""
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    return [
        (["--log-dir", str(afile)], {}, f'--log-dir "{afile}": is not a directory; give a directory'),
        (["--log-dir", "/proc/ccrun-no-such-dir"], {}, "cannot create it"),
        (["--numa-binding", "node"], {"CUDA_VISIBLE_DEVICES": ""},
         "local rank 0 has no GPU: this node has 0 GPU(s)"),
        ([], {"CCRUN_STORE_TOKEN_FILE": str(tmp_path / "missing")},
         f'CCRUN_STORE_TOKEN_FILE "{tmp_path / "missing"}": cannot be opened (No such file'),
        (["--rdzv-backend", "c10d", "--rdzv-endpoint", "http://localhost:29400"], {},
         "drop it and give host:port: localhost:29400"),
    ]


def test_mistakes_in_a_nodes_input_exit_2_before_any_worker(tmp_path):
    for args, env, message in input_mistakes(tmp_path):
        r = run_ccrun("--standalone", *args, "--no-python", "/bin/echo", "ran", env=env, timeout=60)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert message in r.stderr and "ran" not in r.stdout, (args, r.stderr)
        assert "job failed" not in r.stderr, r.stderr


def test_a_full_log_disk_is_reported(tmp_path):
    logs = tmp_path / "small"
    logs.mkdir()
    # 20 MiB: above the health gate's 16 MiB minimum, filled by 24 MB of output.
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(logs)],
                      capture_output=True).returncode != 0:
        pytest.skip("skipped: cannot mount a small tmpfs (needs root) to fill a log disk")
    try:
        r = run_ccrun("--standalone", "--log-dir", str(logs), "--no-python", "/bin/sh", "-c",
                      "yes 'a line of output, padded' | head -n 1000000; exit 5")
        assert r.returncode == 1
        assert "No space left on device" in r.stderr, r.stderr
        assert r.stderr.count("stdout.log: No space left") == 1
        assert "failure_report.json: No space left on device" in r.stderr
        assert r.stdout.count("\n") == 1000000  # the console still got everything
    finally:
        subprocess.run(["umount", "-l", str(logs)])


def test_events_log_and_summary_line(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                  "--log-dir", str(tmp_path), "--rdzv-id", "ev", "--no-python", "/bin/sh", "-c",
                  '[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] || exit $RANK')
    assert r.returncode == 0, r.stderr
    assert re.search(r"job 'ev' succeeded \(exit 0\) after [\d.]+s: 2 attempt\(s\), 1 node\(s\), "
                     r"2 rank\(s\)", r.stderr), r.stderr
    (run,) = tmp_path.glob("ev_*")
    events = [json.loads(l) for l in (run / "events.jsonl").read_text().splitlines()]
    # A program that reports no start-up phase is past its start-up from its spawn: each
    # attempt's end writes its ranks' timelines.
    startup = [(e["attempt"], e["rank"]) for e in events if e["event"] == "startup"]
    assert sorted(startup) == [(0, 0), (0, 1), (1, 0), (1, 1)], events
    events = [e for e in events if e["event"] != "startup"]
    assert [e["event"] for e in events] == ["health", "join", "start", "failure", "restart",
                                            "health", "join", "start", "stop"]
    assert [e["attempt"] for e in events] == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert events[3]["rank"] == 1 and events[3]["exit_code"] == 1
    # Why the restart came, as an object (not JSON inside a string).
    why = events[4]["why"]
    assert why["kind"] == "restart", why
    assert why["failure"]["rank"] == 1 and why["failure"]["exit_code"] == 1, why
    assert events[-1]["exit_code"] == 0
    assert all(e["time"].endswith("Z") and e["time_ms"] > 0 for e in events)


def test_forming_says_who_joined():
    port = free_port()
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--rdzv-conf", "keep_alive_interval=0.3", "--no-python", "true"]
    first = spawn_ccrun("--node-rank", "0", *common)
    deadline = time.time() + 20
    err = ""
    while "1 of 2 nodes joined round 0" not in err and time.time() < deadline:
        err += first.stderr.readline()
    assert "1 of 2 nodes joined round 0" in err and "join_timeout" in err
    second = spawn_ccrun("--node-rank", "1", *common)
    for p in (first, second):
        rc, _, rest = finish(p)
        assert rc == 0, rest
        assert "succeeded (exit 0)" in rest


def test_the_last_call_names_last_call_timeout():
    r = run_ccrun("--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                  f"127.0.0.1:{free_port()}", "--rdzv-conf",
                  "keep_alive_interval=0.3,last_call_timeout=2", "--no-python", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(r"1 of 1 to 2 nodes joined round 0; waiting \d+s more for others "
                     r"\(--rdzv-conf last_call_timeout\), then starting with those that joined",
                     r.stderr), r.stderr
    assert "(--rdzv-conf join_timeout)" not in r.stderr, r.stderr


def test_redirected_output_without_a_log_dir_is_kept_and_its_place_said(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "-r", "3", "--no-python", "/bin/sh",
                  "-c", 'echo "out of $RANK"; echo "err of $RANK" >&2',
                  env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "out of" not in r.stdout
    m = re.search(r"logs in (\S+)", r.stderr)
    assert m and "redirected output is kept under" in r.stderr, r.stderr
    root = m.group(1)
    assert open(os.path.join(root, "attempt_0", "1", "stdout.log")).read() == "out of 1\n"
    assert open(os.path.join(root, "attempt_0", "0", "stderr.log")).read() == "err of 0\n"


def test_a_progress_bar_and_a_huge_line_before_a_crash_give_a_small_report(tmp_path):
    prog = ("import sys\n"
            "for i in range(20000): sys.stderr.write('\\r%d%%|####|' % (i % 101))\n"
            "sys.stderr.write('x' * (10 << 20) + '\\n')\n"
            "sys.stderr.flush()\n"
            "raise SystemExit('crashed after the bar')\n")
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--log-dir", str(tmp_path),
                  "--no-python", "/usr/bin/python3", "-c", prog, timeout=120)
    assert r.returncode == 1
    [report] = [os.path.join(d, "failure_report.json") for d, _, files in os.walk(tmp_path)
                if "failure_report.json" in files]
    size = os.path.getsize(report)
    assert size < 64 << 10, f"failure_report.json is {size} bytes"
    tail = json.load(open(report))["failures"][0]["stderr_tail"]
    assert "crashed after the bar" in tail and "more bytes]" in tail, tail[:500]
    # The console carries the bar and the line once (the worker's own output), not the tail again.
    assert len(r.stderr) < 2 * (10 << 20) + (1 << 20)


def test_a_sigkilled_agent_leaves_no_progress_records_or_temporary_directory(tmp_path):
    p = spawn_ccrun("--standalone", "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c",
                    'echo "token $CCRUN_AGENT_TOKEN"; exec sleep 60',
                    env={"TMPDIR": str(tmp_path)})
    token = None
    deadline = time.time() + 30
    while token is None and time.time() < deadline:
        m = re.search(r"token (\w+)\.", p.stdout.readline())
        token = m.group(1) if m else None
    assert token
    assert glob_leftovers(tmp_path, token), "the running job has its files"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    deadline = time.time() + 10
    while glob_leftovers(tmp_path, token) and time.time() < deadline:
        time.sleep(0.05)
    assert not glob_leftovers(tmp_path, token)


def glob_leftovers(tmp_path, token):
    import glob
    return (glob.glob(f"/dev/shm/ccrun-{token}-*") +
            glob.glob(os.path.join(str(tmp_path), f"ccrun-{token}-*")))


def test_ctrl_c_on_the_node_hosting_the_store_stops_the_other_node_at_once():
    # torchrun's usual topology: the endpoint is node 0, whose agent hosts the store.
    port = free_port()
    args = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", "ctrl-c", "--nproc-per-node", "1", "--no-python", "/bin/sh", "-c",
            'echo "running $RANK"; exec sleep 60']
    host = spawn_ccrun(*args)
    read_stderr_until(host, "nodes joined round")  # it hosts the store
    other = spawn_ccrun(*args)
    wait_for_lines(host, "running", 1)
    wait_for_lines(other, "running", 1)
    start = time.time()
    host.send_signal(signal.SIGINT)
    rc_host, _, err_host = finish(host)
    rc, _, err = finish(other)
    assert rc_host == 130, err_host
    assert rc == 130, err
    assert "the job was stopped on another node: ccrun received SIGINT on node" in err, err
    assert "job failed" not in err
    assert time.time() - start < 5, f"took {time.time() - start:.1f}s\n{err}"
