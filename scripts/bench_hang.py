#!/usr/bin/python3
"""What watching for hangs costs, and what a hang gets, ccrun beside torchrun
(torch 1.13 from Debian, patched at run time by scripts/torchrun_patched.py)
in one run; see scripts/bench-hang.sh, which calls this, and docs/hangs.md.

Rows (the jobs are examples/hang_demo.py: torch 1.13 on gloo, nothing of
ccrun in the script; under ccrun its start-up hook records every all_reduce):
  - the launcher's own CPU while a healthy 4-rank job runs: ccrun's agent
    samples every record each second, torchrun's polls its workers every
    monitor interval (0.1 s);
  - a rank that stops: seconds from the hang timeout to ccrun's verdict, and
    what torchrun says in the same time;
  - the per-call cost of recording progress: ccrun's collectives (the NCCL
    path over no-op seams, tests/tools/collectives_dispatch_bench, best of
    several runs, and instructions per call under callgrind when valgrind is
    there), and the Python hook on torch's all_reduce (scripts/bench_python_hook.py).

  bench_hang.py BUILD_DIR [--smoke]   prints a Markdown table; the section
                                      text goes to docs/benchmarks.md unless --smoke
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = os.environ.get("CCRUN_TEST_PYTHON", "/usr/bin/python3")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, every thread of it


def wait_for_line(stream, word, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        if word in line:
            return True
    return False


def agent_cpu_percent(cmd, seconds):
    """The launcher's own CPU (not its workers') over `seconds` of a running job."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         start_new_session=True)
    try:
        if not wait_for_line(p.stdout, "step 100", 120):
            raise RuntimeError(f"the job did not reach step 100: {cmd}")
        t0, c0 = time.monotonic(), cpu_ticks(p.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), cpu_ticks(p.pid)
        return 100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


HANG = ["--steps", "100000", "--sleep-rank", "2", "--sleep-before", "200", "--sleep-s", "600"]


def verdict_latency(ccrun, demo, timeout_s):
    """Seconds from the hang timeout to ccrun's verdict (its "waited ... for X s")."""
    r = subprocess.run([ccrun, "--standalone", "--nproc-per-node", "4", "--hang-timeout",
                        str(timeout_s), "--stop-grace", "1", demo, *HANG], capture_output=True,
                       text=True, timeout=180)
    m = re.search(r"the job is hung .* waited in for ([\d.]+)s", r.stderr)
    if not m:
        raise RuntimeError("no verdict:\n" + r.stderr[-2000:])
    return float(m.group(1)) - timeout_s


def torchrun_says(torchrun, demo, seconds):
    """What torchrun prints within `seconds` of the same hang (read before it is killed)."""
    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.Popen([*torchrun, "--standalone", "--nproc_per_node", "4", demo, *HANG],
                             stdout=log, stderr=log, text=True, start_new_session=True)
        started = time.time()
        while time.time() - started < 120:  # from rank 2's stop on (step 200)
            log.seek(0)
            if "step 100" in log.read():
                break
            time.sleep(0.1)
        time.sleep(seconds)
        log.seek(0)
        text = log.read()
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    # Its start-up banner (the OMP_NUM_THREADS notice) and the job's steps are no report.
    said = [l for l in text.splitlines() if l.strip() and not l.startswith("step") and
            "OMP_NUM_THREADS" not in l and "*****" not in l and l != "WARNING:torch.distributed.run:"]
    return "nothing" if not said else f"{len(said)} line(s), no culprit"


def dispatch_ns(bench, calls, runs, record):
    best = {}
    for _ in range(runs):
        out = subprocess.run([bench, *(["--record"] if record else []), str(calls)],
                             capture_output=True, text=True, timeout=300).stdout
        for m in re.finditer(r'"path":"([^"]+)","ns_per_call":([\d.]+)', out):
            best[m.group(1)] = min(best.get(m.group(1), 1e9), float(m.group(2)))
    return best


def dispatch_instructions(bench, calls, record):
    """Instructions per call under callgrind (repeatable whatever the load)."""
    if not shutil.which("valgrind"):
        return None
    with tempfile.TemporaryDirectory() as d:
        def total(n):
            out = os.path.join(d, f"cg.{n}")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            bench, *(["--record"] if record else []), str(n)],
                           capture_output=True, text=True, timeout=600)
            with open(out) as f:
                return int(re.search(r"^summary: (\d+)", f.read(), re.M).group(1))
        return (total(2 * calls) - total(calls)) / calls / 2  # two paths per run


