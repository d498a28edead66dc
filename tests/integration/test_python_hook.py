# ctest: LABELS torch slow
"""The Python start-up hook (agent/python/sitecustomize.py, ccrun_progress.py) in real
/usr/bin/python3 processes (torch 1.13), without ccrun: the test makes each worker's progress
record itself (include/ccrun/progress.h) and reads it back. The tests of the per-call wrappers
run twice: with the C wrappers (_ccrun_hook.c, from the build tree) and with the Python ones."""
import glob
import json
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import build_dir, free_port

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HOOK_DIR = os.path.join(REPO, "agent", "python")
EXT_DIR = os.path.join(build_dir(), "agent", "python")  # the built _ccrun_hook modules
# The wrappers hook_env asks for (the fixture): "c" (the module built for this Python),
# "abi3" (the stable-ABI one, alone on the path: what a later Python loads) or "python".
WRAPPERS = {"kind": "c", "ext_dir": EXT_DIR}
KIND_TYPES = {"c": ("Collective", "DdpForward"), "abi3": ("Collective", "DdpForward"),
              "python": ("function", "function")}
PYTHON = "/usr/bin/python3"  # Debian's, with torch 1.13
MAGIC = 0x3152505255524343
OP = {"all_reduce": 1, "barrier": 11, "send": 9, "recv": 10}


def make_record(path, magic=MAGIC):
    data = bytearray(4096)
    struct.pack_into("<QII", data, 0, magic, 1, 4096)
    path.write_bytes(bytes(data))
    return str(path)


def read_record(path):
    data = open(path, "rb").read()
    (magic, version, size, pid, dump_signal, steps, step_ns,
     groups_used) = struct.unpack_from("<QIIiiQqI", data, 0)
    names = ("id", "size", "source", "issued", "completed", "op", "wait_us", "count",
             "issued_ns", "completed_ns")
    slots = [dict(zip(names, struct.unpack_from("<QIIQQIIQqq", data, 64 + 64 * i)))
             for i in range(min(groups_used, 48))]
    for i, slot in enumerate(slots[:16]):  # op_calls: {op code: calls issued}
        calls = struct.unpack_from("<12I", data, 3200 + 48 * i)
        slot["op_calls"] = {op: n for op, n in enumerate(calls, 1) if n}
    return dict(pid=pid, dump_signal=dump_signal, steps=steps, step_ns=step_ns,
                groups_used=groups_used, slots=slots)


def fnv1a64_ranks(ranks):
    h = 0xCBF29CE484222325
    for r in sorted(ranks):
        for b in struct.pack("<I", r):
            h = ((h ^ b) * 0x100000001B3) % 2**64
    return h


