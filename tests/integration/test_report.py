"""`ccrun report`: a real job with --log-dir whose attempt 0 hangs and whose
attempt 1 fails for good, its run directory made into a page, the page
rendered by headless Chromium and read back through the browser's DOM (not
only the HTML text), a screenshot taken; and the errors for a directory that
is missing, one that is not a run's, and lines that are not JSON."""
import glob
import html.parser
import json
import os
import shutil
import subprocess

import pytest

from helpers import binary, run_ccrun

WORKER = ("tests", "collectives_progress_worker")
# The root cause's stderr line: markup that must reach the page as text.
CAUSE = "loss went <nan> & diverged"


def chromium():
    path = shutil.which("chromium")
    assert path, "chromium is missing: run scripts/setup.sh (it installs Debian's chromium)"
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Attempt 0: rank 1 sleeps before step 20, a hang (incident_0 with
    stacks); attempt 1: both ranks make 140 steps (7 s: the own time per step is known
    after 5 s), then rank 1 exits 3."""
    logs = tmp_path_factory.mktemp("logs")
    w = binary(*WORKER)
    script = (f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec {w} --steps 40 --step-ms 50 '
              '--sleep-rank 1 --sleep-before 20 --sleep-s 300; fi\n'
              f'{w} --steps 140 --step-ms 50 || exit 1\n'
              f'if [ "$RANK" = 1 ]; then echo "{CAUSE}" >&2; exit 3; fi\n')
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--hang-timeout", "2",
                  "--max-restarts", "1", "--stop-grace", "2", "--log-dir", str(logs),
                  "--no-python", "/bin/sh", "-c", script, timeout=180)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "the job is hung" in r.stderr, r.stderr[-3000:]
    [run] = glob.glob(os.path.join(str(logs), "*", "events.jsonl"))
    return os.path.dirname(run)


class DomText(html.parser.HTMLParser):
    """The text of a serialized DOM, and of each element with an id."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
            "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.by_id, self.open = {}, []  # open: (tag, id) from the root

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        ident = dict(attrs).get("id")
        self.open.append((tag, ident))
        if ident:
            self.by_id[ident] = []

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        for _, ident in self.open:
            if ident:
                self.by_id[ident].append(data)

    def of(self, ident):
        return "".join(self.by_id.get(ident, []))


def render(page, tmp_path):
    """The page through headless Chromium: its DOM dumped, and a screenshot."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1100,1600"]
    url = "file://" + os.path.abspath(page)
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-2000:]
    shot = tmp_path / "report.png"
    r = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return dom.stdout, shot


def test_the_page_shows_both_attempts_every_rank_the_cause_and_the_stacks(run_dir, tmp_path):
    steps = [json.loads(l) for l in open(os.path.join(run_dir, "steps.jsonl"))]
    assert {s["attempt"] for s in steps} == {0, 1}, steps
    r = subprocess.run([binary("launcher", "ccrun"), "report", run_dir], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    page = os.path.join(run_dir, "report.html")
    assert f"wrote {page}" in r.stdout
    dom, shot = render(page, tmp_path)
    parsed = DomText()
    parsed.feed(dom)
    timeline = parsed.of("timeline")
    assert "attempt 0" in timeline and "attempt 1" in timeline, timeline
    assert "rank 0" in timeline and "rank 1" in timeline, timeline
    # The root cause, its markup as text (escaped in the file, so not parsed as tags).
    cause = parsed.of("root-cause")
    assert CAUSE in cause and "exit code 3" in cause and "attempt 1" in cause, cause
    assert "rank 0" in parsed.of("rates") and "rank 1" in parsed.of("rates")
    # Each rank's own time per step, which tells a synchronous job's ranks apart.
    assert all(len(s["busy_ms"]) == 2 for s in steps), steps
    assert "rank 0" in parsed.of("busy") and "rank 1" in parsed.of("busy")
    assert "<polyline" in dom
    stacks = parsed.of("stacks")
    assert "attempt 0: hang: rank 1" in stacks, stacks
    with open(shot, "rb") as f:
        head = f.read(8)
    assert head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(shot) > 10_000


def test_a_line_that_is_not_json_is_skipped_with_a_warning(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    with open(copy / "events.jsonl", "a") as f:
        f.write('{"event": "start", "attem\n')
    out = tmp_path / "page.html"
    r = subprocess.run([binary("launcher", "ccrun"), "report", str(copy), "--output", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "events.jsonl:" in r.stderr and "not a JSON line" in r.stderr and "skipped" in r.stderr
    assert "attempt 1" in out.read_text()


def test_a_missing_directory_and_a_log_dir_name_their_fix(run_dir, tmp_path):
    ccrun = binary("launcher", "ccrun")
    r = subprocess.run([ccrun, "report", str(tmp_path / "nope")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "does not exist" in r.stderr and "--log-dir" in r.stderr, r.stderr
    # The --log-dir itself, not one of its runs: the runs are named.
    r = subprocess.run([ccrun, "report", os.path.dirname(run_dir)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert "is not a run directory" in r.stderr and run_dir in r.stderr, r.stderr
    r = subprocess.run([ccrun, "report"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "RUN_DIR" in r.stderr, r.stderr
    r = subprocess.run([ccrun, "report", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--output" in r.stdout and "steps per second" in r.stdout
