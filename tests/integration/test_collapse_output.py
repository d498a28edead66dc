"""--collapse-output through the real ccrun: identical lines of several ranks printed once with
their ranks, different lines kept apart, tracebacks whole, no line lost or reordered within a
rank (a seeded fuzz over partial writes), the log files raw, and a line alone held no longer than
about a second."""
import os
import random
import re
import subprocess
import sys
import time

from helpers import ccrun_cmd, free_port, run_ccrun

PY = sys.executable  # Debian's python3
PREFIX = re.compile(r"^\[([\d,\-]+)\]:(.*)$")


def ranks_of(text):
    """'0-2,5' -> [0, 1, 2, 5]"""
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def after_all_started(script, nproc, where):
    """`script`, run once every rank has started: the collapse's window is 0.5 s, and eight
    Pythons starting on a loaded machine may be further apart than that."""
    return ("import os, time\n"
            f"open(os.path.join({str(where)!r}, os.environ['RANK']), 'w').close()\n"
            f"while len(os.listdir({str(where)!r})) < {nproc}:\n"
            "    time.sleep(0.01)\n" + script)


def collapse_run(script, nproc, *extra, timeout=120, barrier=None):
    if barrier is not None:
        barrier.mkdir()
        script = after_all_started(script, nproc, barrier)
    return run_ccrun("--master-port", str(free_port()), "--nproc-per-node", str(nproc),
                     "--collapse-output", *extra, "--no-python", PY, "-c", script, timeout=timeout)


def test_eight_ranks_printing_one_warning_give_one_line(tmp_path):
    r = collapse_run("print('UserWarning: the same on every rank')", 8, barrier=tmp_path / "up")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[0-7]:UserWarning: the same on every rank\n"


def test_seven_the_same_and_one_different_give_two_lines(tmp_path):
    r = collapse_run("import os; print('odd one' if os.environ['RANK'] == '5' else 'same')", 8,
                     barrier=tmp_path / "up")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0-4,6,7]:same", "[5]:odd one"]


TRACEBACKS = """
import os
rank = int(os.environ["RANK"])
try:
    raise ValueError("broken" if rank != 2 else "broken differently")
except ValueError:
    import traceback
    traceback.print_exc()
"""


def test_a_traceback_stays_whole_grouped_by_the_ranks_that_printed_it(tmp_path):
    r = collapse_run(TRACEBACKS, 4, barrier=tmp_path / "up")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if PREFIX.match(l)]
    blocks = {}
    for line in lines:
        who, text = PREFIX.match(line).groups()
        blocks.setdefault(who, []).append(text)
    assert sorted(blocks) == ["0,1,3", "2"], lines
    for who, texts in blocks.items():
        assert texts[0] == "Traceback (most recent call last):", texts
        assert texts[-1] == ("ValueError: broken" if who != "2" else "ValueError: broken differently")
    # Each block's lines are contiguous: no line of one inside the other.
    whos = [PREFIX.match(l).group(1) for l in lines]
    assert whos == sorted(whos, key=lambda w: whos.index(w)), whos


FUZZ = """
import os, random, sys, time
rank = int(os.environ["RANK"])
rng = random.Random(int(sys.argv[1]) * 100 + rank)
words = ["alpha", "beta", "gamma", "delta"]
for i in range(int(sys.argv[2])):
    line = rng.choice(words) if rng.random() < 0.7 else f"rank {rank} line {i}"
    cut = rng.randrange(len(line) + 1)
    sys.stdout.write(line[:cut]); sys.stdout.flush()   # a partial write
    if rng.random() < 0.3:
        time.sleep(rng.random() * 0.01)
    sys.stdout.write(line[cut:] + "\\n"); sys.stdout.flush()
"""


def expected_lines(seed, rank, n):
    rng = random.Random(seed * 100 + rank)
    words = ["alpha", "beta", "gamma", "delta"]
    out = []
    for i in range(n):
        line = rng.choice(words) if rng.random() < 0.7 else f"rank {rank} line {i}"
        rng.randrange(len(line) + 1)
        if rng.random() < 0.3:
            rng.random()
        out.append(line)
    return out


def test_no_line_is_lost_or_reordered_within_a_rank():
    for seed in (1, 2, 3):
        nproc, n = 6, 120
        r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", str(nproc),
                      "--collapse-output", "--no-python", PY, "-c", FUZZ, str(seed), str(n),
                      timeout=120)
        assert r.returncode == 0, r.stderr
        got = {rank: [] for rank in range(nproc)}
        for line in r.stdout.splitlines():
            m = PREFIX.match(line)
            assert m, line
            for rank in ranks_of(m.group(1)):
                got[rank].append(m.group(2))
        for rank in range(nproc):
            assert got[rank] == expected_lines(seed, rank, n), (seed, rank)


def test_the_log_files_stay_raw(tmp_path):
    r = collapse_run("print('same line')", 3, "--log-dir", str(tmp_path / "logs"),
                     barrier=tmp_path / "up")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[0-2]:same line\n"
    for rank in range(3):
        [log] = (tmp_path / "logs").glob(f"*/attempt_0/{rank}/stdout.log")
        assert log.read_text() == "same line\n"


ALONE = """
import os, sys, time
if os.environ["RANK"] == "0":
    print("only rank 0 says this", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
"""


def test_a_line_no_other_rank_prints_is_held_about_half_a_second(tmp_path):
    go = tmp_path / "go"
    p = subprocess.Popen(ccrun_cmd("--master-port", str(free_port()), "--nproc-per-node", "4",
                                   "--collapse-output", "--no-python", PY, "-c", ALONE, str(go)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        began = time.monotonic()
        line = p.stdout.readline()  # arrives while rank 0 still runs
        held = time.monotonic() - began
        go.touch()
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
    assert line == "[0]:only rank 0 says this\n"
    assert held < 3, f"held {held:.1f}s"
    assert p.returncode == 0
