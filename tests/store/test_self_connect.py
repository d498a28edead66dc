"""A store client whose server is not listening yet, on a port of the host's ephemeral range,
is refused, never joined to itself: the kernel may pick the server's port as the connection's
own and connect it to itself (TCP's simultaneous open), and a client reading its own requests
back as answers fails with a baffling error (or trusts them). An agent reconnecting to a
restarted ccrun-rendezvous meets this. The test narrows the ephemeral range of a network
namespace of its own to the server's port and the next, so that the first try is that case."""
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from helpers import binary  # noqa: E402

PORT = 40000
SCRIPT = f"""
ip link set lo up || exit 90
echo "{PORT} {PORT + 1}" > /proc/sys/net/ipv4/ip_local_port_range || exit 90
exec "$@"
"""


def in_fresh_namespace(*cmd):
    """Runs `cmd` in a network namespace of its own (gone with it), its ephemeral ports
    narrowed to PORT and PORT + 1."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("skipped: needs root, unshare and ip to make a network namespace")
    r = subprocess.run(["unshare", "--net", "sh", "-c", SCRIPT, "sh", *cmd],
                       capture_output=True, text=True, timeout=60)
    if r.returncode == 90 or "unshare:" in r.stderr:
        pytest.skip(f"skipped: cannot make a network namespace here: {r.stderr.strip()}")
    return r


def test_a_client_is_refused_not_connected_to_itself():
    # The torch 2.x dialect's first request (validate, then ping) and the 1.13 dialect's.
    for protocol in ("torch2", "torch113"):
        r = in_fresh_namespace(binary("tests", "store_cli"), "--port", str(PORT),
                               "--protocol", protocol, "--timeout", "1", "set", "k", "v", "get",
                               "k")
        assert r.returncode != 0, r.stdout
        assert f"store 127.0.0.1:{PORT}: connection refused after 1s of retries" in r.stderr, \
            (protocol, r.stderr)
