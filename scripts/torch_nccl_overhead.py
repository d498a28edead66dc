"""torch.distributed's own NCCL all_reduce at world size 1, timed the way
tests/tools/nccl_overhead_bench.cpp times ccrun's and raw NCCL's: one call
then a sync (dist.all_reduce(t); torch.cuda.synchronize()), float32 from 4 B
to max_bytes in steps of 16x, 1000 calls per size after 100 of warm-up, best
of 3 rounds. One JSON line per size: {"bytes": ..., "torch_us": ...}.
Exits 77 (skipped) when torch has no CUDA. Used by scripts/gpu-check.sh.

    python3 scripts/torch_nccl_overhead.py [max_bytes]
"""
import json
import os
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("torch_nccl_overhead: skipped: torch is not importable", file=sys.stderr)
    sys.exit(77)
if not torch.cuda.is_available():
    print("torch_nccl_overhead: skipped: torch sees no CUDA device", file=sys.stderr)
    sys.exit(77)

max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
with socket.socket() as s:  # a free loopback port for the one-rank store
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(port))
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1)
buf = torch.zeros(max_bytes // 4, dtype=torch.float32, device="cuda")
iters = 1000
size = 4
while size <= max_bytes:
    t = buf[: size // 4]

    def once():
        dist.all_reduce(t)
        torch.cuda.synchronize()

    best = float("inf")
    for _ in range(3):
        for _ in range(iters // 10):
            once()
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        best = min(best, (time.perf_counter() - t0) / iters * 1e6)
    print(json.dumps({"bytes": size, "torch_us": round(best, 2)}), flush=True)
    size *= 16
dist.destroy_process_group()
