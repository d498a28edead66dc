"""The torch side of scripts/bench-collectives.sh: torch.distributed's gloo
backend (Debian's python3-torch 1.13), same ops, sizes and output format as
tests/tools/collectives_bench.cpp. Run under ccrun."""
import json
import sys
import time

import torch
import torch.distributed as dist

max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
dist.init_process_group("gloo")
n, rank = dist.get_world_size(), dist.get_rank()
# Allocated once for the largest size, as in collectives_bench.cpp; each size
# uses views of these.
max_count = max(max_bytes // 4, 1)
big_buf, small_buf, buf_all = torch.ones(max_count + n), torch.ones(max_count), torch.ones(max_count)
for op in ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]:
    b = 4
    while b <= max_bytes:
        count = max(b // 4, 1)
        part = max(count // n, 1)
        buf = buf_all[:count]
        small = small_buf[:part]
        outs = [big_buf[i * part:(i + 1) * part] for i in range(n)]

        def once():
            if op == "all_reduce":
                dist.all_reduce(buf)
            elif op == "broadcast":
                dist.broadcast(buf, 0)
            elif op == "all_gather":
                dist.all_gather(outs, small)
            else:
                dist.reduce_scatter(small, outs)

        try:
            iters = max(3, min(200, (64 << 20) // b))
            for _ in range(max(2, iters // 2)):  # as collectives_bench.cpp
                once()
            dist.barrier()
            times = []
            for _ in range(iters):  # each call on its own, as collectives_bench.cpp
                t0 = time.perf_counter()
                once()
                times.append((time.perf_counter() - t0) * 1e6)
            mean = sum(times) / iters
            us = sorted(times)[iters // 2]
        except RuntimeError as e:
            us = mean = None  # 1.13's gloo has no reduce_scatter
        if rank == 0:
            print(json.dumps({"op": op, "bytes": b, "ranks": n, "us": us, "mean_us": mean}), flush=True)
        b *= 16
dist.barrier()
