# ctest: RUN_SERIAL
# ctest: LABELS slow
"""Chaos: for CHAOS_SECONDS, random SIGINT, SIGTERM, SIGKILL and SIGSTOP (each
stopped process continued a moment later) to the agents, the workers and the
store daemon of running 3-node jobs in the namespace cluster. Jobs that end
are replaced by new ones; a killed daemon is restarted (empty). Afterwards:
no crash report, every agent ended within its deadline, every exit code is
one the agent's history explains, and no process is left on any node.

The chaos is drawn from one seed, printed when the test starts and again in
any failure's message ("chaos seed 1732803021: replay with
CCRUN_CHAOS_SEED=1732803021"). CCRUN_CHAOS_SEED=<n> replays a run's choices
of target, signal and pause (what the processes do in between is the
machine's); without it the seed is the clock's seconds. CCRUN_CHAOS_SECONDS
sets the length (60 s; 600 s in the soak test cluster.test_chaos.soak)."""
import os
import random
import re
import signal
import subprocess
import time

from cluster import is_janitor
from helpers import binary

CHAOS_SECONDS = float(os.environ.get("CCRUN_CHAOS_SECONDS", "60"))
FAST = ("keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=20,"
        "last_call_timeout=1,is_host=false")
STOP_GRACE = 2
# After the chaos, an agent must end within this many seconds: a job's work
# (4 s), a keep-alive window (1.5 s), a stop grace (2 s), a join timeout
# (20 s) for a job whose other agents were killed while it formed, and slack
# for a loaded 2-core machine.
DRAIN_SECONDS = 60
CRASH_WORDS = ("Segmentation", "munmap_chunk", "double free", "malloc(", "terminate called",
               "core dumped", "Aborted", "AddressSanitizer", "runtime error")


class Agent:
    def __init__(self, proc, job):
        self.proc, self.job = proc, job
        self.signals = []  # what the chaos sent to this agent itself


def start_daemon(node):
    return node.run([binary("store", "ccrun-rendezvous"), "--host", node.addr,
                     "--port", "29400"], name=f"daemon-{time.time():.3f}")


def start_job(cluster, job):
    endpoint = f"{cluster.nodes[0].addr}:29400"
    agents = []
    for node in cluster.nodes:
        argv = [binary("launcher", "ccrun"), "--nnodes", "2:3", "--nproc-per-node", "2",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", f"chaos{job}",
                "--rdzv-conf", FAST, "--max-restarts", "3", "--stop-grace", str(STOP_GRACE),
                "--no-python", "/bin/sh", "-c", "echo up; sleep 4"]
        agents.append(Agent(node.run(argv, name=f"job{job}-agent{node.index}"), job))
    return agents


def alive(proc):
    return proc.popen.poll() is None


