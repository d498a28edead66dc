"""A worker that uses MASTER_PORT's store as torch 2.x's workers do: a plain client, no
per-attempt prefix. In attempt 0 every rank leaves a key, then the last rank fails once all the
keys are there; in attempt 1 each rank says which keys of attempt 0 it still finds:
"LEFTOVER <rank> <count>"."""
import datetime
import os
import sys
import time

import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      datetime.timedelta(seconds=60))
keys = ["left_by_rank_%d" % r for r in range(world)]
if attempt == 0:
    store.set(keys[rank], "attempt 0")
    store.wait(keys)
    if rank == world - 1:
        sys.exit(1)
    time.sleep(120)  # stopped by the agent
found = 0
for k in keys:
    try:
        store.wait([k], datetime.timedelta(milliseconds=200))
        found += 1
    except RuntimeError:  # torch 1.13's timeout
        pass
print("LEFTOVER", rank, found, flush=True)
