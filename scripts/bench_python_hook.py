#!/usr/bin/python3
"""Per-call cost of the Python hook (agent/python) on torch.distributed's collectives and on
DistributedDataParallel's forward (one DDP step each, training mode, grad enabled).

Runs a world-size-1 gloo group in a process started with the hook and a progress record, and
times each collective through the hook's wrapper and through the original function it wraps
(`__ccrun_wrapped__`), alternating short rounds of ROUND_CALLS calls (CALLS x ROUNDS calls of
each in all), on one CPU: the best round of each, and the median difference between
neighbouring rounds; once with the hook's C wrappers (agent/python/_ccrun_hook.c,
from the build tree: $CCRUN_BUILD_DIR, or build/) built for this Python, once with its Python
ones (CCRUN_PYTHON_HOOK_C=0), once with the C ones built on the stable ABI (the module later
Pythons load, alone on the path); then the same calls in a process without the hook. The DDP
forward is a Linear(16, 16) on a 4x16 input, without backward (DDP allows that when
find_unused_parameters is off), then with it (the hook's end-of-backward callbacks included).
With --backend nccl (a machine with a GPU), the same calls on one GPU's buffers in a
world-size-1 NCCL group, timed as issued: an NCCL call returns once queued, and what the hook
adds is on the CPU; the GPU is synchronised between rounds.
Usage: /usr/bin/python3 scripts/bench_python_hook.py [CALLS] [--backend gloo|nccl]
"""
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROUNDS = 7
ROUND_CALLS = 50  # short rounds, alternating: the best of many is steadier on a busy machine


