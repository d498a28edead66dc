# ctest: LABELS torch
"""--warm-start through the real ccrun: workers forked from the node's template interpreter must
be indistinguishable from cold ones, to the program and to ccrun. Most tests run both ways and
compare; the start-up timeline is checked on the way."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import binary

PYTHON = "/usr/bin/python3"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODES = [pytest.param([], id="cold"), pytest.param(["--warm-start"], id="warm")]


def need_torch():
    r = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True)
    if r.returncode != 0:
        pytest.skip("skipped: Debian's python3-torch is not installed")


def ccrun(args, timeout=120, env=None, cwd=None):
    e = dict(os.environ, PYTHON_EXEC=PYTHON)
    e.pop("PET_WARM_START", None)
    e.update(env or {})
    return subprocess.run([binary("launcher", "ccrun"), "--standalone"] + args, env=e, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def script(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def rank_lines(out, tag):
    """{rank: value} from the workers' "TAG <rank> <value>" lines."""
    found = {}
    for m in re.finditer(r"%s (\d+) (.*)" % tag, out):
        found[int(m[1])] = m[2].strip()
    return found


@pytest.mark.parametrize("mode", MODES)
def test_a_ddp_job_trains_the_same_cold_and_warm(mode):
    need_torch()
    r = ccrun(mode + ["--nproc-per-node", "2", os.path.join(ROOT, "examples", "ddp_logreg.py"),
                      "--epochs", "10"])
    assert r.returncode == 0, r.stderr
    assert "accuracy 0.9" in r.stdout or "accuracy 1.0" in r.stdout, r.stdout
    line = [l for l in r.stderr.splitlines() if "every rank at its first step" in l]
    assert line, r.stderr
    assert ("imports 0 (warm)" in line[0]) == bool(mode), line[0]
    if mode:
        assert "warm start: template pid" in r.stderr


WHO = """
import os, sys
rank = os.environ["RANK"]
print("NAME", rank, __name__)
print("FILE", rank, __file__)
print("ARGV", rank, sys.argv)
print("PATH0", rank, sys.path[0])
print("PPID", rank, os.getppid())
print("ENVRANK", rank, os.environ["LOCAL_RANK"], os.getenv("CUSTOM"))
with open("/proc/self/environ", "rb") as f:
    env = f.read().split(b"\\0")
tok = [e for e in env if e.startswith(b"CCRUN_AGENT_TOKEN=")]
print("TOKEN", rank, tok[0].decode().split("=", 1)[1] == os.environ["CCRUN_AGENT_TOKEN"])
print("STDIN", rank, os.readlink("/proc/self/fd/0"))
import numpy
print("NUMPY", rank, numpy.random.rand())
"""


def test_a_warm_worker_sees_what_a_cold_one_sees(tmp_path):
    path = script(tmp_path, "who.py", WHO)
    runs = {}
    for name, mode in (("cold", []), ("warm", ["--warm-start", "--preload", "numpy"])):
        r = ccrun(mode + ["--nproc-per-node", "2", path, "a b", "--x=1"], env={"CUSTOM": "v"})
        assert r.returncode == 0, r.stderr
        runs[name] = r.stdout
    for tag in ("NAME", "FILE", "ARGV", "PATH0", "ENVRANK", "TOKEN", "STDIN"):
        assert rank_lines(runs["cold"], tag) == rank_lines(runs["warm"], tag), tag
    assert rank_lines(runs["warm"], "NAME") == {0: "__main__", 1: "__main__"}
    assert rank_lines(runs["warm"], "TOKEN") == {0: "True", 1: "True"}
    for out in runs.values():  # numpy's global RandomState differs across ranks
        draws = rank_lines(out, "NUMPY")
        assert len(set(draws.values())) == 2, draws


PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_probe.py")
# Values drawn at random per process: each must differ across every process of a run, cold as
# warm (a warm worker must not share its template's draws with the other ranks or attempts).
RANDOM = ("torch_seed", "torch_rand", "numpy_rand", "python_rand")
# Environment values that differ between any two launches, cold or warm: named, so that every
# other variable is compared by value.
PER_LAUNCH = ("CCRUN_AGENT_TOKEN",  # a random token per launch
              "CCRUN_STORE_PORT", "MASTER_PORT")  # ports found free at each launch