def python_hook_rows(calls):
    """{call: {"C" / "Python": (through the wrapper, torch's own call, the median difference
    between neighbouring rounds)}} from bench_python_hook.py's table; no "C" where the C
    wrappers are not built."""
    out = subprocess.run([PY, os.path.join(HERE, "bench_python_hook.py"), str(calls)],
                         capture_output=True, text=True, timeout=600).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(all_reduce\(1 element\)|barrier\(\)|DDP forward \(Linear 16x16\)|"
                     r"DDP forward \+ backward|collective wrapper, add_\(0\) inside)\s+(.*)", line)
        if not m:
            continue
        cols = m.group(2).split()
        if cols[0] == "n/a":  # n/a, then the Python wrapper's 4 columns
            rows[m.group(1)] = {"Python": (int(cols[1]), int(cols[2]), int(cols[4]))}
        else:  # hooked, original, best difference, median difference: C, then Python
            rows[m.group(1)] = {"C": (int(cols[0]), int(cols[1]), int(cols[3])),
                                "Python": (int(cols[4]), int(cols[5]), int(cols[7]))}
    return rows


def main():
    build = sys.argv[1]
    smoke = "--smoke" in sys.argv
    os.environ["PYTHON_EXEC"] = PY  # Debian's torch is in /usr/bin/python3
    ccrun = os.path.join(build, "launcher", "ccrun")
    bench = os.path.join(build, "tests", "collectives_dispatch_bench")
    torchrun = [PY, os.path.join(HERE, "torchrun_patched.py")]
    seconds = 2 if smoke else 20
    rows = ["| measurement | ccrun | torchrun (torch 1.13) | ratio |", "|---|---|---|---|"]

    demo = os.path.join(REPO, "examples", "hang_demo.py")
    c = agent_cpu_percent([ccrun, "--standalone", "--nproc-per-node", "4", demo, "--steps",
                           "10000000"], seconds)
    t = agent_cpu_percent([*torchrun, "--standalone", "--nproc_per_node", "4", demo, "--steps",
                           "10000000"], seconds)
    rows.append(f"| launcher's own CPU while a healthy 4-rank job runs, % of one core ({seconds} s; "
                f"ccrun samples every progress record each second) | {c:.2f} | {t:.2f} | " +
                (f"{t / c:.1f}x less |" if c > 0 else "n/a (below one clock tick) |"))

    timeout_s = 2 if smoke else 5
    lat = verdict_latency(ccrun, demo, timeout_s)
    said = torchrun_says(torchrun, demo, timeout_s + (3 if smoke else 10))
    rows.append(f"| a rank stops: from the hang timeout ({timeout_s} s) to the verdict naming it, s | "
                f"{lat:.1f} | {said} within {timeout_s + (3 if smoke else 10)} s (gloo's own "
                f"timeout: 1800 s) | |")

    calls, runs = (20000, 1) if smoke else (1000000, 5)
    plain, rec = dispatch_ns(bench, calls, runs, False), dispatch_ns(bench, calls, runs, True)
    for path in sorted(plain):
        rows.append(f"| ccrun collectives, {path}: ns per all_reduce + wait (no-op device seams, "
                    f"best of {runs}), without / with a progress record | {plain[path]:.1f} / "
                    f"{rec.get(path, float('nan')):.1f} ({rec.get(path, 0) - plain[path]:+.1f}) | "
                    f"| |")
    if not smoke:
        i0 = dispatch_instructions(bench, 20000, False)
        i1 = dispatch_instructions(bench, 20000, True)
        if i0 is not None:
            rows.append(f"| ccrun collectives: instructions per call (callgrind, both paths), "
                        f"without / with a progress record | {i0:.0f} / {i1:.0f} "
                        f"({i1 - i0:+.0f}) | | |")

    for call, kinds in python_hook_rows(1000 if smoke else 10000).items():
        for kind, (hooked, original, paired) in kinds.items():
            rows.append(f"| torch {call}, world size 1 (gloo), ns per call (best rounds; the "
                        f"difference: the median between neighbouring rounds): through the "
                        f"start-up hook's {kind} wrapper | {hooked} | {original} (torch's own) | "
                        f"{paired:+d} ns ({paired / original * 100:+.1f}%) |")

    table = "\n".join(rows)
    print(table)
    if not smoke:
        load = open("/proc/loadavg").read().split()[0]
        section = (f"Measured by `scripts/bench-hang.sh` on {time.strftime('%Y-%m-%d', time.gmtime())}, "
                   f"{os.cpu_count()} cores, load average {load} at the start. The launcher's CPU is "
                   "its own process (every thread), not its workers'. Both launchers run the same "
                   "torch job (examples/hang_demo.py).\n\n"
                   + table)
        subprocess.run([sys.executable, os.path.join(HERE, "write_bench_section.py"),
                        os.path.join(REPO, "docs", "benchmarks.md"), "bench-hang",
                        "Hang detection", section], check=True)


if __name__ == "__main__":
    # The launchers killed mid-job (both, to time their CPU; torchrun, after the hang) leave
    # their temporary folders (ccrun's run root, torchrun's torchelastic_*): in one of ours.
    tmp = tempfile.mkdtemp(prefix="bench-hang-")
    os.environ["TMPDIR"] = tmp
    try:
        main()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
