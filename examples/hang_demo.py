"""A plain torch.distributed gloo job with nothing of ccrun in it, whose rank
--sleep-rank goes wrong at step --sleep-before: what ccrun's hang verdict
names (docs/hangs.md). --fault says how:

    sleep    it stalls for --sleep-s (a data loader that never returns; the default)
    stop     it stops itself with SIGSTOP
    barrier  it calls barrier() where the others call all_reduce()
    skip     it skips that step's all_reduce, and so reaches the final barrier
             while the others are still in their last all_reduce

    ccrun --standalone --nproc-per-node 4 --hang-timeout 10 examples/hang_demo.py \
          --sleep-rank 2        # stalls before step 100 for 600 s

tests/integration/test_hangs.py runs it."""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist


def wait_for_the_data_loader(seconds):
    time.sleep(seconds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--sleep-rank", type=int, default=-1)
    p.add_argument("--sleep-before", type=int, default=100)
    p.add_argument("--sleep-s", type=float, default=600)
    p.add_argument("--fault", choices=["sleep", "stop", "barrier", "skip"], default="sleep")
    p.add_argument("--ddp", action="store_true",
                   help="train a DistributedDataParallel model (its all-reduces run in torch's "
                        "C++ reducer) instead of calling all_reduce")
    a = p.parse_args()
    dist.init_process_group("gloo")
    t = torch.ones(256)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1)) if a.ddp else None
    for step in range(1, a.steps + 1):
        if dist.get_rank() == a.sleep_rank and step == a.sleep_before:
            if a.fault == "sleep":
                wait_for_the_data_loader(a.sleep_s)
            elif a.fault == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif a.fault == "barrier":
                dist.barrier()
                continue
            elif a.fault == "skip":
                continue
        if model:
            model(torch.randn(8, 16)).sum().backward()
        else:
            dist.all_reduce(t)
        if dist.get_rank() == 0 and step % 100 == 0:
            print(f"step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