def probe_environment(tmp_path):
    """A user's set-up the probe reads: a site-packages folder (PYTHONUSERBASE) with a package
    that reads RANK at import, a usercustomize and a .pth line; a sitecustomize on PYTHONPATH;
    the probe itself copied beside a data file it opens through __file__ after a chdir."""
    ver = subprocess.run([PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True).stdout.strip()
    site = tmp_path / "userbase" / "lib" / ("python" + ver) / "site-packages"
    site.mkdir(parents=True)
    (site / "rankpkg.py").write_text('import os\nRANK_AT_IMPORT = os.environ.get("RANK")\n')
    (site / "usercustomize.py").write_text('import os\nos.environ["FROM_USERCUSTOMIZE"] = "u"\n')
    (site / "probe.pth").write_text('import os; os.environ["FROM_PTH"] = "p"\n')
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text(
        'import os\nos.environ["FROM_SITECUSTOMIZE"] = "s"\nos.environ.pop("DROPPED_BY_SITE", None)\n')
    proj = tmp_path / "proj" / "sub"
    proj.mkdir(parents=True)
    (proj / "probe.py").write_text(open(PROBE).read())
    (proj / "data.txt").write_text("beside the script")
    return {"PYTHONUSERBASE": str(tmp_path / "userbase"), "PYTHONPATH": str(custom),
            "DROPPED_BY_SITE": "x"}


def probe_run(tmp_path, name, mode, env):
    """Runs the probe (2 ranks, attempts 0 and 1) with a descriptor ccrun inherits; returns
    ({(attempt, rank): record}, stderr)."""
    out = tmp_path / "records"  # one path for both runs: it is in the workers' argv
    out.mkdir()
    e = dict(os.environ, PYTHON_EXEC=PYTHON, **env)
    e.pop("PET_WARM_START", None)
    with open(tmp_path / (name + ".inherited"), "w") as extra:
        r = subprocess.run([binary("launcher", "ccrun"), "--standalone"] + mode +
                           ["--rdzv-id", "probe", "--nproc-per-node", "2", "--max-restarts",
                            "1", "sub/probe.py", str(out)],
                           env=e, cwd=str(tmp_path / "proj"), capture_output=True, text=True,
                           timeout=180, pass_fds=(extra.fileno(),), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    records = {}
    for f in out.iterdir():
        attempt, rank, _ = f.name.split(".")
        records[(int(attempt), int(rank))] = json.loads(f.read_text())
    assert sorted(records) == [(0, 0), (0, 1), (1, 0), (1, 1)], (sorted(records), r.stderr)
    out.rename(tmp_path / name)
    # The launch's id names its progress records, and a temporary folder its run files (paths,
    # descriptors, variables): one word for each.
    env0 = records[(0, 0)]["environ"]
    launch = re.search(r"ccrun-([0-9a-f]{16,})-", env0["CCRUN_PROGRESS_FILE"])[1]
    run_dir = os.path.dirname(os.path.dirname(env0["TORCHELASTIC_ERROR_FILE"]))
    records = {k: json.loads(json.dumps(v).replace(run_dir, "<run dir>").replace(launch, "<launch>"))
               for k, v in records.items()}
    return records, r.stderr


def traceback_lines(stderr):
    return [l.strip() for l in stderr.splitlines()
            if l.strip().startswith(("Traceback", "File ", "RuntimeError: probe"))]


def test_a_warm_worker_observes_what_a_cold_one_observes_key_by_key(tmp_path):
    need_torch()
    env = probe_environment(tmp_path)
    cold, cold_err = probe_run(tmp_path, "cold", [], env)
    warm, warm_err = probe_run(tmp_path, "warm", ["--warm-start"], env)
    # what the set-up must show, cold (so that the comparison below compares something)
    assert cold[(1, 1)]["rank_at_import"] == "1" and cold[(1, 0)]["rank_at_import"] == "0"
    assert cold[(0, 0)]["from_sitecustomize"] == "s" and cold[(0, 0)]["from_pth"] == "p"
    assert cold[(0, 0)]["from_usercustomize"] == "u"
    assert "DROPPED_BY_SITE" not in cold[(0, 0)]["environ"]
    assert not any(f.endswith(".inherited") for f in cold[(0, 0)]["descriptors"].values())
    assert cold[(0, 0)]["file"] == str(tmp_path / "proj" / "sub" / "probe.py")
    for key in RANDOM:
        for mode, records in (("cold", cold), ("warm", warm)):
            draws = [json.dumps(r[key]) for r in records.values()]
            assert len(set(draws)) == len(draws), (mode, key, draws)
    for where in sorted(cold):
        c, w = cold[where], warm[where]
        assert sorted(c) == sorted(w), where
        for key in sorted(c):
            if key in RANDOM:
                continue
            if key == "environ":
                assert sorted(c[key]) == sorted(w[key]), where
                for name in sorted(c[key]):
                    if name not in PER_LAUNCH:
                        assert c[key][name] == w[key][name], (where, name)
                continue
            assert c[key] == w[key], (where, key)
    assert traceback_lines(cold_err) == traceback_lines(warm_err), (cold_err, warm_err)
    assert "ccrun_template.py" not in warm_err


def test_a_warm_worker_is_the_agents_child(tmp_path):
    path = script(tmp_path, "ppid.py", WHO)
    e = dict(os.environ, PYTHON_EXEC=PYTHON)
    p = subprocess.Popen([binary("launcher", "ccrun"), "--standalone", "--warm-start",
                          "--nproc-per-node", "2", path], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert rank_lines(out, "PPID") == {0: str(p.pid), 1: str(p.pid)}


def test_a_module_entry_point_runs_warm(tmp_path):
    (tmp_path / "mymod.py").write_text(
        "import os, sys\nprint('MOD', os.environ['RANK'], __name__, sys.argv[1:], "
        "sys.path[0] == os.getcwd())\n")
    r = ccrun(["--warm-start", "--nproc-per-node", "2", "-m", "mymod", "x"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert rank_lines(r.stdout, "MOD") == {0: "__main__ ['x'] True", 1: "__main__ ['x'] True"}


LOADER = """
import os, sys, torch
from torch.utils.data import DataLoader, Dataset
class Squares(Dataset):
    def __len__(self): return 8
    def __getitem__(self, i): return i * i
if __name__ == "__main__":
    ctx = sys.argv[1]
    total = sum(int(b.sum()) for b in DataLoader(Squares(), batch_size=2, num_workers=2,
                                                   multiprocessing_context=ctx))
    print("SUM", os.environ["RANK"], total)
"""


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_a_dataloader_with_workers_runs_warm(tmp_path, ctx):
    need_torch()
    path = script(tmp_path, "loader.py", LOADER)
    r = ccrun(["--warm-start", "--nproc-per-node", "2", path, ctx], timeout=180)
    assert r.returncode == 0, r.stderr
    assert rank_lines(r.stdout, "SUM") == {0: "140", 1: "140"}


RAISES = """
import os, sys
if os.environ["RANK"] == "1":
    raise ValueError("bad batch in rank 1")
if os.environ["RANK"] == "0":
    import time; time.sleep(30)
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_exception_is_the_root_cause(tmp_path, mode):
    path = script(tmp_path, "raises.py", RAISES)
    r = ccrun(mode + ["--nproc-per-node", "2", "--stop-grace", "2", path])
    assert r.returncode == 1
    assert "ValueError: bad batch in rank 1" in r.stderr
    assert "ccrun_template.py" not in r.stderr  # the traceback starts at the script
    assert re.search(r'File "[^"]*raises.py", line 4, in <module>', r.stderr), r.stderr


EXITS = """
import os, sys
sys.exit(int(os.environ["RANK"]) + 3 if os.environ["RANK"] == "1" else 0)
"""


def test_a_warm_workers_exit_code_is_reported(tmp_path):
    path = script(tmp_path, "exits.py", EXITS)
    r = ccrun(["--warm-start", "--nproc-per-node", "2", path])
    assert r.returncode == 1
    assert "exit code 4" in r.stderr, r.stderr


SIGINT_WAITS = """
import os, sys, time
try:
    print("READY", os.environ["RANK"], flush=True)  # from here on, SIGINT is caught
    time.sleep(60)
except KeyboardInterrupt:
    print("INTERRUPTED", os.environ["RANK"], "ok", flush=True)
    sys.exit(0)
"""


def test_ctrl_c_reaches_warm_workers(tmp_path):
    path = script(tmp_path, "waits.py", SIGINT_WAITS)
    e = dict(os.environ, PYTHON_EXEC=PYTHON)
    with open(tmp_path / "err", "w") as err:
        p = subprocess.Popen([binary("launcher", "ccrun"), "--standalone", "--warm-start",
                              "--nproc-per-node", "2", path], env=e, stdout=subprocess.PIPE,
                             stderr=err, text=True)
    seen = ""
    deadline = time.time() + 60
    while seen.count("READY") < 2 and time.time() < deadline:
        seen += p.stdout.readline()
    p.send_signal(signal.SIGINT)
    seen += p.stdout.read()
    p.wait(timeout=60)
    assert rank_lines(seen, "INTERRUPTED") == {0: "ok", 1: "ok"}, (tmp_path / "err").read_text()
    assert p.returncode == 128 + signal.SIGINT


# Rank 1 of attempt 0 fails once rank 0 has stepped (so rank 0's imports are known to the agent).
CRASHES = """
import os, sys, time
import numpy
import ccrun_progress
stepped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stepped")
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
    while not os.path.exists(stepped):
        time.sleep(0.02)
    sys.exit(1)
ccrun_progress.step()
open(stepped, "w").close()
time.sleep(0.5 if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" else 0.2)
"""


def test_a_restart_is_warm_and_its_timeline_said(tmp_path):
    path = script(tmp_path, "crashes.py", CRASHES)
    log_dir = tmp_path / "logs"
    r = ccrun(["--warm-start", "--preload", "json,auto", "--nproc-per-node", "2",
               "--max-restarts", "1", "--log-dir", str(log_dir), path])
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if "attempt 1: every rank at its first step" in l]
    assert lines and "after rank 1 failed" in lines[0] and "imports 0 (warm)" in lines[0], r.stderr
    # --preload auto: what the workers imported from outside the standard library goes to the
    # template
    assert re.search(r"warm start: the template imports .*numpy.* for the next attempt", r.stderr)
    events = [json.loads(l) for p in log_dir.rglob("events.jsonl") for l in p.open()]
    startup = [e for e in events if e.get("event") == "startup"]
    # attempt 0 never had every rank at a first step (rank 1 exits first): no timeline
    assert {(e["attempt"], e["rank"]) for e in startup} == {(1, 0), (1, 1)}
    assert all(e["warm"] for e in startup), startup


THREAD_MODULE = """
import threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True, name="busy-import").start()
"""


def test_a_template_made_unsafe_by_a_thread_starts_cold_and_says_why(tmp_path):
    (tmp_path / "threads_at_import.py").write_text(THREAD_MODULE)
    path = script(tmp_path, "plain.py", "import os\nprint('RAN', os.environ['RANK'], 'ok')\n")
    r = ccrun(["--warm-start", "--preload", "threads_at_import", "--nproc-per-node", "2", path],
              env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert re.search(r"attempt 0 starts cold: the template runs 2 threads \(Python threads: "
                     r"busy-import\)", r.stderr), r.stderr
    assert rank_lines(r.stdout, "RAN") == {0: "ok", 1: "ok"}


def test_a_program_that_is_not_python_starts_cold():
    r = ccrun(["--warm-start", "--nproc-per-node", "2", "--no-python", "/bin/true"])
    assert r.returncode == 0, r.stderr
    assert "is not a Python command ccrun can fork; the workers start cold" in r.stderr


def test_a_bad_preload_name_is_refused():
    r = ccrun(["--warm-start", "--preload", "os;rm", "--nproc-per-node", "1", "x.py"])
    assert r.returncode == 2
    assert "is not a module name" in r.stderr


@pytest.mark.parametrize("mode", MODES)
def test_a_missing_module_names_the_interpreter_and_the_fix(tmp_path, mode):
    path = script(tmp_path, "needs.py", "import no_such_module_for_ccrun\n")
    r = ccrun(mode + ["--nproc-per-node", "1", path])
    assert r.returncode == 1
    assert f"python    : {PYTHON} (PYTHON_EXEC, else python3 on PATH)" in r.stderr, r.stderr
    assert ("hint      : ModuleNotFoundError: No module named 'no_such_module_for_ccrun' in "
            f"{PYTHON}; set PYTHON_EXEC") in r.stderr, r.stderr


# A stand-in for OpenBLAS's thread pool as pip's numpy ships it: started at load (one thread a
# core there, two here), stopped by blas_thread_shutdown_ (what OpenBLAS's own pthread_atfork
# handler calls before a fork), started again by its next call.
POOL_SOURCE = r"""
#include <pthread.h>
#include <unistd.h>
enum { kThreads = 2 };
static pthread_t pool[kThreads];
static int running, quit;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void* idle(void* arg) {
  pthread_mutex_lock(&mu);
  while (!quit) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return arg;
}
static void start(void) {
  quit = 0;
  for (int i = 0; i < kThreads; ++i) pthread_create(&pool[i], 0, idle, 0);
  running = 1;
}
__attribute__((constructor)) static void at_load(void) { start(); }
int blas_thread_shutdown_(void) {
  if (!running) return 0;
  pthread_mutex_lock(&mu);
  quit = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < kThreads; ++i) pthread_join(pool[i], 0);
  running = 0;
  return 0;
}
int standin_call(void) {
  if (!running) start();
  return kThreads;
}
"""

POOL_LOADER = """
import ctypes, os
lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libopenblas_standin.so"))
"""

POOL_WORKER = """
import os, threadpool_at_import
before = len(os.listdir("/proc/self/task"))
threadpool_at_import.lib.standin_call()
after = len(os.listdir("/proc/self/task"))
print("THREADS", os.environ["RANK"], before, after)
"""


def test_openblas_threads_are_stopped_for_the_fork_and_restart_in_the_worker(tmp_path):
    (tmp_path / "pool.c").write_text(POOL_SOURCE)
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-pthread", "-o",
                         str(tmp_path / "libopenblas_standin.so"), str(tmp_path / "pool.c")],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    (tmp_path / "threadpool_at_import.py").write_text(POOL_LOADER)
    path = script(tmp_path, "pool_worker.py", POOL_WORKER)
    cold = ccrun(["--nproc-per-node", "2", path], env={"PYTHONPATH": str(tmp_path)})
    warm = ccrun(["--warm-start", "--preload", "threadpool_at_import", "--nproc-per-node", "2",
                  path], env={"PYTHONPATH": str(tmp_path)})
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    assert "starts cold" not in warm.stderr, warm.stderr
    # Cold, the pool started at import; warm, the fork had none and the first call started it.
    assert rank_lines(cold.stdout, "THREADS") == {0: "3 3", 1: "3 3"}
    assert rank_lines(warm.stdout, "THREADS") == {0: "1 3", 1: "1 3"}


def test_preload_without_warm_start_is_refused_with_the_fix():
    r = ccrun(["--preload", "numpy", "--nproc-per-node", "1", "x.py"])
    assert r.returncode == 2, r.stderr
    assert "--warm-start is off: add --warm-start" in r.stderr, r.stderr


def test_an_interpreter_without_torch_is_told_what_a_warm_start_saves(tmp_path):
    # A torch that cannot be imported, as on an interpreter without it.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    path = script(tmp_path, "plain.py", "import os\nprint('RAN', os.environ['RANK'], 'ok')\n")
    r = ccrun(["--warm-start", "--nproc-per-node", "2", path], env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert re.search(r"the template imported nothing \(\S+ has no torch: ModuleNotFoundError",
                     r.stderr), r.stderr
    assert "--preload" in r.stderr
    assert rank_lines(r.stdout, "RAN") == {0: "ok", 1: "ok"}


def test_a_stop_during_the_templates_imports_starts_nothing_and_blames_nothing(tmp_path):
    (tmp_path / "slow_import.py").write_text(
        "import time\nopen(%r, 'w').close()\ntime.sleep(120)\n" % str(tmp_path / "importing"))
    path = script(tmp_path, "plain.py", "print('RAN')\n")
    e = dict(os.environ, PYTHON_EXEC=PYTHON, PYTHONPATH=str(tmp_path))
    e.pop("PET_WARM_START", None)
    p = subprocess.Popen([binary("launcher", "ccrun"), "--standalone", "--warm-start", "--preload",
                          "slow_import", "--nproc-per-node", "2", path], env=e,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "importing").exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert (tmp_path / "importing").exists(), p.communicate(timeout=60)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "RAN" not in out
    assert "starts cold" not in err and "imports failed" not in err, err
