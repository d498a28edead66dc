"""Starts torch's own TCPStore server (Debian's python3-torch) for
scripts/bench-store.sh: prints 'port N', then serves until killed."""
import datetime
import resource
import signal
import sys

import torch.distributed as dist

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=600))
print(f"port {store.port}", flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
sys.exit(0)
