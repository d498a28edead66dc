"""A worker that prints its rank environment as one JSON line."""
import json
import os

keys = ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
        "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_TIMER_FILE",
        "CCRUN_STORE_ADDR", "CCRUN_STORE_PORT", "CCRUN_ATTEMPT", "EXTRA"]
print("ENV " + json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
