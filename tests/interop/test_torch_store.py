# ctest: LABELS torch
"""Interoperability with Debian's PyTorch 1.13: torch's TCPStore client against
ccrun-rendezvous, and ccrun's TcpStore client (store_cli) against torch's own
TCPStore server."""
import datetime
import subprocess
import time

import pytest

from helpers import binary, free_port, start_daemon

torch = pytest.importorskip("torch", reason="skipped: python3-torch is not installed")
import torch.distributed as dist  # noqa: E402


def torch_client(port, timeout_s=10):
    return dist.TCPStore("127.0.0.1", port, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def test_torch_client_against_ccrun_daemon():
    with start_daemon() as d:
        s = torch_client(d.port)
        s.set("k1", "v1")
        assert s.get("k1") == b"v1"
        assert s.add("ctr", 5) == 5
        assert s.add("ctr", 2) == 7
        assert s.compare_set("k1", "v1", "v2") == b"v2"
        assert s.compare_set("k1", "nope", "v3") == b"v2"
        assert s.compare_set("fresh", "", "x") == b"x"
        s.wait(["k1", "fresh"])
        assert s.num_keys() >= 3
        assert s.delete_key("k1") is True
        assert s.delete_key("k1") is False
        s.set_timeout(datetime.timedelta(seconds=1))
        t0 = time.monotonic()
        with pytest.raises(RuntimeError):
            s.get("never-set")
        assert time.monotonic() - t0 < 10
        with pytest.raises(RuntimeError):
            s.wait(["never-set"], datetime.timedelta(milliseconds=300))
        # A fresh client still works after another one timed out.
        s2 = torch_client(d.port)
        assert s2.get("fresh") == b"x"
        assert d.proc.poll() is None


def test_torch_clients_barrier_through_ccrun_daemon():
    with start_daemon() as d:
        clients = [torch_client(d.port) for _ in range(8)]
        for i, c in enumerate(clients):
            if c.add("arrived", 1) == len(clients):
                c.set("go", "1")
        for c in clients:
            c.wait(["go"])
        assert clients[0].get("arrived") == b"8"


def test_torch_waiter_woken_by_ccrun_client():
    with start_daemon() as d:
        s = torch_client(d.port)
        p = subprocess.Popen([binary("tests", "store_cli"), "--port", str(d.port),
                              "set", "/from-ccrun", "hello"], stdout=subprocess.PIPE, text=True)
        # torch's client puts "/" before user keys: "from-ccrun" is "/from-ccrun".
        assert s.get("from-ccrun") == b"hello"
        assert p.wait(10) == 0


def test_ccrun_client_against_torch_server():
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))
    server.set("from-torch", "t")
    out = subprocess.run(
        [binary("tests", "store_cli"), "--port", str(port), "--protocol", "torch113",
         "set", "k", "v", "get", "k", "add", "n", "5", "add", "n", "-2",
         "compare_set", "k", "v", "w", "compare_set", "k", "x", "y",
         "check", "k", "wait", "k", "delete", "k", "check", "k",
         "get", "/from-torch", "ping", "num_keys"],
        capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:-1] == [
        "ok", "v", "5", "3", "w", "w", "true", "ok", "true", "false", "t", "ok",
        out.stdout.split("\n")[-2]]
    assert int(out.stdout.split("\n")[-2]) >= 2
    # A timed-out get names the key, and torch's server survives it.
    out = subprocess.run(
        [binary("tests", "store_cli"), "--port", str(port), "--protocol", "torch113",
         "--timeout", "0.5", "get", "missing"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 3
    assert '"missing"' in out.stdout
    assert server.get("from-torch") == b"t"


def _timed_out_wait_then_more(port, set_never):
    """What a torch 1.13 client sees after a timed-out wait (it has no
    CANCEL_WAIT: it stops reading and sends its next request).
    Returns the observations, to compare ccrun's server with torch's."""
    c = dist.TCPStore("127.0.0.1", port, None, False,
                      timeout=datetime.timedelta(seconds=3))
    c.set("a", "1")
    with pytest.raises(RuntimeError):
        c.wait(["never"], datetime.timedelta(milliseconds=300))
    seen = []
    # The requests behind the parked WAIT are answered at once...
    t0 = time.monotonic()
    seen.append(("num_keys", c.num_keys()))
    seen.append(("get", c.get("a")))
    assert time.monotonic() - t0 < 2, "requests behind a parked WAIT were held back"
    # ...and once "never" appears, the WAIT's STOP_WAITING byte is sent; the
    # 1.13 client, which has no CANCEL_WAIT, reads it as the start of its
    # next reply (torch's own server does the same).
    set_never()
    time.sleep(0.3)
    seen.append(("num_keys after", c.num_keys()))
    return seen


def test_torch113_client_after_timed_out_wait_matches_torch_server():
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))
    expected = _timed_out_wait_then_more(port, lambda: server.set("never", "x"))
    assert expected[:2] == [("num_keys", 1), ("get", b"1")]
    with start_daemon() as d:
        setter = torch_client(d.port)
        seen = _timed_out_wait_then_more(d.port, lambda: setter.set("never", "x"))
        assert seen == expected
        # A fresh client is unaffected.
        assert torch_client(d.port).get("a") == b"1"
        assert d.proc.poll() is None


CLIENT_CPU = """
import datetime, resource, sys, time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False,
                  timeout=datetime.timedelta(seconds=10))
s.set("k", "v")
time.sleep(2.5)  # past --first-request-timeout: its watch_key connection never spoke
before = resource.getrusage(resource.RUSAGE_SELF)
time.sleep(2)
after = resource.getrusage(resource.RUSAGE_SELF)
print((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
print(s.get("k").decode())
"""


def test_a_silent_torch_connection_costs_its_client_nothing():
    # torch 1.13's client opens a second connection (for
    # watch_key) that never sends a request; once the daemon closed it, the
    # client's watcher thread spun a whole core (2.99 CPU-s in 3 s).
    with start_daemon("--first-request-timeout", "1") as d:
        r = subprocess.run(["/usr/bin/python3", "-c", CLIENT_CPU, str(d.port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cpu_seconds, value = r.stdout.split()
    assert value == "v"
    assert float(cpu_seconds) < 0.5, f"the client used {cpu_seconds} CPU-s in 2 s"