def hook_env(record=None, pythonpath=None, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CCRUN_", "PYTHON"))}
    env["PYTHONPATH"] = f"{HOOK_DIR}:{WRAPPERS['ext_dir']}" if pythonpath is None else pythonpath
    if WRAPPERS["kind"] == "python":
        env["CCRUN_PYTHON_HOOK_C"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if record:
        env["CCRUN_PROGRESS_FILE"] = record
    env.update(extra)
    return env


def run_py(tmp_path, code, env, timeout=120, args=()):
    script = tmp_path / f"script_{abs(hash(code))}.py"
    script.write_text(textwrap.dedent(code))
    r = subprocess.run([PYTHON, str(script), *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(autouse=True)
def need_torch_python():
    if not os.path.exists(PYTHON):
        pytest.skip(f"skipped: {PYTHON} is missing")


@pytest.fixture(params=["c", "abi3", "python"])
def wrappers(request, tmp_path_factory):
    """Runs a test with the C wrappers built for this Python, with the stable-ABI ones alone,
    then with the Python ones (CCRUN_PYTHON_HOOK_C=0)."""
    built = {"c": glob.glob(os.path.join(EXT_DIR, "_ccrun_hook.cpython-*.so")),
             "abi3": glob.glob(os.path.join(EXT_DIR, "_ccrun_hook.abi3.so")), "python": [True]}
    if not built[request.param]:
        pytest.skip(f"the hook's C wrappers are not built in {EXT_DIR} (a sanitizer build, "
                    "or no python3-dev)")
    WRAPPERS["kind"] = request.param
    if request.param == "abi3":
        WRAPPERS["ext_dir"] = str(tmp_path_factory.mktemp("abi3"))
        os.symlink(built["abi3"][0], os.path.join(WRAPPERS["ext_dir"], "_ccrun_hook.abi3.so"))
    yield request.param
    WRAPPERS.update(kind="c", ext_dir=EXT_DIR)


TORCH_JOB = """
    import json, sys, torch, torch.distributed as dist
    import ccrun_progress as cp
    rank, world, init, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    t = torch.ones(7)
    for _ in range(n - 1):
        dist.all_reduce(t)
    # The last one is async: issued before its wait(), completed only after.
    work = dist.all_reduce(t, async_op=True)
    world_slot = next(i for i in range(cp._u32[10]) if cp._u64[(64 + 64 * i) // 8] == 0)
    base = (64 + 64 * world_slot) // 8
    before = (cp._u64[base + 2], cp._u64[base + 3])
    work.wait()
    after = (cp._u64[base + 2], cp._u64[base + 3])
    assert t[0].item() == world ** n
    sub = dist.new_group(list(range(world)))
    s = torch.ones(3)
    dist.all_reduce(s, group=sub)
    dist.barrier(group=sub)
    # Point to point on the world group: a batch (P2POp takes the wrapped isend/irecv), then
    # a send/recv of 5 elements.
    q = torch.zeros(4)
    op = dist.P2POp(dist.isend, q + 1, 1) if rank == 0 else dist.P2POp(dist.irecv, q, 0)
    for work in dist.batch_isend_irecv([op]):
        work.wait()
    assert rank == 0 or q.tolist() == [1.0] * 4
    p = torch.zeros(5)
    if rank == 0:
        dist.send(p + 1, 1)
    elif rank == 1:
        dist.recv(p, 0)
    print("RESULT " + json.dumps({"before": before, "after": after,
                                  "kind": type(dist.all_reduce).__name__}), flush=True)
    dist.destroy_process_group()
"""


def run_ranks(tmp_path, name, source, world, n):
    """Runs `source` as `world` ranks (args: rank, world, init method, n), each
    under the hook with a record of its own; returns (records, stdouts, pids)."""
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    init = f"tcp://127.0.0.1:{free_port()}"
    records = [make_record(tmp_path / f"rec{r}") for r in range(world)]
    procs = [subprocess.Popen([PYTHON, str(script), str(r), str(world), init, str(n)],
                              env=hook_env(records[r]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    return records, [out for out, _ in outs], [p.pid for p in procs]


def test_two_rank_gloo_job_counts_every_collective(tmp_path, wrappers):
    n, world = 5, 2
    records, outs, pids = run_ranks(tmp_path, "job.py", TORCH_JOB, world, n)
    sub_ids = []
    for r in range(world):
        result = json.loads(outs[r].split("RESULT ", 1)[1])
        assert result["kind"] == KIND_TYPES[wrappers][0]
        assert result["before"] == [n, n - 1]  # the async call: issued, not yet completed
        assert result["after"] == [n, n]
        rec = read_record(records[r])
        assert rec["pid"] == pids[r]
        assert rec["dump_signal"] == signal.SIGUSR2
        assert rec["groups_used"] == 2, rec
        world_slot = next(s for s in rec["slots"] if s["id"] == 0)
        sub_slot = next(s for s in rec["slots"] if s["id"] != 0)
        # n all_reduces, a batched isend/irecv, then one send (rank 0) or recv (rank 1) of 5
        assert world_slot["size"] == world and world_slot["source"] == 2
        assert world_slot["issued"] == world_slot["completed"] == n + 2
        assert world_slot["op"] == (OP["send"] if r == 0 else OP["recv"])
        assert world_slot["count"] == 5
        # per op: n all_reduces, then the batch's isend and the send (or irecv and recv)
        assert world_slot["op_calls"] == {OP["all_reduce"]: n,
                                          (OP["send"] if r == 0 else OP["recv"]): 2}
        assert 0 < world_slot["issued_ns"] <= world_slot["completed_ns"]
        # the subgroup: an all_reduce, then a barrier
        assert sub_slot["size"] == world and sub_slot["source"] == 2
        assert sub_slot["issued"] == sub_slot["completed"] == 2
        assert sub_slot["op"] == OP["barrier"] and sub_slot["count"] == 0
        assert sub_slot["op_calls"] == {OP["all_reduce"]: 1, OP["barrier"]: 1}
        sub_ids.append(sub_slot["id"])
    assert sub_ids[0] == sub_ids[1] == fnv1a64_ranks(range(world))


def test_an_alias_calling_another_collective_counts_once(tmp_path, wrappers):
    # torch 1.13's _all_gather_base calls all_gather_into_tensor; Gloo 1.13 then raises
    # (no _allgather_base): issued once, never completed.
    record = make_record(tmp_path / "rec")
    code = """
        import sys, torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
        out, x = torch.zeros(3), torch.ones(3)
        try:
            dist._all_gather_base(out, x)
            print("completed")
        except RuntimeError:
            print("raised")
        dist.destroy_process_group()
    """
    r = run_py(tmp_path, code, hook_env(record), args=[f"file://{tmp_path / 'init'}"])
    rec = read_record(record)
    assert rec["groups_used"] == 1
    slot = rec["slots"][0]
    assert (slot["id"], slot["size"], slot["issued"]) == (0, 1, 1)
    assert slot["completed"] == (1 if r.stdout.strip() == "completed" else 0)
    assert slot["op"] == 4 and slot["count"] == 3  # all_gather, this rank's 3 elements


def test_async_calls_complete_at_their_works_wait_in_any_order_and_are_forgotten_past_4096(
        tmp_path, wrappers):
    # What the hook remembers of async calls: each Work until its wait() or is_completed() says
    # it is done (then the hook drops its reference), whatever the order of the waits; the
    # oldest of the last 4096 async calls is forgotten when another is issued.
    record = make_record(tmp_path / "rec")
    code = """
        import json, sys, torch, torch.distributed as dist
        import ccrun_progress as cp
        dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
        t = torch.ones(1)
        base = 64 // 8  # the world group's slot: the record's first
        done = lambda: cp._u64[base + 3]
        out = {"kind": type(dist.all_reduce).__name__}
        w1, w2, w3 = (dist.all_reduce(t, async_op=True) for _ in range(3))
        held = sys.getrefcount(w2)
        w2.wait()
        out["refs_dropped"] = held - sys.getrefcount(w2)
        out["after_w2"] = done()
        w1.wait()
        out["after_w1"] = done()
        while not w3.is_completed():
            pass
        out["after_w3"] = done()
        w3.wait()  # a second wait: nothing more
        forgotten = dist.all_reduce(t, async_op=True)  # call #4
        later = [dist.all_reduce(t, async_op=True) for _ in range(4096)]
        forgotten.wait()  # forgotten: not completed
        out["after_forgotten"] = done()
        later[0].wait()  # call #5: remembered still
        out["after_first_kept"] = done()
        later[-1].wait()
        out["after_last"] = done()
        out["issued"] = cp._u64[base + 2]
        # Waits in a random order: each finds its call (the hook's reference is dropped).
        import random
        works = [dist.all_reduce(t, async_op=True) for _ in range(3000)]
        random.Random(7).shuffle(works)
        out["found"] = 0
        for w in works:
            held = sys.getrefcount(w)
            w.wait()
            out["found"] += held - sys.getrefcount(w)
        out["after_shuffled"] = done()
        print("RESULT " + json.dumps(out))
        dist.destroy_process_group()
    """
    r = run_py(tmp_path, code, hook_env(record), args=[f"file://{tmp_path / 'init'}"])
    out = json.loads(r.stdout.split("RESULT ", 1)[1])
    assert out["kind"] == KIND_TYPES[wrappers][0]
    assert out["refs_dropped"] == 1
    assert (out["after_w2"], out["after_w1"], out["after_w3"]) == (2, 2, 3)
    assert (out["after_forgotten"], out["after_first_kept"]) == (3, 5)
    assert out["after_last"] == out["issued"] == 4 + 4096
    assert out["found"] == 3000 and out["after_shuffled"] == 4 + 4096 + 3000


DUMP_JOB = """
    import os, sys, threading, time

    def waiting_in_a_thread(stop, started):
        started.set()
        while not os.path.exists(stop):
            time.sleep(0.01)

    def sleeping_here(stop):
        # "ready" from in here: whenever the signal comes, this frame is on the main thread's stack
        print("ready", flush=True)
        while not os.path.exists(stop):
            time.sleep(0.01)

    stop = sys.argv[1]
    started = threading.Event()
    threading.Thread(target=waiting_in_a_thread, args=(stop, started), daemon=True).start()
    started.wait()
    sleeping_here(stop)
    print("still running", flush=True)
"""


def test_dump_signal_writes_every_thread_and_the_worker_goes_on(tmp_path):
    record = make_record(tmp_path / "rec")
    stacks = tmp_path / "stacks.txt"
    stop = tmp_path / "stop"
    script = tmp_path / "dump.py"
    script.write_text(textwrap.dedent(DUMP_JOB))
    proc = subprocess.Popen([PYTHON, str(script), str(stop)],
                            env=hook_env(record, CCRUN_STACK_FILE=str(stacks)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        rec = read_record(record)
        assert rec["pid"] == proc.pid and rec["dump_signal"] == signal.SIGUSR2
        os.kill(proc.pid, rec["dump_signal"])
        deadline = time.monotonic() + 30
        text = ""
        while "sleeping_here" not in text or "waiting_in_a_thread" not in text:
            assert time.monotonic() < deadline, f"no traceback in {stacks}: {text!r}"
            assert proc.poll() is None, proc.stderr.read()
            text = stacks.read_text() if stacks.exists() else ""
            time.sleep(0.01)
        assert len(re.findall(r"^(Current thread|Thread) 0x", text, re.M)) == 2, text
        assert "in sleeping_here" in text and "in waiting_in_a_thread" in text
        stop.write_text("")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert out.strip() == "still running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_dump_signal_from_env_and_given_up_when_the_script_takes_the_signal(tmp_path):
    record = make_record(tmp_path / "rec")
    code = """
        import signal
        import ccrun_progress as cp
        print(cp._i32[5], flush=True)
        signal.signal(signal.SIGUSR1, lambda *a: None)
        print(cp._i32[5], flush=True)
    """
    r = run_py(tmp_path, code, hook_env(record, CCRUN_DUMP_SIGNAL="SIGUSR1"))
    assert r.stdout.split() == [str(int(signal.SIGUSR1)), "0"]
    assert read_record(record)["dump_signal"] == 0


def test_no_record_means_the_hook_is_inert(tmp_path):
    code = """
        import sys, torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
        t = torch.ones(2)
        dist.all_reduce(t)
        print(hasattr(dist.all_reduce, "__ccrun_wrapped__"), "ccrun_progress" in sys.modules,
              t.tolist())
    """
    init = f"file://{tmp_path / 'init'}"
    r = run_py(tmp_path, code, hook_env(None), args=[init])
    assert r.stdout.split() == ["False", "False", "[1.0,", "1.0]"], r.stdout
    # A file that is no record (another magic): the same, and it is left as it was.
    bad = make_record(tmp_path / "bad", magic=0x1234)
    before = open(bad, "rb").read()
    init = f"file://{tmp_path / 'init2'}"
    r = run_py(tmp_path, code, hook_env(bad), args=[init])
    assert r.stdout.split()[0] == "False", r.stdout
    assert open(bad, "rb").read() == before
    # A missing file: the same.
    init = f"file://{tmp_path / 'init3'}"
    r = run_py(tmp_path, code, hook_env(str(tmp_path / "missing")), args=[init])
    assert r.stdout.split()[0] == "False", r.stdout


@pytest.mark.parametrize("with_record", [True, False])
def test_the_shadowed_sitecustomize_still_runs(tmp_path, with_record):
    fake = tmp_path / "later"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(
        "import sys\nprint('fake sitecustomize ran', flush=True)\nMARK = 42\n")
    record = make_record(tmp_path / "rec") if with_record else None
    code = """
        import sys, sitecustomize
        print(sitecustomize.MARK, sitecustomize.__file__)
    """
    r = run_py(tmp_path, code, hook_env(record, pythonpath=f"{HOOK_DIR}:{fake}"))
    lines = r.stdout.splitlines()
    assert lines[0] == "fake sitecustomize ran"
    assert lines[1] == f"42 {fake / 'sitecustomize.py'}"
    if with_record:
        assert read_record(record)["dump_signal"] == signal.SIGUSR2


def test_debians_sitecustomize_still_runs(tmp_path):
    debian = "/usr/lib/python3.11/sitecustomize.py"
    if not os.path.exists(debian):
        pytest.skip(f"skipped: {debian} is missing")
    record = make_record(tmp_path / "rec")
    code = "import sitecustomize; print(sitecustomize.__file__)"
    r = run_py(tmp_path, code, hook_env(record))
    assert r.stdout.strip() == debian


def test_a_script_without_torch_does_not_import_it(tmp_path):
    record = make_record(tmp_path / "rec")
    code = """
        import sys
        import ccrun_progress
        ccrun_progress.step()
        ccrun_progress.step()
        print("torch" in sys.modules, [m for m in sys.modules if m.startswith("torch")])
    """
    r = run_py(tmp_path, code, hook_env(record))
    assert r.stdout.strip() == "False []"
    rec = read_record(record)
    assert rec["dump_signal"] == signal.SIGUSR2  # the hook did run
    assert rec["steps"] == 2 and rec["step_ns"] > 0
    assert rec["groups_used"] == 0


def test_the_documented_stdlib_step_snippet(tmp_path):
    sys.path.insert(0, HOOK_DIR)
    try:
        import ccrun_progress
    finally:
        sys.path.remove(HOOK_DIR)
    doc = ccrun_progress.__doc__
    start = doc.index("    import mmap, os, struct, time")
    end = doc.index("\n\n", doc.index("def mark_step"))
    snippet = textwrap.dedent(doc[start:end])
    record = make_record(tmp_path / "rec")
    # No hook at all on the path: the snippet alone.
    r = run_py(tmp_path, snippet + "\nfor _ in range(3):\n    mark_step()\nprint('ok')\n",
               hook_env(record, pythonpath=""))
    assert r.stdout.strip() == "ok"
    rec = read_record(record)
    assert rec["steps"] == 3 and rec["step_ns"] > 0 and rec["pid"] == 0
    r = run_py(tmp_path, snippet + "\nmark_step()\nprint('ok')\n", hook_env(None, pythonpath=""))
    assert r.stdout.strip() == "ok"


def test_a_python_child_of_the_worker_leaves_the_record_alone(tmp_path):
    record = make_record(tmp_path / "rec")
    code = """
        import subprocess, sys
        import ccrun_progress
        child = subprocess.run([sys.executable, "-c",
                                "import ccrun_progress as c; print(c._owner)"],
                               capture_output=True, text=True, check=True)
        print(ccrun_progress._owner, child.stdout.strip(), os.getpid())
    """
    r = run_py(tmp_path, "import os\n" + textwrap.dedent(code), hook_env(record))
    owner, child_owner, pid = r.stdout.split()
    assert (owner, child_owner) == ("True", "False")
    assert read_record(record)["pid"] == int(pid)  # the child left it alone


WAIT_JOB = """
    import sys, time, torch, torch.distributed as dist
    rank, world, init, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    for _ in range(n):
        if rank == 1:
            time.sleep(0.05)  # rank 0 waits for it in every all_reduce
        dist.all_reduce(torch.ones(4))
    dist.destroy_process_group()
"""


def test_time_in_synchronous_collectives_is_counted_for_stragglers(tmp_path, wrappers):
    # wait_us, the time a rank spent in a group's calls, is what tells a straggler (its own work
    # per step is long) from the ranks that wait for it in their collectives.
    n = 10
    records, _, _ = run_ranks(tmp_path, "wait.py", WAIT_JOB, 2, n)
    waited = [read_record(records[r])["slots"][0]["wait_us"] for r in range(2)]
    # The waiter's extra time is the straggler's sleeps; on a loaded machine both ranks' calls
    # also take longer (the other is not running), so the bounds are on the difference.
    assert waited[0] - waited[1] >= n * 50_000 * 0.6, waited
    assert waited[1] < waited[0] / 2, waited


DDP_WAIT_JOB = """
    import sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, world, init, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    model = DDP(torch.nn.Linear(4, 4))
    for _ in range(n):
        if rank == 1:
            time.sleep(0.05)  # rank 0 waits for it at the end of every backward
        model(torch.ones(2, 4)).sum().backward()
    dist.destroy_process_group()
"""


def test_a_ddp_steps_wait_for_its_last_all_reduces_is_counted_for_stragglers(tmp_path,
                                                                            wrappers):
    # DDP's reducer waits for the gradient all-reduces at the end of the backward: that wait,
    # in the DDP slot's wait_us, is the faster rank's, not the straggler's.
    n = 10
    records, _, _ = run_ranks(tmp_path, "ddp_wait.py", DDP_WAIT_JOB, 2, n)
    slots = [read_record(records[r])["slots"][0] for r in range(2)]
    assert all(s["op"] == DDP_STEP and s["completed"] == n for s in slots), slots
    waited = [s["wait_us"] for s in slots]
    assert waited[0] - waited[1] >= (n - 1) * 50_000 * 0.6, waited  # as in the test above
    assert waited[1] < waited[0] / 2, waited


DDP_STEP = 13
DDP_ID_XOR = 0x0070657473504444  # b"DDPstep\0", little-endian (ccrun_progress.DDP_ID_XOR)

DDP_JOB = """
    import json, sys, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ccrun_progress as cp
    rank, world, init, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)

    def issued_completed(slot):
        base = (64 + 64 * slot) // 8
        return cp._u64[base + 2], cp._u64[base + 3]

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
    net[2].bias.requires_grad_(False)  # not reduced by DDP, not counted
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    states = []
    for _ in range(n):
        loss = model(torch.randn(4, 6)).sum()
        states.append(issued_completed(0))  # issued at the forward
        loss.backward()
        states.append(issued_completed(0))  # completed at the end of the backward
        opt.step()
        opt.zero_grad()
    # The module still pickles whole (torch.save of a DDP module) after its steps.
    import io
    torch.save(model, io.BytesIO())
    # Not steps: an eval-mode forward, a forward without grad, a forward inside no_sync().
    model.eval()
    model(torch.randn(4, 6))
    model.train()
    with torch.no_grad():
        model(torch.randn(4, 6))
    with model.no_sync():
        model(torch.randn(4, 6)).sum().backward()
    opt.zero_grad()
    # A second DDP module on the same group: a slot of its own. A step without a backward is
    # never completed in the record (the agent takes completed as at least issued - 1).
    other = DDP(torch.nn.Linear(3, 2))
    other(torch.randn(2, 3))
    states.append(issued_completed(1))
    out = other(torch.randn(2, 3))
    states.append(issued_completed(1))
    out.sum().backward()
    states.append(issued_completed(1))
    print("RESULT " + json.dumps({"count": 6 * 5 + 5 + 5, "other": 3 * 2 + 2,
                                  "states": states, "kind": type(DDP.forward).__name__}),
          flush=True)
    dist.destroy_process_group()
"""


def test_ddp_steps_are_recorded_in_a_slot_per_ddp_module(tmp_path, wrappers):
    n, world = 6, 2
    records, outs, pids = run_ranks(tmp_path, "ddp.py", DDP_JOB, world, n)
    for r in range(world):
        result = json.loads(outs[r].split("RESULT ", 1)[1])
        assert result["kind"] == KIND_TYPES[wrappers][1]
        expected = [pair for k in range(1, n + 1) for pair in ([k, k - 1], [k, k])]
        expected += [[1, 0], [2, 0], [2, 2]]
        assert result["states"] == expected
        rec = read_record(records[r])
        # DDP's own collectives run in C++: the two DDP slots are the only ones
        assert rec["groups_used"] == 2, rec
        first, second = rec["slots"]
        assert first["id"] == DDP_ID_XOR  # the world group (id 0), the first DDP module
        assert first["size"] == world and first["source"] == 2
        assert first["op"] == DDP_STEP and first["count"] == result["count"]
        assert first["op_calls"] == {}  # a DDP slot counts no ops
        assert (first["issued"], first["completed"]) == (n, n)
        assert 0 < first["issued_ns"] <= first["completed_ns"]
        assert second["id"] == DDP_ID_XOR ^ 1 and second["size"] == world
        assert second["op"] == DDP_STEP and second["count"] == result["other"]
        assert (second["issued"], second["completed"]) == (2, 2)
        # A DDP step is written in its slot only: the agent adds the DDP slots' issued to the
        # record's steps (marked by step()), which stay 0 here.
        assert (rec["steps"], rec["step_ns"]) == (0, 0)


DDP_REWRAP_JOB = """
    import json, sys, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ccrun_progress as cp
    rank, world, init, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    net = torch.nn.Linear(6, 5)
    for epoch in range(n):
        model = DDP(net)  # the model wrapped again every epoch: the last one gone
        for _ in range(2):
            model(torch.randn(4, 6)).sum().backward()
    # The watches of the modules gone came off the accumulator the last one watches too: its
    # Python hooks are the last module's watch and this probe, not one for every module made.
    acc = net.weight.view_as(net.weight).grad_fn.next_functions[0][0]
    hooks = len(acc.register_hook(lambda *_: None).hooks_dict_ref())
    print("RESULT " + json.dumps({"hooks": hooks}), flush=True)
    dist.destroy_process_group()
"""


def test_a_model_wrapped_in_ddp_every_epoch_never_runs_out_of_slots(tmp_path, wrappers):
    # 60 DDP modules one after another, past the record's 48 slots: each takes the slot of the
    # one before, gone; its steps stay counted; every step of the last is recorded.
    n, world = 60, 2
    records, outs, _ = run_ranks(tmp_path, "rewrap.py", DDP_REWRAP_JOB, world, n)
    for r in range(world):
        rec = read_record(records[r])
        assert rec["groups_used"] == 1, rec
        [slot] = rec["slots"]
        assert slot["id"] == DDP_ID_XOR ^ (n - 1) and slot["size"] == world, slot
        assert (slot["issued"], slot["completed"]) == (2, 2), slot
        assert rec["steps"] + slot["issued"] == 2 * n, rec  # steps as the agent counts them
        assert json.loads(outs[r].split("RESULT ", 1)[1]) == {"hooks": 2}


DDP_HANG_JOB = """
    import os, sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, world, init, n, late, go = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                      int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    model = DDP(torch.nn.Linear(8, 4))
    for step in range(1, n + 1):
        if step == late and rank == world - 1:
            print("late", flush=True)
            while not os.path.exists(go):
                time.sleep(0.01)
        model(torch.randn(2, 8)).sum().backward()
    print("done", flush=True)
    dist.destroy_process_group()
"""


def test_a_rank_late_for_a_ddp_step_is_behind_in_the_ddp_slot(tmp_path, wrappers):
    # The last rank stops before the forward of step `late`: the others issue it and wait in its
    # backward's all-reduces (torch's C++ reducer) with the step not completed; the late rank has
    # issued and completed only the step before. That is what names it in a hang verdict.
    n, late, world = 4, 3, 3
    script = tmp_path / "ddp_hang.py"
    script.write_text(textwrap.dedent(DDP_HANG_JOB))
    go = tmp_path / "go"
    init = f"tcp://127.0.0.1:{free_port()}"
    records = [make_record(tmp_path / f"rec{r}") for r in range(world)]
    procs = [subprocess.Popen([PYTHON, str(script), str(r), str(world), init, str(n), str(late),
                               str(go)], env=hook_env(records[r]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    try:
        assert procs[-1].stdout.readline().strip() == "late"
        deadline = time.monotonic() + 60
        while not all(read_record(records[r])["slots"][0]["issued"] == late
                      for r in range(world - 1)):
            assert time.monotonic() < deadline, [read_record(x) for x in records]
            time.sleep(0.01)
        for r in range(world - 1):
            slot = read_record(records[r])["slots"][0]
            assert (slot["issued"], slot["completed"], slot["op"]) == (late, late - 1, DDP_STEP)
        slot = read_record(records[-1])["slots"][0]
        assert (slot["issued"], slot["completed"]) == (late - 1, late - 1)
        assert all(p.poll() is None for p in procs)
        go.write_text("")
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, out + err
        for r in range(world):
            rec = read_record(records[r])
            assert (rec["slots"][0]["issued"], rec["slots"][0]["completed"]) == (n, n)
            assert rec["steps"] == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def other_pythons():
    """Pythons 3.11 or later here other than Debian's (pyenv's, a python3.1X): the stable-ABI
    module is for them."""
    found = glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[1-9]*/bin/python3"))
    found += glob.glob("/usr/bin/python3.1[2-9]") + glob.glob("/usr/local/bin/python3.1[1-9]")
    return sorted(set(os.path.realpath(p) for p in found) - {os.path.realpath(PYTHON)})


def test_the_stable_abi_module_works_in_every_other_python(tmp_path):
    # No torch in them here: stand-ins drive each of the module's types (hook_module_check.py).
    # Debian's own Python runs the same module with torch in the wrapper tests above.
    abi3 = glob.glob(os.path.join(EXT_DIR, "_ccrun_hook.abi3.so"))
    pythons = other_pythons()
    if not abi3 or not pythons:
        pytest.skip("no stable-ABI module built, or no other Python 3.11+ here")
    os.symlink(abi3[0], tmp_path / "_ccrun_hook.abi3.so")
    check = os.path.join(os.path.dirname(__file__), "hook_module_check.py")
    for python in pythons + [PYTHON]:
        record = make_record(tmp_path / "rec")
        r = subprocess.run([python, check, record], capture_output=True, text=True, timeout=60,
                           env={"PYTHONPATH": str(tmp_path), "PATH": os.environ["PATH"]})
        assert r.returncode == 0, f"{python}: {r.stdout}{r.stderr}"
        out = json.loads(r.stdout)
        assert out["module"] == "_ccrun_hook.abi3.so", python
        assert out["async"] == [3, 2], python
        assert out["collectives"] == {"issued": 3, "completed": 3, "op": 1, "count": 6,
                                      "op_calls": 3, "repr": True}, python
        assert out["forward"] == [42, 2], python
        assert out["ddp"] == {"issued": 2, "completed": 2, "entries": 1}, python
        assert out["firsts"] == ["collective", "step"], python
        assert out["numbers"] == [0, 1], python


def test_a_torch_that_reads_the_newer_name_of_a_variable_loses_the_older():
    # torch 2.2+ warns of NCCL_ASYNC_ERROR_HANDLING at every NCCL group, torch 2.11 of the
    # flight recorder's TORCH_NCCL_ names; the agent sets both names of each, the same value.
    sys.path.insert(0, HOOK_DIR)
    try:
        import ccrun_progress
    finally:
        sys.path.remove(HOOK_DIR)
    pairs = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "NCCL_ASYNC_ERROR_HANDLING",
             "TORCH_FR_BUFFER_SIZE": "TORCH_NCCL_TRACE_BUFFER_SIZE",
             "TORCH_FR_DUMP_TEMP_FILE": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
    every = {name: "v" + newer for newer, older in pairs.items() for name in (newer, older)}
    newer_only = {newer: "v" + newer for newer in pairs}
    since_2_2 = dict(newer_only, TORCH_NCCL_TRACE_BUFFER_SIZE="vTORCH_FR_BUFFER_SIZE",
                     TORCH_NCCL_DEBUG_INFO_TEMP_FILE="vTORCH_FR_DUMP_TEMP_FILE")
    for version, kept in (("1.13.1", every), ("2.1.2+cu121", every), ("2.2.0", since_2_2),
                          ("2.10.1", since_2_2), ("2.11.0+cu130", newer_only),
                          ("3.0.0", newer_only), ("", every), ("nightly", every)):
        env = dict(every)
        ccrun_progress.drop_superseded_env(version, env)
        assert env == kept, version
    # Values that differ are the user's: torch says what it reads.
    env = dict(every, NCCL_ASYNC_ERROR_HANDLING="0")
    ccrun_progress.drop_superseded_env("2.11.0", env)
    assert env == dict(newer_only, NCCL_ASYNC_ERROR_HANDLING="0")
