"""The C++ example: weights trained by 4 workers under ccrun equal a
single-process run's to float tolerance."""
from helpers import binary, run_ccrun


def train(tmp_path, nproc):
    out = tmp_path / f"w{nproc}.txt"
    r = run_ccrun("--standalone", "--nproc-per-node", str(nproc), "--no-python", binary("examples", "train_logreg"),
                  "--steps", "60", "--samples", "4096", "--out", str(out), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    return [float(v) for v in out.read_text().split()]


def test_four_workers_match_one(tmp_path):
    one, four = train(tmp_path, 1), train(tmp_path, 4)
    assert len(one) == len(four) == 17
    for a, b in zip(one, four):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(a))
    assert any(abs(a) > 0.1 for a in one)  # it did learn something
