# ctest: LABELS torch slow
"""Hang verdicts, OOM kills and progress, through the real ccrun and real
workers: a rank that stops, a healthy job with long collectives and long
steps, a worker the kernel's OOM killer takes (docs/hangs.md)."""
import glob
import json
import os
import re
import subprocess
import time

import pytest

from helpers import binary, free_port, run_ccrun, spawn_ccrun

WORKER = ("tests", "collectives_progress_worker")


def worker(*args):
    return ["--no-python", binary(*WORKER), *args]


def report(log_dir):
    [path] = glob.glob(os.path.join(log_dir, "*", "failure_report.json"))
    with open(path) as f:
        return json.load(f)


def events(log_dir):
    [path] = glob.glob(os.path.join(log_dir, "*", "events.jsonl"))
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_a_rank_that_stops_is_named_with_its_op_and_sequence_number(tmp_path):
    timeout = 3
    r = run_ccrun("--standalone", "--nproc-per-node", "4", "--hang-timeout", str(timeout),
                  "--stop-grace", "2", "--log-dir", str(tmp_path),
                  *worker("--steps", "40", "--sleep-rank", "2", "--sleep-before", "20",
                          "--sleep-s", "300"), timeout=120)
    err = r.stderr
    assert r.returncode == 1, err
    m = re.search(r"the job is hung \(--hang-timeout 3s\): rank 2 has not issued all_reduce #20 "
                  r"of the world group \(1024 elements\), which ranks 0,1,3 have waited in for "
                  r"([\d.]+)s", err)
    assert m, err
    assert float(m.group(1)) <= timeout + 2, "the verdict came late"
    for rank in (0, 1, 3):
        assert re.search(rf"rank {rank} \(host \S+, node 0, pid \d+\): waiting in all_reduce #20", err)
    assert re.search(r"rank 2 \(host \S+, node 0, pid \d+\): not in a collective; last returned from "
                     r"all_reduce #19", err)
    # The stacks merged by class: ranks 0,1,3 in the collective, rank 2 in its sleep.
    stacks = re.findall(r"stacks of (ranks? [\d,\-]+)(?: \(\d+\))? \(pid [\d,]+\):", err)
    assert sorted(stacks) == ["rank 2", "ranks 0,1,3"], err
    rep = report(str(tmp_path))
    assert rep["root_cause"]["cause"] == "hang" and rep["root_cause"]["rank"] == 2
    assert rep["hang"]["culprits"] == [2]
    by_rank = {s["rank"]: s for s in rep["hang"]["stacks"]}
    assert "nanosleep" in by_rank[2]["native"] or "sleep" in by_rank[2]["native"], by_rank[2]
    assert "all_reduce" in by_rank[0]["native"], by_rank[0]
    kinds = [e.get("event") or e.get("kind") for e in events(str(tmp_path))]
    assert "hang" in kinds and "hang_stacks" in kinds, kinds
    # One folder with the incident's material, its path in the summary.
    [incident] = glob.glob(os.path.join(str(tmp_path), "*", "incident_0"))
    assert f"incident: {incident}" in err, err[-3000:]
    verdict = json.load(open(os.path.join(incident, "verdict.json")))
    assert verdict["hang"]["culprits"] == [2] and verdict["failures"][0]["rank"] == 2
    merged = open(os.path.join(incident, "stacks", "merged.txt")).read()
    assert merged.count("ranks 0,1,3 (3)") == 1 and merged.count("rank 2") == 1, merged
    for rank in range(4):
        assert os.path.getsize(os.path.join(incident, "stacks", f"rank_{rank}.native.txt")) > 0


def test_a_hung_job_restarts_while_restarts_are_left(tmp_path):
    # Attempt 0 hangs (rank 1 sleeps); attempt 1 runs through.
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "2",
                  "--max-restarts", "1", "--stop-grace", "2", "--no-python", "/bin/sh", "-c",
                  f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec {binary(*WORKER)} '
                  '--steps 20 --sleep-rank 1 --sleep-before 5 --sleep-s 300; '
                  f'else exec {binary(*WORKER)} --steps 20; fi', timeout=120)
    assert r.returncode == 0, r.stderr
    assert "the job is hung" in r.stderr and "restarting the workers" in r.stderr


