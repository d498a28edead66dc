"""A real PyTorch job: gloo all_reduce over env://, failing once in attempt 0
when asked (--fail-rank R), to test restarts."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0 and rank == args.fail_rank:
    print(f"rank {rank}: injected failure", file=sys.stderr, flush=True)
    sys.exit(7)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
print(f"RESULT rank={rank} world={world} attempt={attempt} sum={t.item()} ok={t.item() == expected} "
      f"master={os.environ['MASTER_ADDR']}",
      flush=True)
dist.barrier()
dist.destroy_process_group()
