#!/usr/bin/python3
"""What the workers' output costs the launcher, ccrun beside torchrun (torch 1.13
from Debian, patched at run time by scripts/torchrun_patched.py) in one run; see
scripts/bench-output.sh, which calls this, and docs/cli.md (--collapse-output).

The job: 8 ranks, each printing 25 lines every 20 ms (1,250 lines a second, 10,000
together), the same line on every rank at the same moment (a warning every rank
prints: what --collapse-output is for). Each row is the launcher process's own CPU
(every thread of it, not its workers') over a window of the running job, and the
lines a second that reached its console:
  - ccrun: the console alone; --collapse-output; --log-dir (each rank's files too);
    both;
  - torchrun: its default (the workers write straight to the console: nothing
    passes through torchrun); --tee 3 with --log_dir (its tail threads copy each
    rank's files to the console, as ccrun's default does).

  bench_output.py BUILD_DIR [--smoke]   prints a Markdown table; the section text
                                        goes to docs/benchmarks.md unless --smoke
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = os.environ.get("CCRUN_TEST_PYTHON", "/usr/bin/python3")

WORKER = """import sys, time
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < {seconds}:
    for i in range(25):
        print(f"UserWarning: the same on every rank ({{n}})")
        n += 1
    sys.stdout.flush()
    time.sleep(0.02)
"""


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, every thread of it


def measure(cmd, warmup, window):
    """The launcher's CPU (% of one core) and its console's lines a second over `window`
    seconds, from `warmup` seconds after the job's first line."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    lines = [0]

    def count():
        for _ in p.stdout:
            lines[0] += 1
    reader = threading.Thread(target=count, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while lines[0] == 0 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the launcher's own start (torchrun: its imports, seconds)
        if lines[0] == 0:
            raise RuntimeError(f"no line on the console within 120 s: {cmd}")
        time.sleep(warmup)
        t0, c0, l0 = time.monotonic(), cpu_ticks(p.pid), lines[0]
        time.sleep(window)
        t1, c1, l1 = time.monotonic(), cpu_ticks(p.pid), lines[0]
        return 100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0), (l1 - l0) / (t1 - t0)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        reader.join(5)


def main():
    build = sys.argv[1]
    smoke = "--smoke" in sys.argv
    warmup, window = (1, 2) if smoke else (2, 10)
    os.environ["PYTHON_EXEC"] = PY  # Debian's torch is in /usr/bin/python3
    ccrun = os.path.join(build, "launcher", "ccrun")
    torchrun = [PY, os.path.join(HERE, "torchrun_patched.py")]
    tmp = tempfile.mkdtemp(prefix="ccrun-bench-output-")
    os.environ["TMPDIR"] = tmp  # torchrun's torchelastic_* folders: in ours, removed with it
    try:
        script = os.path.join(tmp, "print_lines.py")
        with open(script, "w") as f:
            f.write(WORKER.format(seconds=warmup + window + 5))
        logs = os.path.join(tmp, "logs")
        runs = [
            ("ccrun, the console", [ccrun, "--standalone", "--nproc-per-node", "8", script]),
            ("ccrun --collapse-output", [ccrun, "--standalone", "--nproc-per-node", "8",
                                         "--collapse-output", script]),
            ("ccrun --log-dir (console and files)", [ccrun, "--standalone", "--nproc-per-node", "8",
                                                     "--log-dir", logs, script]),
            ("ccrun --collapse-output --log-dir", [ccrun, "--standalone", "--nproc-per-node", "8",
                                                   "--collapse-output", "--log-dir", logs, script]),
            ("torchrun (the workers write to the console themselves)",
             [*torchrun, "--standalone", "--nproc_per_node", "8", script]),
            ("torchrun --tee 3 --log_dir (its tail threads copy the files to the console)",
             [*torchrun, "--standalone", "--nproc_per_node", "8", "--tee", "3", "--log_dir",
              logs, script]),
        ]
        rows = ["| 8 ranks printing 10,000 lines a second together | launcher CPU, % of one core "
                "| console lines a second |", "|---|---|---|"]
        for label, cmd in runs:
            cpu, rate = measure(cmd, warmup, window)
            rows.append(f"| {label} | {cpu:.1f} | {rate:,.0f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = "\n".join(rows)
    print(table)
    if not smoke:
        load = open("/proc/loadavg").read().split()[0]
        section = (f"Measured by `scripts/bench-output.sh` on {time.strftime('%Y-%m-%d', time.gmtime())}, "
                   f"{os.cpu_count()} cores, load average {load} at the start, over {window} s of each "
                   "job (after a warm-up of the same job). The launcher's CPU is its own process "
                   "(every thread), not its workers'; ccrun's agent runs in it.\n\n" + table)
        subprocess.run([sys.executable, os.path.join(HERE, "write_bench_section.py"),
                        os.path.join(REPO, "docs", "benchmarks.md"), "bench-output",
                        "Workers' output", section], check=True)


if __name__ == "__main__":
    main()
