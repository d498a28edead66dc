# ctest: LABELS torch
"""ccrun-rendezvous as the c10d store of torchrun's own agents:
two torchrun agents (Debian's torch 1.13, through scripts/torchrun_patched.py)
rendezvous through the daemon with `--rdzv-backend c10d --rdzv-conf
is_host=false`, and their workers run a gloo all_reduce. The same command
works with torchrun 2.x (docs/store.md, "torchrun")."""
import datetime
import os
import subprocess
import sys

import pytest

from helpers import free_port, start_daemon

torch = pytest.importorskip("torch", reason="skipped: python3-torch is not installed")
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "scripts", "torchrun_patched.py")
WORKER = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {int(t.item())}", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_agents_rendezvous_through_ccrun_rendezvous(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    with start_daemon() as d:
        # TMPDIR: torchrun's agents leave their torchelastic_* log folders behind.
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
                   TMPDIR=str(tmp_path))
        agents = [subprocess.Popen(
            [sys.executable, TORCHRUN, "--nnodes", "2", "--nproc_per_node", "1",
             "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{d.port}",
             "--rdzv_id", "torchrun-job", "--rdzv_conf", "is_host=false",
             "--master_port", str(free_port()), "--monitor_interval", "0.1", str(worker)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True) for _ in range(2)]
        outs = []
        try:
            for a in agents:
                outs.append(a.communicate(timeout=240))
        finally:
            for a in agents:
                if a.poll() is None:
                    os.killpg(a.pid, 9)
                    a.wait()
        for a, (out, err) in zip(agents, outs):
            assert a.returncode == 0, err[-3000:]
        text = "".join(out for out, _ in outs)
        assert "rank 0 of 2: sum 3" in text and "rank 1 of 2: sum 3" in text, text
        # The rendezvous state is in the daemon, under torchrun's own keys.
        client = dist.TCPStore("127.0.0.1", d.port, is_master=False,
                               timeout=datetime.timedelta(seconds=5))
        assert client.num_keys() > 0
        assert d.proc.poll() is None
