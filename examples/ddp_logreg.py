"""A small data-parallel training job for the demo: logistic regression on a
synthetic data set, one shard per worker, gradients all-reduced over gloo
(torch.distributed + DistributedDataParallel on CPU), or over NCCL on
cuda:LOCAL_RANK with --device cuda. Run it under ccrun:

    ccrun --nproc-per-node 4 examples/ddp_logreg.py --epochs 20
    ccrun --nproc-per-node <GPUs> examples/ddp_logreg.py --device cuda
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--samples", type=int, default=4096)
parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
args = parser.parse_args()

if args.device == "cuda":
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

# The same data set on every worker (fixed seed); each trains on its shard.
gen = torch.Generator().manual_seed(0)
true_w = torch.randn(16, generator=gen)
x = torch.randn(args.samples, 16, generator=gen)
y = (x @ true_w > 0).float()
x, y = x.to(device), y.to(device)
shard = slice(rank * args.samples // world, (rank + 1) * args.samples // world)

model = DDP(torch.nn.Linear(16, 1).to(device),
            device_ids=[device.index] if device.type == "cuda" else None)
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
    print(f"trained on {world} workers on {device.type} (restart count "
          f"{os.environ.get('TORCHELASTIC_RESTART_COUNT')}): accuracy {acc:.3f}", flush=True)
dist.destroy_process_group()