def worker(calls, init, backend):
    # One CPU for the process and gloo's threads: unpinned, a world-size-1 gloo call takes 10
    # or 35 us by chance (where its threads wake up), which hides the wrapper's cost.
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    import torch
    import torch.distributed as dist
    hooked = hasattr(dist.all_reduce, "__ccrun_wrapped__")
    # nccl: the calls on one GPU's buffers, timed as issued (an NCCL call returns once queued:
    # the hook's cost is on the CPU), the GPU synchronised after each round.
    device = "cuda" if backend == "nccl" else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method=init, rank=0, world_size=1)
    from torch.distributed import distributed_c10d as c10d
    from torch.nn.parallel import DistributedDataParallel as DDP
    ones = lambda: torch.ones(1, device=device)  # noqa: E731
    t, t_out, gathered = ones(), ones(), [ones()]
    sub = dist.new_group([0])
    ddp = DDP(torch.nn.Linear(16, 16).to(device), device_ids=[0] if device == "cuda" else None)
    x = torch.randn(4, 16, device=device)
    ddp_forward = DDP.forward
    # The wrapper alone: the hook's DDP wrapper around a forward that does nothing.
    noop_forward = None
    if hooked:
        import types
        import ccrun_progress

        class NoopDDP(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.module = torch.nn.Linear(16, 16).to(device)
                self.process_group = None
                self.require_backward_grad_sync = True

            def forward(self, x):
                return x

        ccrun_progress._patch_ddp(types.SimpleNamespace(DistributedDataParallel=NoopDDP,
                                                        torch=torch))
        noop, noop_forward = NoopDDP().to(device), NoopDDP.forward

        # The same for the collectives' wrapper: around a collective whose own work is one
        # in-place add, the wrapper's cost with the least of anything else around it.
        def small_all_reduce(tensor, op=None, group=None, async_op=False):
            return tensor.add_(0)

        noop_collective = ccrun_progress._wrap(ccrun_progress._Hook(c10d), small_all_reduce,
                                               "all_reduce", "tensor", False, False, False)
    cases = {
        "all_reduce(1 element)": (dist.all_reduce, lambda f: f(t)),
        "all_reduce(1 element, subgroup)": (dist.all_reduce, lambda f: f(t, group=sub)),
        "all_reduce(async_op=True).wait()": (dist.all_reduce,
                                             lambda f: f(t, async_op=True).wait()),
        "barrier()": (dist.barrier, lambda f: f()),
        "broadcast(1 element)": (dist.broadcast, lambda f: f(t, 0)),
        "reduce(1 element)": (dist.reduce, lambda f: f(t, 0)),
        "all_gather(1 element)": (dist.all_gather, lambda f: f(gathered, t)),
        "all_gather_into_tensor(1 element)": (getattr(dist, "all_gather_into_tensor", None),
                                              lambda f: f(t_out, t)),
        "gather(1 element)": (dist.gather, lambda f: f(t, gathered, 0)),
        "scatter(1 element)": (dist.scatter, lambda f: f(t_out, [t], 0)),
        "reduce_scatter(1 element)": (dist.reduce_scatter, lambda f: f(t_out, [t])),
        "all_to_all_single(1 element)": (dist.all_to_all_single, lambda f: f(t_out, t)),
        "DDP forward (Linear 16x16)": (ddp_forward, lambda f: f(ddp, x)),
        "DDP forward + backward": (ddp_forward, lambda f: f(ddp, x).sum().backward()),
    }
    if noop_forward is not None:
        cases["DDP wrapper, no-op forward"] = (noop_forward, lambda f: f(noop, x))
        cases["collective wrapper, add_(0) inside"] = (noop_collective, lambda f: f(t))
    out = {}
    for name, (fn, call) in cases.items():
        try:  # what this torch or gloo lacks (gloo has no reduce_scatter) is left out
            call(fn)
        except (TypeError, RuntimeError, ValueError):
            continue
        original = getattr(fn, "__ccrun_wrapped__", None)
        variants = {"hooked": fn, "original": original} if original else {"original": fn}
        rounds = {k: [] for k in variants}
        for f in variants.values():  # warm up
            for _ in range(ROUND_CALLS):
                call(f)
        for _ in range(max(1, calls * ROUNDS // ROUND_CALLS)):
            for k, f in variants.items():
                start = time.perf_counter_ns()
                for _ in range(ROUND_CALLS):
                    call(f)
                rounds[k].append((time.perf_counter_ns() - start) / ROUND_CALLS)
                sync()
        out[name] = {k: min(v) for k, v in rounds.items()}
        if original:  # the median of the differences between neighbouring rounds
            out[name]["paired"] = statistics.median(
                h - o for h, o in zip(rounds["hooked"], rounds["original"]))
    dist.destroy_process_group()
    print(json.dumps({"hooked": hooked, "kind": type(dist.all_reduce).__name__,
                      "results": out}))


def main():
    import argparse
    parser = argparse.ArgumentParser(description="The start-up hook's cost per torch call.")
    parser.add_argument("calls", type=int, nargs="?", default=10000,
                        help="calls of each case per round set (default 10000)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                        help="nccl: on one GPU's buffers, timed as issued")
    opts = parser.parse_args()
    calls, backend = opts.calls, opts.backend
    build = os.environ.get("CCRUN_BUILD_DIR") or os.path.join(REPO, "build")
    hook_dir = os.path.join(REPO, "agent", "python")
    ext_dir = os.path.join(build, "agent", "python")
    hook_path = hook_dir + ":" + ext_dir
    with tempfile.TemporaryDirectory() as tmp:
        abi3 = os.path.join(ext_dir, "_ccrun_hook.abi3.so")
        if os.path.exists(abi3):
            os.mkdir(os.path.join(tmp, "abi3"))
            os.symlink(abi3, os.path.join(tmp, "abi3", "_ccrun_hook.abi3.so"))
        runs = {}
        for label, extra in (("C", {"PYTHONPATH": hook_path}),
                             ("Python", {"PYTHONPATH": hook_path, "CCRUN_PYTHON_HOOK_C": "0"}),
                             ("C, stable ABI",
                              {"PYTHONPATH": hook_dir + ":" + os.path.join(tmp, "abi3")}),
                             ("without hook", {})):
            record = os.path.join(tmp, f"record-{len(runs)}")
            data = bytearray(4096)
            struct.pack_into("<QII", data, 0, 0x3152505255524343, 1, 4096)
            open(record, "wb").write(bytes(data))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "CCRUN_PROGRESS_FILE", "CCRUN_PYTHON_HOOK_C")}
            env.update(extra)
            if extra:
                env["CCRUN_PROGRESS_FILE"] = record
            init = f"file://{tmp}/init-{len(runs)}"
            r = subprocess.run([sys.executable, __file__, "--worker", str(calls), init, backend],
                               env=env,
                               capture_output=True, text=True, check=True)
            runs[label] = json.loads(r.stdout.strip().splitlines()[-1])
        plain = runs["without hook"]
        assert runs["Python"]["hooked"] and runs["Python"]["kind"] == "function"
        assert not plain["hooked"]
        native = runs["C"]["kind"] == "Collective"  # else the C wrappers are not built
        stable = runs["C, stable ABI"]["kind"] == "Collective"
        print(f"{calls * ROUNDS} calls in rounds of {ROUND_CALLS}, ns per call (world-size-1 "
              f"{backend}, torch {__import__('torch').__version__}"
              f"{', as issued' if backend == 'nccl' else ''}): the best round of each wrapper "
              "and of torch's own call in the same process, the difference of the best rounds, "
              "and the median difference between neighbouring rounds (the typical cost, steadier "
              "where the machine's speed drifts)")
        print(f"{'call':36} {'C wrapper':>10} {'original':>9} {'best':>6} {'median':>6} "
              f"{'Py wrapper':>10} {'original':>9} {'best':>6} {'median':>6} "
              f"{'C, abi3':>10} {'original':>9} {'best':>6} {'median':>6} "
              f"{'no-hook process':>16}")

        def cols(r):
            if r is None:
                return f"{'n/a':>10} {'':9} {'':6} {'':6}"
            return (f"{r['hooked']:10.0f} {r['original']:9.0f} "
                    f"{r['hooked'] - r['original']:6.0f} {r['paired']:6.0f}")

        for name, py in runs["Python"]["results"].items():
            c = runs["C"]["results"].get(name) if native else None
            abi3 = runs["C, stable ABI"]["results"].get(name) if stable else None
            base = plain["results"].get(name, {}).get("original", float("nan"))
            print(f"{name:36} {cols(c)} {cols(py)} {cols(abi3)} {base:16.0f}")
        if not native:
            print(f"(the C wrappers are not built in {build}: Python wrappers only)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        main()
