"""Stands in for torch's NCCL flight recorder (ProcessGroupNCCL's DumpPipe),
which only runs on a GPU: makes the FIFO <TORCH_NCCL_DEBUG_INFO_PIPE_FILE>
<rank>.pipe and, when something is written to it, writes its dump to
<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>, as torch does: a pickle (protocol 2,
as torch's pickler writes) of torch 2.5+'s layout. Rank 1 has issued one
all_reduce fewer than rank 0, whose kernel for the last one runs (timed).
Run with -I so that ccrun's start-up hook leaves it alone."""
import os
import pickle
import time

rank = int(os.environ["RANK"])
pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + str(rank) + ".pipe"
assert int(os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
os.mkfifo(pipe)
with open(pipe) as f:
    f.read(1)
last = 21 if rank == 0 else 20
entries = [{"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": "nccl:all_reduce", "time_created_ns": time.time_ns() - 3_000_000_000,
            "input_sizes": [[256]], "input_dtypes": ["Float"], "output_sizes": [[256]],
            "output_dtypes": ["Float"], "state": "started" if seq == 21 else "completed",
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "retired": False, "timeout_ms": 600000, "is_p2p": False, "frames": []}
           for seq in range(1, last + 1)]
dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                            "last_completed_collective": 20}},
        "entries": entries}
with open(os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + str(rank), "wb") as f:
    pickle.dump(dump, f, protocol=2)
os.unlink(pipe)
