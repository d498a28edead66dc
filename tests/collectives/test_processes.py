# ctest: RUN_SERIAL
"""The collective library across real processes: collectives_check ranks
bootstrapped by env://, tcp:// and file://, and a rank that dies while the
others keep calling (they must fail with an error, not hang)."""
import os
import subprocess
import tempfile

import pytest

from helpers import communicate_all, free_port

BUILD = os.environ.get("CCRUN_BUILD_DIR", "build")
CHECK = os.path.join(BUILD, "tests", "collectives_check")


def run_ranks(n, args, env_extra=None, timeout=240):
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CCRUN_STORE")}
        env.update({"RANK": str(r), "WORLD_SIZE": str(n)})
        env.update(env_extra or {})
        procs.append(subprocess.Popen([CHECK] + args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return communicate_all(procs, timeout)


@pytest.mark.parametrize("n", [2, 3])
def test_env_init(n):
    port = free_port()
    res = run_ranks(n, [], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    for rc, out, err in res:
        assert rc == 0, err
        assert "all operations correct" in out


@pytest.mark.parametrize("direct_bytes,local_copy", [("0", "1"), ("0", "0"), ("1000000000", "1")])
def test_every_size_through_either_algorithm(direct_bytes, local_copy):
    # 0: rings, trees and single-copy reads even for one element (or, with
    # local copy off, gloo's TCP rings and trees); 1e9: one-step exchanges
    # even for 1M+1 elements. The default mixes them by size.
    port = free_port()
    res = run_ranks(3, [], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                            "CCRUN_GLOO_DIRECT_BYTES": direct_bytes,
                            "CCRUN_GLOO_LOCAL_COPY": local_copy})
    for rc, out, err in res:
        assert rc == 0, err
        assert "all operations correct" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a rank as another user")
def test_ranks_that_cannot_read_each_other_fall_back_to_tcp():
    # Rank 1 runs as nobody: it may not read rank 0's memory (rank 0, root,
    # could read its). Both must agree to use TCP, not deadlock half-way.
    port = free_port()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "CCRUN_GLOO_DIRECT_BYTES": "0"}
    procs = []
    for r in range(2):
        e = {k: v for k, v in os.environ.items() if not k.startswith("CCRUN_STORE")}
        e.update(env, RANK=str(r), WORLD_SIZE="2")
        cmd = [os.path.abspath(CHECK)]
        if r == 1:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "all operations correct" in out


def test_bad_direct_bytes_is_named():
    port = free_port()
    res = run_ranks(1, [], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                            "CCRUN_GLOO_DIRECT_BYTES": "64k"})
    rc, out, err = res[0]
    assert rc != 0
    assert 'CCRUN_GLOO_DIRECT_BYTES="64k" is not a byte count' in err


def test_tcp_init():
    port = free_port()
    res = run_ranks(2, ["--init-method", f"tcp://127.0.0.1:{port}"])
    for rc, out, err in res:
        assert rc == 0, err


def test_file_init():
    with tempfile.TemporaryDirectory() as d:
        res = run_ranks(3, ["--init-method", f"file://{d}/store"])
    for rc, out, err in res:
        assert rc == 0, err


def test_dead_rank_fails_the_others():
    port = free_port()
    res = run_ranks(3, ["--die-after-barrier", "1", "--timeout", "20"],
                    {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}, timeout=120)
    assert res[1][0] == 3
    for r in (0, 2):
        rc, out, err = res[r]
        assert rc == 2, (rc, err)
        assert "collectives_check: error:" in err
