"""A small data-parallel training job for the demo: logistic regression on a
synthetic data set, one shard per worker, gradients all-reduced over gloo
(torch.distributed + DistributedDataParallel on CPU). Run it under ccrun:

    ccrun --nproc-per-node 4 examples/ddp_logreg.py --epochs 20
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--samples", type=int, default=4096)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

# The same data set on every worker (fixed seed); each trains on its shard.
gen = torch.Generator().manual_seed(0)
true_w = torch.randn(16, generator=gen)
x = torch.randn(args.samples, 16, generator=gen)
y = (x @ true_w > 0).float()
shard = slice(rank * args.samples // world, (rank + 1) * args.samples // world)

model = DDP(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
loss_fn = torch.nn.BCEWithLogitsLoss()
for epoch in range(args.epochs):
    opt.zero_grad()
    loss = loss_fn(model(x[shard]).squeeze(1), y[shard])
    loss.backward()  # DDP all-reduces the gradients here
    opt.step()
    if epoch % 5 == 4 or epoch == args.epochs - 1:
        t = loss.detach().clone()
        dist.all_reduce(t)
        if rank == 0:
            print(f"epoch {epoch + 1}: mean loss {t.item() / world:.4f}", flush=True)

with torch.no_grad():
    acc = ((model(x).squeeze(1) > 0).float() == y).float().mean().item()
if rank == 0:
    print(f"trained on {world} workers (restart count "
          f"{os.environ.get('TORCHELASTIC_RESTART_COUNT')}): accuracy {acc:.3f}", flush=True)
dist.destroy_process_group()