def test_healthy_jobs_with_long_collectives_and_long_steps_are_never_hung():
    # 64 MiB all_reduces (16M floats) on 2 ranks, then steps of 1.5 s of work
    # with no collective in flight; the timeout is above either, as a user's is.
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "4",
                  *worker("--steps", "6", "--count", str(16 << 20)), timeout=300)
    assert r.returncode == 0, r.stderr
    r2 = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "4",
                   *worker("--steps", "4", "--step-ms", "1500"), timeout=120)
    assert r2.returncode == 0, r2.stderr
    for out in (r.stderr, r2.stderr):
        assert "hung" not in out


def test_a_healthy_job_whose_steps_vary_by_half_is_never_hung():
    # 4 ranks, steps of 1 s +-50% (each rank its own draw), a timeout of 2 s: a fast rank waits
    # in the all_reduce up to 1 s for the slowest, and no step lasts the timeout.
    r = run_ccrun("--standalone", "--nproc-per-node", "4", "--hang-timeout", "2",
                  *worker("--steps", "12", "--step-ms", "1000", "--jitter", "50", "--count", "16"),
                  timeout=180)
    assert r.returncode == 0, r.stderr
    assert "hung" not in r.stderr


# Healthy torch jobs whose record once ran out of its 48 slots, each at work for 4.5 s in each
# of its last phases, where the record then stood still and the job read as hung.
OUTGROWN_JOBS = {
    # a model wrapped in DDP again every epoch, its DDP steps its only progress
    "ddp_every_epoch": """
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
net = torch.nn.Linear(8, 8)
for epoch in range(52):
    model = DDP(net)
    for step in range(5 if epoch < 50 else 150):
        model(torch.randn(4, 8)).sum().backward()
        time.sleep(0.03)
""",
    # a group a phase, its calls in none other: past the 48th, unrecorded
    "group_every_phase": """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for i in range(52):
    group = dist.new_group([0, 1])
    for step in range(2 if i < 50 else 150):
        dist.all_reduce(t, group=group)
        time.sleep(0.03)
""",
}


@pytest.mark.parametrize("job", sorted(OUTGROWN_JOBS))
def test_a_torch_job_past_its_records_48_slots_is_never_hung(tmp_path, job):
    script = tmp_path / f"{job}.py"
    script.write_text(OUTGROWN_JOBS[job])
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "3", str(script),
                  env={"PYTHON_EXEC": "/usr/bin/python3"}, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "hung" not in r.stderr


