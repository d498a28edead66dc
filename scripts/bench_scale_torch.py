"""torch's c10d rendezvous at N nodes, driven as rdzv_scale_sim drives ccrun's:
N DynamicRendezvousHandlers (torch 1.13, C10dRendezvousBackend), each with
its own TCPStore client, as threads of this process, against one store at
--host:--port (scripts/bench-scale.sh points it at ccrun-rendezvous, which
speaks torch's protocol, so both sides are measured on the same server).

Prints one JSON object: form_s (every handler calling next_rendezvous() to
the last one returning), and the store's steady-state load over --steady
seconds: bytes per second through the store's port (ss's bytes_received +
bytes_acked of its connections) and per node. torch's keep-alive interval
is fixed at 5 s in 1.13. A silent node is not detected by this rendezvous
at all (torch's agent learns of it when its workers fail), so there is no
detection figure to take.
"""
import argparse
import datetime
import json
import subprocess
import threading
import time

from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler


def port_bytes(port):
    """Bytes through the established connections whose local port is `port`."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True).stdout
    total = 0
    for field in out.split():
        for name in ("bytes_received:", "bytes_acked:"):
            if field.startswith(name):
                total += int(field[len(name):])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--steady", type=float, default=10)
    a = ap.parse_args()
    run_id = f"torch-scale-{time.time_ns()}"
    handlers = []
    for _ in range(a.nodes):
        store = TCPStore(a.host, a.port, is_master=False,
                         timeout=datetime.timedelta(seconds=600))
        params = RendezvousParameters("c10d", f"{a.host}:{a.port}", run_id, a.nodes, a.nodes,
                                      join_timeout=600, last_call_timeout=600)
        handlers.append(create_handler(store, C10dRendezvousBackend(store, run_id), params))
    errors = []

    def join(h):
        try:
            h.next_rendezvous()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=join, args=(h,)) for h in handlers]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    form = time.monotonic() - t0
    if errors:
        raise SystemExit(f"bench_scale_torch: a handler failed to join: {errors[0]}")
    b0, s0 = port_bytes(a.port), time.monotonic()
    time.sleep(a.steady)
    b1, s1 = port_bytes(a.port), time.monotonic()
    rate = (b1 - b0) / (s1 - s0)
    print(json.dumps({"nodes": a.nodes, "form_s": form, "bytes_per_s": rate,
                      "bytes_per_node_per_s": rate / a.nodes}))
    for h in handlers:
        h.shutdown()


if __name__ == "__main__":
    main()