def send(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def chaos_seed():
    """The run's seed: CCRUN_CHAOS_SEED's, else the clock's seconds."""
    given = os.environ.get("CCRUN_CHAOS_SEED", "").strip()
    return int(given) if given else int(time.time())


def test_chaos(make_cluster, capsys):
    seed = chaos_seed()
    replay = f"chaos seed {seed}: replay with CCRUN_CHAOS_SEED={seed}"
    # On the console as the test starts, past pytest's capture (ctest -V and
    # a test killed at ctest's timeout show it), and in pytest's report of a
    # failure, whatever ended the test.
    with capsys.disabled():
        print(replay, flush=True)
    try:
        run_chaos(make_cluster, seed)
    except BaseException as e:
        e.add_note(replay)
        raise


def run_chaos(make_cluster, seed):
    cluster = make_cluster(3)
    rng = random.Random(seed)
    daemon = start_daemon(cluster.nodes[0])
    daemons = [daemon]
    time.sleep(0.3)
    job = 0
    agents = start_job(cluster, job)
    everyone = list(agents)
    stopped = []  # (pid, continue at)
    actions = 0
    end = time.time() + CHAOS_SECONDS
    while time.time() < end:
        now = time.time()
        for pid, at in [s for s in stopped if s[1] <= now]:
            send(pid, signal.SIGCONT)
            stopped.remove((pid, at))
        if daemon.popen.poll() is not None:
            daemon = start_daemon(cluster.nodes[0])
            daemons.append(daemon)
        if not any(alive(a.proc) for a in agents):
            job += 1
            agents = start_job(cluster, job)
            everyone += agents
        time.sleep(rng.uniform(0.1, 0.8))
        kind = rng.choice(["agent", "agent", "worker", "worker", "daemon"])
        sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP])
        if kind == "daemon":
            if sig in (signal.SIGINT, signal.SIGTERM) and rng.random() < 0.5:
                continue  # the daemon is killed less often than the rest
            target = daemon.pid
        elif kind == "agent":
            live = [a for a in agents if alive(a.proc)]
            if not live:
                continue
            a = rng.choice(live)
            target = a.proc.pid
            a.signals.append(sig)
        else:
            # Not the agents' janitors: one killed, and its agent killed later, leaves the
            # agent's files in /dev/shm and /tmp with nobody to remove them.
            workers = [p for a in agents if alive(a.proc) for p in a.proc.descendants()
                       if not is_janitor(p)]
            if not workers:
                continue
            target = rng.choice(workers)
        if send(target, sig):
            actions += 1
            if sig == signal.SIGSTOP:
                stopped.append((target, time.time() + rng.uniform(0.2, 3.0)))
    for pid, _ in stopped:
        send(pid, signal.SIGCONT)
    # Agents must end by themselves; whatever is left at the deadline failed.
    deadline = time.time() + DRAIN_SECONDS
    late = []
    for a in everyone:
        try:
            a.proc.popen.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            late.append(a)
    for d in daemons:
        if d.popen.poll() is None:
            d.popen.terminate()
            d.popen.wait(10)
    details = []
    for a in everyone:
        rc = a.proc.popen.poll()
        err = a.proc.err()
        name = os.path.basename(a.proc.err_path)
        for w in CRASH_WORDS:
            assert w not in err, f"{name}: {w!r} in stderr:\n{err[-3000:]}"
        killed = signal.SIGKILL in a.signals
        if a in late:
            details.append(f"{name}: still running {DRAIN_SECONDS}s after the chaos")
        elif rc == -signal.SIGKILL:
            if not killed:
                details.append(f"{name}: killed by SIGKILL nobody sent it")
        elif rc in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            # 128+N for a stop signal it received itself, or one another node
            # of its job received (the close carries it, and says so). Which
            # one came first is the kernel's choice when several were pending
            # (sent while it was stopped: the lowest number is delivered first).
            stops = {s for s in a.signals if s in (signal.SIGINT, signal.SIGTERM)}
            elsewhere = "the job was stopped on another node: ccrun received " in err
            if rc - 128 not in stops and not elsewhere:
                details.append(f"{name}: exit {rc} but it received only {sorted(stops)}")
        elif rc == 1:
            # A failure is always explained on stderr.
            if not re.search(r"ccrun: (job '.*' failed|lost the store|rendezvous|store |.*closed)",
                             err):
                details.append(f"{name}: exit 1 without a reason:\n{err[-1500:]}")
        elif rc == 5:
            # An agent that reached the store after its job had ended (stopped
            # on another node first) is told so and starts nothing.
            if "already ran on this store" not in err or "nothing was started here" not in err:
                details.append(f"{name}: exit 5 without its reason:\n{err[-1500:]}")
        elif rc != 0:
            details.append(f"{name}: unexpected exit code {rc}:\n{err[-1500:]}")
    assert not details, "\n".join(details)
    # Nothing of any job is left on any node.
    time.sleep(0.5)
    for node in cluster.nodes:
        r = subprocess.run(["ip", "netns", "pids", node.ns], capture_output=True, text=True)
        left = r.stdout.split()
        cmds = []
        for pid in left:
            try:
                cmds.append(open(f"/proc/{pid}/cmdline").read().replace("\0", " "))
            except OSError:
                pass
        assert not cmds, f"node {node.index}: processes left: {cmds}"
    assert actions > CHAOS_SECONDS  # the chaos did act (about 2 signals a second)
    print(f"chaos: {actions} signals, {job + 1} jobs, {len(daemons)} daemons, seed {seed}")
