"""Stands in for torch's NCCL flight recorder (ProcessGroupNCCL's DumpPipe),
which only runs on a GPU: makes the FIFO <TORCH_NCCL_DEBUG_INFO_PIPE_FILE>
<rank>.pipe and, when something is written to it, writes its "trace" to
<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>, as torch does. Run with -I so that
ccrun's start-up hook leaves it alone."""
import os

rank = os.environ["RANK"]
pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + rank + ".pipe"
assert int(os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
os.mkfifo(pipe)
with open(pipe) as f:
    f.read(1)
with open(os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + rank, "w") as f:
    f.write(f"flight recorder of rank {rank}: all_reduce #20 scheduled\n")
os.unlink(pipe)
