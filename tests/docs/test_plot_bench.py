"""scripts/plot_bench.py: a benchmark's figure is drawn from its markdown table (and only from it),
a malformed or missing table fails with the line and the fix, and docs/benchmarks.md shows each
benchmark's figure above its table."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "plot_bench.py")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import plot_bench  # noqa: E402

LAUNCH = """Some words before.

| measurement | ccrun | ccrun, busy node (100 idle processes) | torchrun (torch 1.13) | ratio (quiet) |
|---|---|---|---|---|
| launch /bin/true x 1: wall seconds (median of 1) | 0.0255 | 0.0119 (-53%) | 6.1799 | 242.3x faster |
| launch /bin/true x 1: launcher peak RSS, KiB | 9348 | 9428 | 240948 | 25.8x less |
| launch /bin/true x 8: wall seconds (median of 1) | 0.0373 | 0.0204 (-45%) | n/a | |
"""


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_draws_a_png_from_a_table(tmp_path):
    src, out = tmp_path / "t.md", tmp_path / "t.png"
    src.write_text(LAUNCH)
    r = run("bench-launch", str(src), str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size < 100_000


def test_the_figure_holds_the_tables_numbers():
    (fig,) = plot_bench.figures("bench-launch", LAUNCH)
    by_label = {s.label: (s.xs, s.ys) for s in fig.series}
    assert by_label["ccrun"] == ([1, 8], [0.0255, 0.0373])
    assert by_label["ccrun, busy node (100 idle processes)"] == ([1, 8], [0.0119, 0.0204])
    assert by_label["torchrun (torch 1.13)"] == ([1], [6.1799])  # "n/a" is no point


def test_collectives_ratio_by_size():
    text = """| op | ranks | size | ccrun us (mean) | torch gloo us (mean) | ccrun / torch speed |
|---|---|---|---|---|---|
| all_reduce | 2 | 4 B | 1 | 2 | 2.00x |
| all_reduce | 2 | 1 KiB | 1 | 3 | 3.00x |
| reduce_scatter | 2 | 4 B | 1 | n/a (not in 1.13's gloo) | |
"""
    (fig,) = plot_bench.figures("bench-collectives", text)
    assert [(s.label, s.xs, s.ys) for s in fig.series] == [("all_reduce, 2 ranks", [4, 1024], [2.0, 3.0])]


@pytest.mark.parametrize("text,message", [
    (LAUNCH.replace("| 0.0373 |", "| 0.0373 | 7 |"), "line 7: 6 cells where the header has 5"),
    (LAUNCH.replace("|---|---|---|---|---|\n", ""), "line 3: a table header without its |---|---| line"),
    ("no table here\n", "no markdown table"),
    ("| measurement | ccrun | b | c |\n|---|---|---|---|\n| other | 1 | 2 | 3 |\n",
     "no launch x N rows with numbers"),
    ("<!-- bench-store:begin -->\n" + LAUNCH + "<!-- bench-store:end -->\n",
     "no section <!-- bench-launch:begin -->"),
])
def test_a_malformed_table_fails_naming_the_cause(tmp_path, text, message):
    src, out = tmp_path / "t.md", tmp_path / "t.png"
    src.write_text(text)
    r = run("bench-launch", str(src), str(out))
    assert r.returncode == 1
    assert message in r.stderr and str(src) in r.stderr
    assert not out.exists()


def test_unknown_kind_and_usage(tmp_path):
    src = tmp_path / "t.md"
    src.write_text(LAUNCH)
    r = run("bench-nope", str(src), str(tmp_path / "t.png"))
    assert r.returncode == 1 and "unknown benchmark 'bench-nope'; one of bench-launch" in r.stderr
    assert run("bench-launch").returncode == 2


@pytest.mark.parametrize("kind", list(plot_bench.KINDS))
def test_benchmarks_md_shows_each_figure_above_its_table(kind):
    """The doc's image line sits right above the section, the PNG is there and small, and the
    section's table draws (the figure is drawn from that same table by the bench script)."""
    text = open(DOC).read()
    assert re.search(rf"!\[[^\]]+\]\({kind}\.png\)\n<!-- {kind}:begin -->", text), \
        f"docs/benchmarks.md: put ![...]({kind}.png) on the line above <!-- {kind}:begin -->"
    png = os.path.join(ROOT, "docs", f"{kind}.png")
    assert os.path.getsize(png) < 100_000
    assert all(f.series for f in plot_bench.figures(kind, text))
