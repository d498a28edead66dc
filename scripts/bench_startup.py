"""Time to training, the bench behind scripts/bench-startup.sh: a 4-rank DDP job over gloo
(examples/restart_demo.py) under ccrun cold, ccrun --warm-start and torchrun 1.13, the three
alternating run by run. Each run launches the job, rank 1 crashes after step 20, the launcher
restarts the group once. From the ranks' own wall-clock marks:

  - launch -> every rank's first step, and each phase of the slowest rank;
  - the crash -> every rank's first step of the next attempt, and each phase;
  - with strace (full runs), the file-system metadata calls (opens and stats) the whole node
    made during a launch to the first steps.

    bench_startup.py --ccrun BUILD/launcher/ccrun --python /usr/bin/python3 --torchrun CMD...
                     [--runs 3] [--smoke] [--no-strace] [--nproc 4] [--device cpu|cuda]

--device cuda trains each rank on its own GPU over NCCL (--nproc at most the GPUs). The torchrun
column is named after the torch that --python imports.

Prints a Markdown table: medians, and ratios against torchrun.
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "..", "examples", "restart_demo.py")
MARK = re.compile(r"BENCH (\d+) (\d+) (\w+) ([\d.]+)")
PHASES = ["main", "imports", "group", "step"]
PHASE_NAMES = {"main": "to the script's first line", "imports": "imports",
               "group": "process group", "step": "first step"}
METADATA = "open,openat,openat2,stat,lstat,newfstatat,statx,access,faccessat,faccessat2,readlink"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(args):
    job = [JOB, "--crash-at", "20", "--steps", "40", "--device", args.device]
    port = str(free_port())
    common = ["--nproc-per-node", str(args.nproc), "--max-restarts", "1"] + (
        ["--standalone"] if args.standalone else ["--master-port", port])
    return {
        "ccrun cold": [args.ccrun] + common + job,
        "ccrun warm": [args.ccrun, "--warm-start"] + common + job,
        "torchrun": args.torchrun + ["--nproc_per_node", str(args.nproc), "--max_restarts", "1"]
        + (["--standalone"] if args.standalone else ["--master_port", port])
        + ["--monitor_interval", "0.1"] + job,
    }


def env_for(args):
    env = dict(os.environ)
    env["PYTHON_EXEC"] = args.python
    env.pop("CCRUN_LOG_LEVEL", None)
    return env


def run_once(cmd, args):
    """One launch: {(attempt, rank, phase): time}, the launch time, the output."""
    t0 = time.time()
    p = subprocess.run(cmd, env=env_for(args), capture_output=True, text=True, timeout=300)
    marks = {}
    for line in (p.stdout + p.stderr).splitlines():
        m = MARK.search(line)
        if m:
            marks[(int(m[1]), int(m[2]), m[3])] = float(m[4])
    if p.returncode != 0 or not any(k[0] == 1 and k[2] == "step" for k in marks):
        sys.exit(f"bench-startup: {cmd[0]} failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}")
    return marks, t0


def attempt_figures(marks, attempt, origin):
    """(seconds from `origin` to every rank's first step, {phase: seconds} of the slowest rank)."""
    ranks = sorted({k[1] for k in marks if k[0] == attempt})
    missing = [r for r in ranks if (attempt, r, "step") not in marks]
    if missing:
        raise KeyError(f"attempt {attempt}: no first step from rank(s) {missing}")
    slowest = max(ranks, key=lambda r: marks[(attempt, r, "step")])
    total = marks[(attempt, slowest, "step")] - origin
    phases, prev = {}, origin
    for phase in PHASES:
        at = marks.get((attempt, slowest, phase))
        if at is not None:
            phases[phase] = max(0.0, at - prev)
            prev = at
    return total, phases


def metadata_calls(cmd, args):
    """File-system metadata calls of the whole process tree, for one launch of the job without a
    crash (strace -f -c)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "strace")
        short = [a for a in cmd]
        i = short.index("--crash-at")
        short[i + 1] = "0"
        short[short.index("--steps") + 1] = "3"
        subprocess.run(["strace", "-f", "-c", "-e", "trace=" + METADATA, "-o", out] + short,
                       env=env_for(args), capture_output=True, text=True, timeout=300)
        calls = 0
        for line in open(out):
            parts = line.split()
            if len(parts) >= 5 and parts[-1] in METADATA.split(",") and parts[3].isdigit():
                calls += int(parts[3])
        return calls


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ccrun", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--torchrun", nargs="+", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--no-strace", action="store_true", help="skip the metadata-call count")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--standalone", action="store_true",
                    help="launch with --standalone, not a static --master-port: torch 2.x's "
                    "torchrun restarts a static job's workers into the store of the attempt "
                    "before, where Gloo reads its peers' old addresses")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()
    peer = "torchrun " + subprocess.run(
        [args.python, "-c", "import torch; print('.'.join(torch.__version__.split('.')[:2]))"],
        capture_output=True, text=True).stdout.strip()
    runs = 1 if args.smoke else args.runs
    launch = {m: [] for m in ("ccrun cold", "ccrun warm", "torchrun")}
    restart = {m: [] for m in launch}
    launch_phases = {m: {p: [] for p in PHASES} for m in launch}
    restart_phases = {m: {p: [] for p in PHASES} for m in launch}
    for _ in range(runs):
        for mode, cmd in commands(args).items():
            marks, t0 = run_once(cmd, args)
            try:
                total, phases = attempt_figures(marks, 0, t0)
            except KeyError as e:
                sys.exit(f"bench-startup: {mode}: {e}")
            launch[mode].append(total)
            for p, v in phases.items():
                launch_phases[mode][p].append(v)
            crash = next(at for (a, _, phase), at in marks.items() if a == 0 and phase == "crash")
            total, phases = attempt_figures(marks, 1, crash)
            restart[mode].append(total)
            for p, v in phases.items():
                restart_phases[mode][p].append(v)
    meta = {}
    if not args.smoke and not args.no_strace and shutil.which("strace"):
        for mode, cmd in commands(args).items():
            meta[mode] = metadata_calls(cmd, args)

    def row(label, values, fmt="%.2f"):
        t = median(values["torchrun"])
        cells = []
        for mode in ("ccrun cold", "ccrun warm", "torchrun"):
            cells.append(fmt % median(values[mode]))
        # a phase a warm start skips (0 s) has no ratio
        ratio = lambda m: "%.1fx" % (t / median(values[m])) if median(values[m]) >= 0.001 else "—"
        return "| %s | %s | %s / %s |" % (label, " | ".join(cells), ratio("ccrun cold"),
                                          ratio("ccrun warm"))

    lines = ["| from → to (seconds, median of %d) | ccrun cold | ccrun --warm-start | %s |"
             " torchrun ÷ ccrun (cold / warm) |" % (runs, peer), "|---|---|---|---|---|"]
    lines.append(row("**launch → every rank's first step**", launch))
    for p in PHASES:
        lines.append(row("&nbsp;&nbsp;slowest rank: " + PHASE_NAMES[p],
                         {m: launch_phases[m][p] for m in launch}, "%.3f"))
    lines.append(row("**one rank crashes → every rank's first step again**", restart))
    for p in PHASES:
        name = "the crash " + PHASE_NAMES[p] if p == "main" else PHASE_NAMES[p]
        lines.append(row("&nbsp;&nbsp;slowest rank: " + name,
                         {m: restart_phases[m][p] for m in launch}, "%.3f"))
    if meta:
        lines.append("| file-system metadata calls (opens, stats) on the node, launch to first "
                     "steps, %d ranks | %d | %d | %d | %.1fx / %.1fx fewer |" % (
                         args.nproc, meta["ccrun cold"], meta["ccrun warm"], meta["torchrun"],
                         meta["torchrun"] / max(1, meta["ccrun cold"]),
                         meta["torchrun"] / max(1, meta["ccrun warm"])))
    warm_restart = median(restart["ccrun warm"])
    t_restart, t_launch = median(restart["torchrun"]), median(launch["torchrun"])
    checks = [
        ("crash → first step ≤ 0.2 s", warm_restart <= 0.2),
        ("crash → first step ≥ 15x sooner than torchrun", t_restart / warm_restart >= 15),
        ("launch → first step ≥ 3x sooner than torchrun",
         t_launch / median(launch["ccrun warm"]) >= 3),
    ]
    print("\n".join(lines))
    print()
    print("Targets (--warm-start): " + "; ".join(
        "%s %s" % (name, "✓" if ok else "✗") for name, ok in checks))


if __name__ == "__main__":
    main()
