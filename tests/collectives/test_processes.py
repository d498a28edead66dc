# ctest: RUN_SERIAL
"""The collective library across real processes: collectives_check ranks
bootstrapped by env://, tcp:// and file://, and a rank that dies while the
others keep calling (they must fail with an error, not hang)."""
import os
import socket
import subprocess
import tempfile

import pytest

BUILD = os.environ.get("CCRUN_BUILD_DIR", "build")
CHECK = os.path.join(BUILD, "tests", "collectives_check")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(n, args, env_extra=None, timeout=240):
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CCRUN_STORE")}
        env.update({"RANK": str(r), "WORLD_SIZE": str(n)})
        env.update(env_extra or {})
        procs.append(subprocess.Popen([CHECK] + args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


@pytest.mark.parametrize("n", [2, 3])
def test_env_init(n):
    port = free_port()
    res = run_ranks(n, [], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    for rc, out, err in res:
        assert rc == 0, err
        assert "all operations correct" in out


@pytest.mark.parametrize("direct_bytes", ["0", "1000000000"])
def test_every_size_through_either_algorithm(direct_bytes):
    # 0: rings and trees even for one element; 1e9: one-step exchanges even
    # for 1M+1 elements. The default mixes both by size.
    port = free_port()
    res = run_ranks(3, [], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                            "CCRUN_GLOO_DIRECT_BYTES": direct_bytes})
    for rc, out, err in res:
        assert rc == 0, err
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