def test_hang_timeout_0_never_judges():
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "0",
                  *worker("--steps", "10", "--sleep-rank", "1", "--sleep-before", "5",
                          "--sleep-s", "3"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hung" not in r.stderr


def memory_cgroup(limit_bytes=96 << 20):
    """A fresh memory cgroup below ours (v1 or v2), or a reason why not."""
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            base, limit = f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes"
            break
    else:
        path = next((l.split(":", 2)[2] for l in lines if l.startswith("0::")), None)
        base, limit = f"/sys/fs/cgroup{path}", "memory.max"
    d = os.path.join(base, f"ccrun-oom-test-{os.getpid()}")
    try:
        os.mkdir(d)
        with open(os.path.join(d, limit), "w") as f:
            f.write(str(limit_bytes))
    except OSError as e:
        try:
            os.rmdir(d)
        except OSError:
            pass
        return None, f"cannot make a memory-limited cgroup under {base}: {e}"
    return d, None


WARM = [pytest.param([], id="cold"), pytest.param(["--warm-start"], id="warm")]


@pytest.mark.parametrize("mode", WARM)
def test_an_oom_kill_is_named_as_such(mode):
    # A warm worker shares its template's pages (torch: ~250 MiB), charged once to the cgroup.
    d, why = memory_cgroup((512 if mode else 96) << 20)
    if d is None:
        pytest.skip(f"skipped: {why}")
    try:
        prog = ("import os, time\n"
                "if os.environ['RANK'] == '1':\n"
                "    time.sleep(1.5)  # a sampled RSS first\n"
                "    a = []\n"
                "    while True: a.append(bytearray(8 << 20))\n"
                "time.sleep(60)\n")
        def enter():
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        p = subprocess.run([binary("launcher", "ccrun"), "--standalone", "--nproc-per-node", "2",
                            "--stop-grace", "2", *mode, "--no-python", "/usr/bin/python3", "-c",
                            prog],
                           capture_output=True, text=True, timeout=120, preexec_fn=enter)
    finally:
        deadline = time.time() + 10
        while True:
            try:
                os.rmdir(d)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
    err = p.stderr
    assert p.returncode == 1, err
    assert "worker rank 1" in err and "(the kernel's OOM killer)" in err, err
    assert "cause     : killed by the kernel's OOM killer (SIGKILL)" in err, err
    assert re.search(r"Killed process \d+ \(python3\)|OOM kill\(s\) since it started", err), err


@pytest.mark.parametrize("mode", WARM)
def test_a_torch_job_gets_the_same_verdict_with_every_ranks_python_stack(tmp_path, mode):
    # Nothing of ccrun in the script: the start-up hook counts torch's
    # collectives and dumps every thread's traceback on the agent's signal.
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hang_demo.py")
    r = run_ccrun("--standalone", "--nproc-per-node", "4", "--hang-timeout", "4", *mode,
                  "--stop-grace", "2", "--log-dir", str(tmp_path), script, "--steps", "200",
                  "--sleep-rank", "2", "--sleep-before", "100", "--sleep-s", "300",
                  env={"PYTHON_EXEC": "/usr/bin/python3"}, timeout=180)
    err = r.stderr
    assert r.returncode == 1, err[-4000:]
    assert re.search(r"rank 2 has not issued all_reduce #100 of the world group \(256 elements\), "
                     r"which ranks 0,1,3 have waited in for", err), err[-4000:]
    rep = report(str(tmp_path))
    by_rank = {s["rank"]: s for s in rep["hang"]["stacks"]}
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, s in by_rank.items():
        assert "Thread 0x" in s["python"] or "Current thread" in s["python"], s
        assert 'hang_demo.py", line' in s["python"], s["python"]
        assert "python" in s["native"].lower() or "#0" in s["native"], s["native"]
    assert "wait_for_the_data_loader" in by_rank[2]["python"], by_rank[2]["python"]
    assert "all_reduce" in by_rank[0]["python"], by_rank[0]["python"]
    assert rep["root_cause"]["cause"] == "hang" and rep["root_cause"]["rank"] == 2


def test_ccrun_status_shows_progress_and_marks_a_straggler():
    port = free_port()
    p = spawn_ccrun("--nnodes", "1", "--nproc-per-node", "4", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "strag",
                    "--rdzv-conf", "keep_alive_interval=1",
                    *worker("--steps", "400", "--step-ms", "20", "--slow-rank", "1",
                            "--slow-ms", "60"))
    status = [binary("launcher", "ccrun"), "status", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "strag"]
    try:
        deadline = time.time() + 60  # rates need a 5 s window of steps
        st = {}
        while time.time() < deadline and not st.get("stragglers"):
            r = subprocess.run(status + ["--json"], capture_output=True, text=True, timeout=30)
            st = json.loads(r.stdout) if r.stdout.strip() else {}
            time.sleep(0.5)
        assert st.get("stragglers") == [1], st
        ranks = {r["rank"]: r for r in st["ranks"]}
        assert sorted(ranks) == [0, 1, 2, 3]
        assert all(r["steps"] > 0 and r["steps_per_s"] > 0 for r in ranks.values()), ranks
        assert ranks[1]["straggler"] and not ranks[0]["straggler"]
        text = subprocess.run(status, capture_output=True, text=True, timeout=30).stdout
        assert re.search(r"\n  1 +0 +\d+ .*<< straggler", text), text
    finally:
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "rank 1 (host" in err and "is a straggler" in err, err


TORCH_STRAGGLER = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, t = dist.get_rank(), torch.ones(64)
for _ in range(400):
    time.sleep(0.03 if rank == 1 else 0.005)  # rank 1's own work per step is 6x the others'
    dist.all_reduce(t)
"""


DDP_STRAGGLER = """
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank, model, x = dist.get_rank(), DDP(torch.nn.Linear(64, 64)), torch.randn(8, 64)
for _ in range(400):
    time.sleep(0.03 if rank == 1 else 0.005)  # rank 1's own work per step is 6x the others'
    model(x).sum().backward()
"""


@pytest.mark.parametrize("job", ["all_reduce", "ddp"])
def test_ccrun_status_names_a_straggler_of_a_torch_job(tmp_path, job):
    # The same through torch's own all_reduce (the start-up hook's record): the others' time
    # waiting for rank 1 in their all_reduces is theirs, not their own work. With DDP, the wait
    # is in the reducer at the end of each backward, which the hook times as the step's.
    script = tmp_path / "straggler.py"
    script.write_text(TORCH_STRAGGLER if job == "all_reduce" else DDP_STRAGGLER)
    port = free_port()
    p = spawn_ccrun("--nnodes", "1", "--nproc-per-node", "3", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "torchstrag",
                    str(script), env={"PYTHON_EXEC": "/usr/bin/python3"})
    status = [binary("launcher", "ccrun"), "status", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "torchstrag", "--json"]
    try:
        deadline = time.time() + 60  # rates need a 5 s window of steps
        st = {}
        while time.time() < deadline and not st.get("stragglers"):
            r = subprocess.run(status, capture_output=True, text=True, timeout=30)
            st = json.loads(r.stdout) if r.stdout.strip() else {}
            time.sleep(0.5)
        assert st.get("stragglers") == [1], st
    finally:
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "rank 1 (host" in err and "is a straggler" in err, err


def test_an_expired_torch_file_timer_kills_its_worker_and_says_so():
    script = os.path.join(os.path.dirname(__file__), "torch_file_timer.py")
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--stop-grace", "2", script,
                  env={"PYTHON_EXEC": "/usr/bin/python3", "TORCHELASTIC_ENABLE_FILE_TIMER": "1"},
                  timeout=120)
    err = r.stderr
    assert r.returncode == 1, err
    assert re.search(r"torch's FileTimer expired for pid \d+ \(scope data_loading\); sent it SIGKILL",
                     err), err
    assert "cause     : torch FileTimer expired (SIGKILL)" in err, err
    assert re.search(r"rank      : 1 \(local_rank 1\)", err), err
    assert "warmup" not in err  # released in time


def hang_with_fake_flight_recorders(tmp_path, nproc, sleep_rank):
    """A job of `nproc` ranks of the progress worker whose rank `sleep_rank` stalls before step
    10, under --hang-timeout 2, each rank with a stand-in for torch's NCCL flight recorder:
    torch's ProcessGroupNCCL needs a GPU; its dump protocol (a FIFO per rank, a dump file per
    rank) is played by tests/integration/fake_flight_recorder.py."""
    fake = os.path.join(os.path.dirname(__file__), "fake_flight_recorder.py")
    prog = (f"/usr/bin/python3 -I {fake} & exec {binary(*WORKER)} --steps 40 --sleep-rank "
            f"{sleep_rank} --sleep-before 10 --sleep-s 300")
    r = run_ccrun("--standalone", "--nproc-per-node", str(nproc), "--hang-timeout", "2",
                  "--stop-grace", "2", "--log-dir", str(tmp_path), "--no-python", "/bin/sh", "-c",
                  prog, timeout=120)
    assert r.returncode == 1, r.stderr
    return r


def test_a_hang_dumps_torchs_nccl_flight_recorders(tmp_path):
    r = hang_with_fake_flight_recorders(tmp_path, 2, 1)
    rep = report(str(tmp_path))
    traces = {s["rank"]: s["nccl_trace"] for s in rep["hang"]["stacks"]}
    for rank in (0, 1):
        assert traces[rank].endswith(f"nccl_trace_rank_{rank}"), traces
        assert os.path.getsize(traces[rank]) > 0
        assert f"rank {rank}'s NCCL flight recorder dumped to {traces[rank]}" in r.stderr
    # What the dumps say, on the console and in the report.
    findings = [
        "rank 1 has not issued all_reduce #21 of group 0 (default_pg), which rank 0 issued (last issued: #20)",
        "rank 0: all_reduce #21 of group 0 (default_pg), 256 Float, issued ",
    ]
    for f in findings:
        assert "ccrun: NCCL flight recorder: " + f in r.stderr, r.stderr[-4000:]
    assert rep["hang"]["nccl_findings"][0] == findings[0]
    assert rep["hang"]["nccl_findings"][1].endswith(
        "not completed on the GPU: its kernel runs: it waits for a peer's part, or the network")


def test_a_verdict_that_names_no_cause_takes_the_flight_recorders_finding(tmp_path):
    # One rank, idle outside any call: its records tell nothing more (as on a
    # GPU, where an NCCL call returns once queued and the rank then waits for
    # the GPU); what its flight recorder says goes into the root cause.
    r = hang_with_fake_flight_recorders(tmp_path, 1, 0)
    finding = "NCCL flight recorder: rank 0: all_reduce #21 of group 0 (default_pg), 256 Float, issued "
    assert re.search(r"error:\n\s+hang: no rank has progressed for [0-9.]+s \(no rank inside a "
                     r"collective call; no step marked\); " + re.escape(finding), r.stderr), r.stderr[-3000:]
    cause = report(str(tmp_path))["root_cause"]["message"]
    assert "; " + finding in cause and cause.endswith("its kernel runs: it waits for a peer's part, "
                                                      "or the network"), cause


def test_a_ddp_job_names_the_rank_that_never_began_its_step():
    # DDP's gradient all-reduces run in torch's C++ reducer, out of the hook's
    # reach: the hook records each DDP step instead.
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hang_demo.py")
    r = run_ccrun("--standalone", "--nproc-per-node", "3", "--hang-timeout", "4",
                  "--stop-grace", "2", script, "--ddp", "--steps", "100", "--sleep-rank", "1",
                  "--sleep-before", "10", env={"PYTHON_EXEC": "/usr/bin/python3"}, timeout=180)
    assert r.returncode == 1, r.stderr[-4000:]
    assert re.search(r"rank 1 has not issued DDP step #10 of a DistributedDataParallel module "
                     r"\(3 ranks\)[^,]*, which ranks 0,2 have waited in for", r.stderr), r.stderr[-4000:]


# The fault matrix of a torch gloo job (examples/hang_demo.py --fault): each
# culprit named first, at rank 2 and at rank 0, in each of CCRUN_FAULT_REPEAT
# runs: 1 in the suite, CMake's CCRUN_SOAK_REPEAT (3) in the soak test
# integration.test_hangs.soak (`ctest -C soak -R test_hangs.soak`).
FAULT_REPEAT = int(os.environ.get("CCRUN_FAULT_REPEAT", "1"))
def others(culprit):
    return ",".join(str(r) for r in range(4) if r != culprit).replace("1,2,3", "1-3")


def not_issued(c):
    return rf"rank {c} has not issued all_reduce #30 of the world group \(256 elements\)"


# The hang verdict's headline, and the line of the program the culprit's stack class is titled by.
FAULTS = {
    "barrier": (lambda c: (rf"rank {c} issued barrier as call #30 of the world group, where ranks "
                           rf"{others(c)} issued all_reduce \(256 elements\): a desync; rank {c} "
                           rf"made one all_reduce fewer \(29 against 30\)"), "main"),
    "skip": (lambda c: (rf"rank {c} issued barrier as call #60 of the world group, where ranks "
                        rf"{others(c)} issued all_reduce \(256 elements\): a desync; rank {c} made "
                        rf"one all_reduce fewer \(59 against 60\)"), "main"),
    "stop": (lambda c: (not_issued(c) + rf", which ranks {others(c)} have waited in for [\d.]+s; "
                        rf"rank {c}: its process is stopped \(state T"), None),
    "sleep": (not_issued, "wait_for_the_data_loader"),
    "lock": (not_issued, "flush_metrics"),  # a lock its other thread holds for ever
    "loader": (not_issued, "next_batch"),   # a DataLoader whose worker process never returns
    # A ring of sends and receives (--pipeline), the culprit asleep before its step's.
    "pipeline": (lambda c: (rf"rank {c} is in no call, while ranks {others(c)} wait in calls \(the "
                            rf"longest: rank \d in (send|recv) #\d+ of the world group \(256 "
                            rf"elements\) for [\d.]+s, a point-to-point call\)"),
                 "wait_for_the_data_loader"),
    # A pair's group (--pairs: {0,1} and {2,3}), the culprit asleep before its pair's call.
    "subgroup": (lambda c: (rf"rank {c} has not issued all_reduce #30 of group [0-9a-f]+ \(2 ranks\) "
                            rf"\(256 elements\), which rank {c ^ 1} has waited in for [\d.]+s"),
                 "wait_for_the_data_loader"),
}
DEMO_ARGS = {"pipeline": ["--fault", "sleep", "--pipeline"], "subgroup": ["--fault", "sleep", "--pairs"]}


def run_demo(tmp_path, fault, culprit):
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hang_demo.py")
    began = time.monotonic()
    # --stop-grace 60: a stopped rank that ignored the stop would hold the job that long.
    r = run_ccrun("--standalone", "--nproc-per-node", "4", "--hang-timeout", "4",
                  "--stop-grace", "60", "--log-dir", str(tmp_path), script, "--steps", "60",
                  "--sleep-rank", str(culprit), "--sleep-before", "30",
                  *DEMO_ARGS.get(fault, ["--fault", fault]),
                  env={"PYTHON_EXEC": "/usr/bin/python3"}, timeout=180)
    took = time.monotonic() - began
    assert r.returncode == 1, r.stderr[-4000:]
    assert took < 50, f"the job took {took:.0f}s to end: a rank waited out --stop-grace"
    return r.stderr, report(str(tmp_path))


@pytest.mark.parametrize("run", range(FAULT_REPEAT))
@pytest.mark.parametrize("fault,culprit", [("barrier", 2), ("barrier", 0), ("skip", 2),
                                           ("stop", 2), ("sleep", 0), ("lock", 2), ("loader", 0),
                                           ("pipeline", 2), ("pipeline", 1), ("subgroup", 2)])
def test_the_fault_matrix_names_each_culprit(tmp_path, fault, culprit, run):
    err, rep = run_demo(tmp_path, fault, culprit)
    headline, frame = FAULTS[fault]
    assert re.search("the job is hung \\(--hang-timeout 4s\\): " + headline(culprit), err), \
        err[-4000:]
    assert rep["hang"]["culprits"] == [culprit]
    assert rep["root_cause"]["cause"] == "hang" and rep["root_cause"]["rank"] == culprit
    if frame:  # the culprit's stack class, titled by the line of the program it is at
        assert re.search(rf"stacks of rank {culprit} <- hang_demo\.py:\d+ in {frame} ", err), \
            err[-4000:]
    if fault == "stop":
        stacks = {s["rank"]: s for s in rep["hang"]["stacks"]}
        assert stacks[culprit]["python"].startswith("(none: the process is stopped (state T)")
        assert "kill" in stacks[culprit]["native"], stacks[culprit]["native"]


# Faults that end a torch gloo job without a hang: the culprit still named first.
@pytest.mark.parametrize("run", range(FAULT_REPEAT))
@pytest.mark.parametrize("fault,culprit", [("size", 2), ("size", 0), ("kill", 2)])
def test_faults_that_are_no_hang_name_the_culprit_first(tmp_path, fault, culprit, run):
    err, rep = run_demo(tmp_path, fault, culprit)
    assert "the job is hung" not in err, err[-4000:]
    root = rep["root_cause"]
    if fault == "kill":  # killed inside its all_reduce: its death is the root cause
        assert root["rank"] == culprit and root["signal"] == 9, root
    else:
        # Twice the others' elements: gloo aborts a peer that receives more than its buffer
        # holds, and the desync in the records names the culprit in the root cause.
        # (The others as far as they got: a rank slow to make call #30 is not compared.)
        desync = (rf"desync: rank {culprit} issued all_reduce with 512 elements as call #30 of "
                  rf"the world group, where ranks? [\d,-]+ issued all_reduce \(256 "
                  rf"elements\): a desync; rank {culprit} made as many all_reduce calls \(30\)")
        assert re.match(desync, root["message"]), root
        assert "op.preamble.length <= op.nbytes" in root["message"], root


# The same matrix where calls return once queued, as NCCL's do through torch
# (tools/collectives_queued_worker.cpp: the job's store stands in for the GPUs,
# which a machine with one GPU cannot give several NCCL ranks): no rank waits in
# a call, so the verdict reads the ranks' counts of calls issued.
QUEUED_FAULTS = {
    "skip": (["--skip-rank", "{c}", "--skip-at", "21"],
             lambda c: (rf"rank {c} has not issued all_reduce #21 of the world group \(1024 "
                        rf"elements\), which ranks {others(c)} issued \(its last: #20\)")),
    "barrier": (["--barrier-rank", "{c}", "--barrier-at", "21"],
                lambda c: (rf"rank {c} issued barrier as call #21 of the world group, where ranks "
                           rf"{others(c)} issued all_reduce \(1024 elements\): a desync; rank "
                           rf"{c} made one all_reduce fewer \(20 against 21\)")),
    "size": (["--count-rank", "{c}", "--count-at", "21", "--other-count", "512"],
             lambda c: (rf"rank {c} issued all_reduce with 512 elements as call #21 of the world "
                        rf"group, where ranks {others(c)} issued all_reduce \(1024 elements\): "
                        rf"a desync")),
}


@pytest.mark.parametrize("fault,culprit", [("skip", 2), ("skip", 0), ("barrier", 2),
                                           ("size", 0)])
def test_calls_that_return_once_queued_name_the_rank_behind_or_apart(tmp_path, fault, culprit):
    timeout = 3
    args, expected = QUEUED_FAULTS[fault]
    r = run_ccrun("--standalone", "--nproc-per-node", "4", "--hang-timeout", str(timeout),
                  "--stop-grace", "5", "--log-dir", str(tmp_path),
                  "--no-python", binary("tests", "collectives_queued_worker"), "--steps", "40",
                  *[a.format(c=culprit) for a in args], timeout=120)
    err = r.stderr
    assert r.returncode == 1, err[-4000:]
    m = re.search(rf"the job is hung \(--hang-timeout {timeout}s\): {expected(culprit)}.*; no rank "
                  r"has progressed for ([\d.]+)s \(none waits in a call", err)
    assert m, err[-4000:]
    assert float(m.group(1)) <= timeout + 2, "the verdict came late"
    rep = report(str(tmp_path))
    assert rep["hang"]["culprits"] == [culprit]
    assert rep["root_cause"]["cause"] == "hang" and rep["root_cause"]["rank"] == culprit


class StandInRas:
    """NCCL's RAS server as a 2.24+ NCCL process answers `ncclras` (nccl_ras.h):
    the protocol handshake, OK to TIMEOUT, then the status, then EOF."""
    STATUS = "NCCL version 2.24.3+cuda12.4\n\nJob summary\n===========\n\nErrors\n======\n\nDEAD\n"

    def __init__(self):
        import socket
        import threading
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.heard = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f:
                for raw in f:
                    line = raw.decode().strip()
                    self.heard.append(line)
                    if line.startswith("CLIENT PROTOCOL"):
                        f.write(b"SERVER PROTOCOL 2\n")
                    elif line.startswith("TIMEOUT"):
                        f.write(b"OK\n")
                    elif line.upper().endswith("STATUS"):
                        f.write(self.STATUS.encode())
                        f.flush()
                        break
                    f.flush()


def test_a_hang_keeps_nccls_ras_status_in_the_incident(tmp_path):
    ras = StandInRas()
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "2",
                  "--stop-grace", "2", "--log-dir", str(tmp_path),
                  *worker("--steps", "20", "--sleep-rank", "1", "--sleep-before", "5",
                          "--sleep-s", "300"),
                  env={"NCCL_RAS_ADDR": f"127.0.0.1:{ras.port}"}, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "NCCL's RAS answered" in r.stderr, r.stderr
    [incident] = glob.glob(os.path.join(str(tmp_path), "*", "incident_0"))
    assert open(os.path.join(incident, "nccl_ras.txt")).read() == StandInRas.STATUS
    assert ras.heard[0] == "CLIENT PROTOCOL 2" and ras.heard[1].startswith("TIMEOUT ")
    assert ras.heard[2] == "VERBOSE STATUS"


def test_without_an_nccl_ras_server_the_incident_has_no_ras_file(tmp_path):
    free = free_port()  # nothing listens there
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "2",
                  "--stop-grace", "2", "--log-dir", str(tmp_path),
                  *worker("--steps", "20", "--sleep-rank", "1", "--sleep-before", "5",
                          "--sleep-s", "300"),
                  env={"NCCL_RAS_ADDR": f"127.0.0.1:{free}"}, timeout=120)
    assert r.returncode == 1, r.stderr
    [incident] = glob.glob(os.path.join(str(tmp_path), "*", "incident_0"))
    assert not os.path.exists(os.path.join(incident, "nccl_ras.txt"))
    assert os.path.exists(os.path.join(incident, "logs", "rank_1.log"))


def test_256_ranks_in_three_places_give_three_classes_and_a_short_console():
    # Ranks that only write their progress records (tests/tools/collectives_progress_sim.cpp):
    # 254 wait in all_reduce #51, rank 63 never issued it, rank 200 stopped itself before it.
    began = time.monotonic()
    r = run_ccrun("--standalone", "--nproc-per-node", "256", "--hang-timeout", "2",
                  "--stop-grace", "5", "--no-python", binary("tests", "collectives_progress_sim"),
                  "--calls", "50", "--behind", "63", "--stopped", "200", timeout=180)
    assert r.returncode == 1, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    [start] = [i for i, l in enumerate(lines) if "the job is hung" in l]
    [end] = [i for i, l in enumerate(lines) if "collecting the stacks" in l]
    verdict = lines[start:end]
    assert len(verdict) <= 40, verdict
    assert re.search(r"ranks 63,200 have not issued all_reduce #51 of the world group \(1024 "
                     r"elements\), which ranks 0-62,64-199,201-255 have waited in for ([\d.]+)s; "
                     r"rank 200: its process is stopped", verdict[0]), verdict[0]
    waited = float(re.search(r"waited in for ([\d.]+)s", verdict[0]).group(1))
    assert waited <= 2 + 2, "the verdict came late"  # at most 2 s after the 2 s timeout
    classes = [l.split("ccrun:   ", 1)[1] for l in verdict[1:]]
    assert classes == [
        "ranks 0-62,64-199,201-255 (254): waiting in all_reduce #51 of the world group (1024 elements)",
        "rank 63: not in a collective; last returned from all_reduce #50 of the world group (1024 elements)",
        "rank 200: not in a collective; last returned from all_reduce #50 of the world group (1024 "
        "elements); its process is stopped (state T: SIGSTOP, or Ctrl-Z)"]
    assert time.monotonic() - began < 60
