r"""A plain torch.distributed gloo job with nothing of ccrun in it, whose rank
--sleep-rank goes wrong at step --sleep-before: what ccrun's hang verdict
names (docs/hangs.md). --fault says how:

    sleep    it stalls for --sleep-s (a data loader that never returns; the default)
    stop     it stops itself with SIGSTOP
    lock     it waits for a lock that its metrics thread holds for ever
    loader   it waits for a batch from a torch DataLoader whose worker process never
             returns one
    size     it all_reduces twice the elements the others do
    kill     it is killed (SIGKILL) while it waits inside that step's all_reduce for
             the others, who come 2 s late: not a hang, a rank that died
    barrier  it calls barrier() where the others call all_reduce()
    skip     it skips that step's all_reduce, and so reaches the final barrier
             while the others are still in their last all_reduce
    gpu      (with --device cuda) a GPU kernel that never ends runs on its
             stream before that step's all_reduce: the collective is issued
             and never completes on the GPU, and the rank waits for it in
             torch.cuda.synchronize() (a hung kernel, or NCCL waiting on a peer)

--pairs makes each step all_reduce within the rank's pair first ({0,1}, {2,3}, ...), then in
the world: a fault in a pair's call hangs a subgroup first. --pipeline makes each step pass a tensor around the ranks' ring (send to the next, receive from
the one before, as a pipeline's stages do) instead of the all_reduce.

    ccrun --standalone --nproc-per-node 4 --hang-timeout 10 examples/hang_demo.py \
          --sleep-rank 2        # stalls before step 100 for 600 s

tests/integration/test_hangs.py runs it."""
import argparse
import os
import signal
import threading
import time

import torch
import torch.distributed as dist


def wait_for_the_data_loader(seconds):
    time.sleep(seconds)


def flush_metrics(lock):
    with lock:
        pass


def lock_held_for_ever():
    """A lock that a thread of this process takes and never gives back."""
    lock, taken = threading.Lock(), threading.Event()

    def metrics_thread():
        with lock:
            taken.set()
            threading.Event().wait()

    threading.Thread(target=metrics_thread, daemon=True).start()
    taken.wait()
    return lock


class NeverReady(torch.utils.data.Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        threading.Event().wait()


def next_batch(loader):
    return next(iter(loader))


def killed_inside(t):
    """This rank's all_reduce, during which the rank is killed: the others come 2 s late."""
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    dist.all_reduce(t)


def pass_around_the_ring(t):
    """Sends t to the next rank and receives the one before's into it; even ranks send first,
    odd ranks receive first, so that blocking sends and receives pair up."""
    rank, size = dist.get_rank(), dist.get_world_size()
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    if rank % 2 == 0:
        dist.send(t, nxt)
        dist.recv(t, prev)
    else:
        received = torch.empty_like(t)
        dist.recv(received, prev)
        dist.send(t, nxt)
        t.copy_(received)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="steps, one all_reduce each (default 200)")
    p.add_argument("--sleep-rank", type=int, default=-1,
                   help="the rank that goes wrong (default -1: none, a healthy job)")
    p.add_argument("--sleep-before", type=int, default=100,
                   help="the step it goes wrong at (default 100)")
    p.add_argument("--sleep-s", type=float, default=600,
                   help="--fault sleep: how long it stalls, s (default 600)")
    p.add_argument("--fault", default="sleep",
                   choices=["sleep", "stop", "lock", "loader", "barrier", "skip", "size", "kill", "gpu"],
                   help="how it goes wrong (above; default sleep)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: NCCL, one GPU a rank (LOCAL_RANK)")
    p.add_argument("--ddp", action="store_true",
                   help="train a DistributedDataParallel model (its all-reduces run in torch's "
                        "C++ reducer) instead of calling all_reduce")
    p.add_argument("--pairs", action="store_true",
                   help="all_reduce within the rank's pair first ({0,1}, {2,3}, ...), then in "
                        "the world")
    p.add_argument("--pipeline", action="store_true",
                   help="pass a tensor around the ring of ranks each step (send, recv) instead "
                        "of calling all_reduce")
    a = p.parse_args()
    if a.fault == "gpu" and a.device != "cuda":
        p.error("--fault gpu needs --device cuda")
    if a.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if a.device == "cuda" else "gloo")
    t = torch.ones(256, device=a.device)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1).to(a.device)) if a.ddp else None
    rank, size = dist.get_rank(), dist.get_world_size()
    pairs = [dist.new_group(list(range(r, min(r + 2, size)))) for r in range(0, size, 2)] if a.pairs else []
    lock = lock_held_for_ever() if a.fault == "lock" and rank == a.sleep_rank else None
    loader = (torch.utils.data.DataLoader(NeverReady(), num_workers=1)
              if a.fault == "loader" and rank == a.sleep_rank else None)
    for step in range(1, a.steps + 1):
        if step == a.sleep_before and a.fault == "kill" and rank != a.sleep_rank:
            time.sleep(2)
        if rank == a.sleep_rank and step == a.sleep_before:
            if a.fault == "sleep":
                wait_for_the_data_loader(a.sleep_s)
            elif a.fault == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif a.fault == "lock":
                flush_metrics(lock)
            elif a.fault == "loader":
                next_batch(loader)
            elif a.fault == "size":
                dist.all_reduce(torch.ones(2 * len(t), device=a.device))
                continue
            elif a.fault == "kill":
                killed_inside(t)
            elif a.fault == "barrier":
                dist.barrier()
                continue
            elif a.fault == "skip":
                continue
            elif a.fault == "gpu":
                torch.cuda._sleep(1 << 62)  # spins for years on this rank's stream
        if pairs:
            dist.all_reduce(t, group=pairs[rank // 2])
        if model:
            model(torch.randn(8, 16, device=a.device)).sum().backward()
        elif a.pipeline:
            pass_around_the_ring(t)
        else:
            dist.all_reduce(t)
        if a.device == "cuda":
            torch.cuda.synchronize()
        if dist.get_rank() == 0 and step % 100 == 0:
            print(f"step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
