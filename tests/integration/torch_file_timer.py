"""torch's FileTimerClient, as a torch watchdog user writes it: a released
scope on every rank, then rank 1 overruns its 1 s "data_loading" deadline."""
import os
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
with expires(after=0.5, scope="warmup"):
    pass  # released in time: never fires
if os.environ["RANK"] == "1":
    with expires(after=1, scope="data_loading"):
        time.sleep(120)
time.sleep(8)  # rank 0 outlives the warmup deadline: proof it was released
print(f"rank {os.environ['RANK']} done", flush=True)
