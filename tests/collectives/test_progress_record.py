"""The progress record through real processes: collectives_check ranks, each
with a record file of its own as ccrun's agent makes them (CCRUN_PROGRESS_FILE),
record every call of the world group and of the subgroup of the even ranks
(docs/collectives.md, "Progress record"); a file that is not a record is
ignored, not a crash."""
import os
import struct
import subprocess
import tempfile

from helpers import free_port

BUILD = os.environ.get("CCRUN_BUILD_DIR", "build")
CHECK = os.path.join(BUILD, "tests", "collectives_check")

MAGIC, VERSION, RECORD_BYTES = 0x3152505255524343, 1, 4096
HEADER, SLOT = 64, 64
OPS = ["none", "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
       "reduce_scatter", "all_to_all", "send", "recv", "barrier", "other"]


def make_record(path):
    page = bytearray(RECORD_BYTES)
    struct.pack_into("<QII", page, 0, MAGIC, VERSION, RECORD_BYTES)
    with open(path, "wb") as f:
        f.write(page)


def read_record(path):
    with open(path, "rb") as f:
        page = f.read()
    pid, = struct.unpack_from("<i", page, 16)
    used, = struct.unpack_from("<I", page, 40)
    slots = []
    for i in range(min(used, 48)):
        (gid, size, source, issued, completed, op, _, count, issued_ns,
         completed_ns) = struct.unpack_from("<QIIQQIIQqq", page, HEADER + i * SLOT)
        calls = struct.unpack_from("<12I", page, 3200 + 48 * i) if i < 16 else ()
        slots.append(dict(id=gid, size=size, source=source, issued=issued, completed=completed,
                          op=OPS[op], count=count, issued_ns=issued_ns,
                          completed_ns=completed_ns,
                          op_calls={OPS[o]: n for o, n in enumerate(calls, 1) if n}))
    return pid, slots


def run_ranks(n, record_for_rank):
    port = free_port()
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CCRUN_")}
        env.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), CCRUN_PROGRESS_FILE=record_for_rank(r))
        procs.append(subprocess.Popen([CHECK], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    try:
        results = [(p.pid,) + p.communicate(timeout=240) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for _, out, err, rc in results:
        assert rc == 0, err
        assert "all operations correct" in out
    return [pid for pid, _, _, _ in results]


def test_every_rank_records_its_groups():
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"rank{r}.progress") for r in range(3)]
        for p in paths:
            make_record(p)
        pids = run_ranks(3, lambda r: paths[r])
        records = [read_record(p) for p in paths]

    worlds = []
    for r, (pid, slots) in enumerate(records):
        assert pid == pids[r]
        # The world group, then the subgroup of the even ranks on its members only.
        assert len(slots) == (2 if r % 2 == 0 else 1), slots
        world = slots[0]
        assert (world["id"], world["size"], world["source"]) == (0, 3, 1)
        assert world["issued"] > 10
        assert world["completed"] == world["issued"]
        assert world["op"] == "barrier" and world["count"] == 0
        assert 0 < world["issued_ns"] <= world["completed_ns"]
        # every call counted once, under its op
        assert sum(world["op_calls"].values()) == world["issued"], world
        assert world["op_calls"]["barrier"] >= 1 and world["op_calls"]["all_reduce"] >= 1
        worlds.append((world["issued"], world["op_calls"]))
    assert all(w == worlds[0] for w in worlds)  # every rank issued the same calls

    subs = [slots[1] for _, slots in records[0::2]]
    assert subs[0]["id"] != 0
    assert subs[0]["id"] == subs[1]["id"]
    for s in subs:
        assert (s["size"], s["issued"], s["completed"], s["op"], s["count"]) == \
            (2, 1, 1, "all_reduce", 1)
        assert s["op_calls"] == {"all_reduce": 1}


def test_a_file_that_is_not_a_record_is_ignored():
    # Empty, short, or another magic: the ranks run as without a record.
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty")
        open(empty, "wb").close()
        other = os.path.join(tmp, "other")
        with open(other, "wb") as f:
            f.write(b"x" * RECORD_BYTES)
        run_ranks(3, lambda r: [empty, other, os.path.join(tmp, "missing")][r])
        with open(other, "rb") as f:
            assert f.read() == b"x" * RECORD_BYTES
