"""What a worker can observe of its own process, recorded as JSON: the equivalence test of
test_warm_start.py runs it cold and warm and compares the records key by key. A new property is
one line in `observe()`.

    python3 worker_probe.py OUT_DIR     # writes OUT_DIR/<attempt>.<rank>.json

At attempt 0, rank 1 then raises (uncaught), so the job restarts once; the tracebacks of both
starts are compared by the test. Values that are random per process are recorded as they are and
compared for being distinct across processes, not equal (RANDOM in the test).
"""
import ctypes
import json
import os
import random
import signal
import sys

import numpy
import torch

import rankpkg  # a package that reads RANK at import, as Lightning's rank_zero_only does


def descriptors():
    """{fd: what it is}, pipes and sockets by kind (their inode numbers are per process)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue  # the listing's own descriptor, closed already
        kind = target.split(":")[0] if target.startswith(("pipe:", "socket:", "anon_inode:")) \
            else target
        out[name] = kind
    return out


def status_fields(*names):
    with open("/proc/self/status") as f:
        lines = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return {n: lines.get(n, "").strip() for n in names}


def death_signal():
    sig = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
    return sig.value


def c_getenv(name):
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    value = libc.getenv(name.encode())
    return value.decode() if value is not None else None


def stream(s):
    return {"name": getattr(s, "name", None), "encoding": s.encoding, "errors": s.errors,
            "line_buffering": s.line_buffering, "write_through": s.write_through,
            "isatty": s.isatty(), "fileno": s.fileno()}


def observe(main):
    p = {}
    p["argv"] = sys.argv
    p["orig_argv"] = sys.orig_argv
    p["file"] = main["__file__"]
    p["main_names"] = sorted(k for k in main if k.startswith("__"))
    p["main_loader"] = type(main["__loader__"]).__name__
    p["main_spec"] = repr(main["__spec__"])
    p["main_package"] = repr(main["__package__"])
    p["main_cached"] = repr(main["__cached__"])
    p["sys_path"] = sys.path
    p["executable"] = sys.executable
    p["cwd"] = os.getcwd()
    p["environ"] = dict(os.environ)
    p["c_environ_matches"] = all(c_getenv(k) == v for k, v in os.environ.items())
    p["rank_at_import"] = rankpkg.RANK_AT_IMPORT
    p["from_sitecustomize"] = os.environ.get("FROM_SITECUSTOMIZE")
    p["from_usercustomize"] = os.environ.get("FROM_USERCUSTOMIZE")
    p["from_pth"] = os.environ.get("FROM_PTH")
    p["descriptors"] = descriptors()
    p["signals"] = status_fields("SigBlk", "SigIgn", "SigCgt")
    p["python_handlers"] = {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                            if isinstance(s, signal.Signals)}
    p["death_signal"] = death_signal()
    p["own_process_group"] = os.getpgrp() == os.getpid()
    p["umask"] = os.umask(0o22)
    os.umask(p["umask"])
    p["affinity"] = sorted(os.sched_getaffinity(0))
    p["stdin"] = stream(sys.stdin)
    p["stdout"] = stream(sys.stdout)
    p["stderr"] = stream(sys.stderr)
    p["torch_threads"] = torch.get_num_threads()
    p["torch_seed"] = torch.initial_seed()
    p["torch_rand"] = torch.rand(2).tolist()
    p["numpy_rand"] = numpy.random.random()
    p["python_rand"] = random.random()
    p["name"] = main["__name__"]
    os.chdir("/")  # a script that builds paths from __file__ after a chdir
    with open(os.path.join(os.path.dirname(main["__file__"]), "data.txt")) as f:
        p["data_beside_script"] = f.read()
    return p


def main():
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    rank = os.environ["RANK"]
    out = sys.argv[1]
    record = observe(sys.modules["__main__"].__dict__)
    with open(os.path.join(out, "%s.%s.json" % (attempt, rank)), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    if attempt == "0" and rank == "1":
        raise RuntimeError("probe: the first attempt fails here")


if __name__ == "__main__":
    main()
