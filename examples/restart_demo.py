"""A data-parallel two-layer MLP over gloo (torch DDP on CPU) whose rank 1 crashes once: what a
warm start saves, and the job scripts/bench-startup.sh times under ccrun cold, ccrun warm and
torchrun.

    ccrun --standalone --warm-start --nproc-per-node 4 --max-restarts 1 \
          examples/restart_demo.py --crash-at 20

ccrun then says, for each attempt, how long its ranks took to their first step and where the time
went (docs/startup.md). Each rank prints when it reached each start-up phase
(wall clock, so the bench can line ranks and launchers up):

    BENCH <attempt> <rank> <phase> <time.time()>

phases: main (the script runs), imports (torch imported), group (init_process_group returned),
step (the first training step done). With --crash-at N, rank 1 of attempt 0 (rank 0 when it runs
alone) exits with code 1 after step N, printing "BENCH 0 <rank> crash <time>"; the launcher restarts
the group once. With --device cuda each rank trains on GPU LOCAL_RANK over NCCL (one rank a GPU),
and its first step counts once the GPU finished it.
"""
import os
import sys
import time

_main = time.time()
import torch  # noqa: E402
_imports = time.time()
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


steps = int(option("--steps", 40))
crash_at = int(option("--crash-at", 0))
device = option("--device", "cpu")
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

if device == "cuda":
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
else:
    dist.init_process_group("gloo")
_group = time.time()
rank = dist.get_rank()
crash_rank = 1 if dist.get_world_size() > 1 else 0


def say(phase, at):
    # One write a line: ranks that share an output (torchrun's) never interleave within a line.
    os.write(1, f"BENCH {attempt} {rank} {phase} {at:.6f}\n".encode())


say("main", _main)
say("imports", _imports)
say("group", _group)
torch.manual_seed(rank)
mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
if device == "cuda":
    model = DDP(mlp.cuda(), device_ids=[local_rank])
else:
    model = DDP(mlp)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 64, device=device), torch.randn(128, 1, device=device)
for step in range(1, steps + 1):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if step == 1:
        if device == "cuda":
            torch.cuda.synchronize()
        say("step", time.time())
    if attempt == 0 and rank == crash_rank and step == crash_at:
        say("crash", time.time())
        os._exit(1)
dist.destroy_process_group()
