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
step (the first training step done). With --crash-at N, rank 1 of attempt 0 exits with code 1
after step N, printing "BENCH 0 1 crash <time>"; the launcher restarts the group once.
"""
import os
import sys
import time

_main = time.time()
import torch  # noqa: E402
_imports = time.time()
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 40
crash_at = int(sys.argv[sys.argv.index("--crash-at") + 1]) if "--crash-at" in sys.argv else 0
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

dist.init_process_group("gloo")
_group = time.time()
rank = dist.get_rank()


def say(phase, at):
    # One write a line: ranks that share an output (torchrun's) never interleave within a line.
    os.write(1, f"BENCH {attempt} {rank} {phase} {at:.6f}\n".encode())


say("main", _main)
say("imports", _imports)
say("group", _group)
torch.manual_seed(rank)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 64), torch.randn(128, 1)
for step in range(1, steps + 1):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if step == 1:
        say("step", time.time())
    if attempt == 0 and rank == 1 and step == crash_at:
        say("crash", time.time())
        os._exit(1)
dist.destroy_process_group()
