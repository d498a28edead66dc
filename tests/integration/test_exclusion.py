"""Exclusions and hot spares (docs/health.md) through the real ccrun, each agent on a host
name of its own (a UTS namespace: a node is known by its host name): a node whose workers fail
first twice in a row is excluded and a hot spare takes its place in one restart; a node that
fails its health gate is excluded while the others start without it, its cool-down doubles when
it fails again, and its agent started again skips the job until the cool-down ends."""
import json
import os
import re
import subprocess
import time

import pytest

from helpers import ccrun_cmd, free_port, read_stderr_until, run_ccrun

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a UTS namespace")


_started = []


@pytest.fixture(autouse=True)
def _kill_what_a_test_started():
    """Every agent a test started is killed with its workers when the test ends, also when it
    fails half-way."""
    yield
    while _started:
        p = _started.pop()
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()


def spawn_on(host, *args, env=None):
    """ccrun started with host name `host` (unshare -u: only the name is its own)."""
    argv = ["unshare", "-u", "sh", "-c", 'hostname "$0" && exec "$@"', host, *ccrun_cmd(*args)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env={**os.environ, **(env or {})})
    _started.append(p)
    return p


def finish(procs, timeout=60):
    results = {}
    try:
        for name, p in procs.items():
            out, err = p.communicate(timeout=timeout)
            results[name] = (p.returncode, out, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return results


def status(port, run_id):
    r = run_ccrun("status", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id, "--json")
    return json.loads(r.stdout)


def test_a_node_whose_workers_fail_first_twice_is_excluded_and_a_spare_takes_its_place(tmp_path):
    port = free_port()
    fail, done = tmp_path / "fail", tmp_path / "done"
    # nodeC's worker fails once the spare waits; the others run until the test says done.
    program = (f'if [ "$(hostname)" = nodeC ]; then while [ ! -e {fail} ]; do sleep 0.05; done; '
               f'echo bad node; exit 1; fi; while [ ! -e {done} ]; do sleep 0.05; done')
    common = ["--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "spares", "--max-restarts", "3",
              "--exclusion-cooldown", "60", "--no-python", "/bin/sh", "-c", program]
    procs = {"A": spawn_on("nodeA", "--rdzv-conf", "is_host=true", *common)}
    seen = {"A": ""}
    procs["C"] = spawn_on("nodeC", "--rdzv-conf", "is_host=false", *common)
    seen["C"] = read_stderr_until(procs["C"], "attempt 0 (round 0)", 30)
    procs["B"] = spawn_on("nodeB", "--rdzv-conf", "is_host=false", *common)
    seen["B"] = read_stderr_until(procs["B"], "waits as a hot spare", 30)
    fail.touch()
    seen["B"] += read_stderr_until(procs["B"], "attempt 0 (round 2): node 1 of 2", 30)
    st = status(port, "spares")
    assert [e["host"] for e in st["excluded"]] == ["nodeC"], st
    assert st["excluded"][0]["offences"] == 1
    assert "failed first in the last 2 attempts in a row" in st["excluded"][0]["reason"]
    done.touch()
    results = finish(procs)
    for name, (rc, out, err) in results.items():
        assert rc == 0, (name, seen[name] + err)
    c_err = seen["C"] + results["C"][2]
    assert re.search(r"node \d \(nodeC\) is excluded from the job until", c_err), c_err
    assert "the job finished while node nodeC was excluded" in c_err, c_err
    assert results["C"][1].count("bad node") == 2, results["C"][1]
    a_err = seen["A"] + results["A"][2]
    assert re.search(r"attempt 2 \(round 2\): node \d of 2", a_err), a_err  # its size kept


def test_a_node_that_fails_its_gate_is_excluded_the_others_start_and_a_restarted_agent_waits(
        tmp_path):
    port = free_port()
    done = tmp_path / "done"
    common = ["--nnodes", "3:4", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gate",
              "--exclusion-cooldown", "2",
              "--health-check", '[ "$(hostname)" != nodeD ] || { echo GPU 3 is missing; exit 1; }',
              "--no-python", "/bin/sh", "-c", f"while [ ! -e {done} ]; do sleep 0.05; done"]
    began = time.monotonic()
    # nodeA hosts the job's store: nodeD's agent is stopped below.
    procs = {h: spawn_on(f"node{h}", "--rdzv-conf",
                         f"last_call_timeout=1,is_host={'true' if h == 'A' else 'false'}", *common)
             for h in "ABCD"}
    seen = {"A": read_stderr_until(procs["A"], "attempt 0 (round 0): node", 30)}
    # The gate's time (one failed check) plus the last call: the three start without nodeD.
    assert time.monotonic() - began < 10, seen["A"]
    assert "of 3, ranks" in seen["A"].splitlines()[-1], seen["A"]
    # Its cool-down ends, it fails again: the second offence doubles it.
    seen["D"] = read_stderr_until(procs["D"], "offence 2", 30)
    # Named by its host: a dynamic round gives node ranks only to the nodes that join it.
    assert "ccrun: node nodeD failed its health gate: user: exit 1: GPU 3 is missing" in seen["D"], \
        seen["D"]
    st = status(port, "gate")
    [ex] = st["excluded"]
    assert ex["host"] == "nodeD" and ex["offences"] == 2
    assert ex["until_ms"] - ex["since_ms"] == 4000
    assert "health gate failed: user: exit 1: GPU 3 is missing" in ex["reason"]
    # Its agent stopped and started again reads the exclusion from the job's store and waits,
    # without joining, until the cool-down ends (then its gate keeps it out again).
    os.killpg(procs["D"].pid, 9)
    procs["D"].wait()
    procs["D"] = spawn_on("nodeD", "--rdzv-conf", "last_call_timeout=1,is_host=false", *common)
    seen["D"] = read_stderr_until(procs["D"], "sits out its exclusion until", 30)
    assert "health gate" not in seen["D"].split("sits out")[0], seen["D"]
    done.touch()
    results = finish(procs)
    for name, (rc, out, err) in results.items():
        assert rc == 0, (name, seen.get(name, "") + err)
    assert "the job finished while node nodeD was excluded" in results["D"][2], results["D"][2]


def test_an_elastic_job_goes_on_while_the_node_that_hosts_its_store_sits_out():
    port = free_port()
    common = ["--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gate"]
    # The excluded node keeps serving the job's store while it sits out.
    sick = spawn_on("nodeS", *common, "--rdzv-conf", "last_call_timeout=1,is_host=true",
                    "--health-check", "exit 3", "--no-python", "/bin/true")
    healthy = spawn_on("nodeH", *common, "--rdzv-conf", "last_call_timeout=1,is_host=false",
                       "--no-python", "/bin/sh", "-c", "echo TRAINED $WORLD_SIZE")
    results = finish({"sick": sick, "healthy": healthy}, timeout=90)
    assert results["healthy"][0] == 0, results["healthy"][2]
    assert "TRAINED 1" in results["healthy"][1]
    rc, _, err = results["sick"]
    assert rc == 0, err
    assert "failed its health gate: user: exit 3" in err
    assert "the job finished while node nodeS was excluded" in err, err


def test_a_node_whose_gpu_has_pages_pending_retirement_is_excluded(tmp_path):
    from helpers import binary
    port = free_port()
    common = ["--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gpus",
              "--no-python", "/bin/sh", "-c", "echo TRAINED $WORLD_SIZE"]
    procs = {}
    for host, pending, host_flag in (("nodeG", True, "true"), ("nodeH", False, "false")):
        state = tmp_path / f"{host}.json"
        state.write_text(json.dumps({"gpus": [{"pages_pending": pending, "ecc": 0}]}))
        env = {"CCRUN_NVML_LIBRARY": binary("tests", "libfake_nvml.so"),
               "FAKE_NVML_STATE": str(state)}
        procs[host] = spawn_on(host, "--rdzv-conf", f"last_call_timeout=1,is_host={host_flag}",
                               *common, env=env)
    results = finish(procs, timeout=90)
    assert results["nodeH"][0] == 0 and "TRAINED 1" in results["nodeH"][1], results["nodeH"][2]
    rc, _, err = results["nodeG"]
    assert rc == 0, err
    assert "failed its health gate: gpu_pages: GPU 0: page retirement pending" in err, err
    assert "is excluded from the job until" in err and "the job finished while node nodeG" in err


def slurm_task(state_dir, job_id, nodes=1, node_id=0):
    """What srun sets for one task per node, and the shared state folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_"))}
    env.update({"SLURM_JOB_ID": job_id, "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": str(nodes),
                "SLURM_NNODES": str(nodes), "SLURM_NODEID": str(node_id), "SLURM_LOCALID": "0",
                "SLURM_PROCID": str(node_id), "SLURM_JOB_NODELIST": "127.0.0.1",
                "CCRUN_STATE_DIR": str(state_dir)})
    return env


def test_a_slurm_job_run_again_keeps_its_excluded_node_out(tmp_path):
    """Under Slurm no launching ccrun keeps the exclusions: the node's agent writes its own
    to the job's file in the state folder, and the job's next run (a requeue, the same id)
    finds it there though its store is new, and stops at once saying how to run elsewhere."""
    job = f"slurm-{os.getpid()}"
    env = slurm_task(tmp_path, job)
    port = str(free_port())
    r = subprocess.run(ccrun_cmd("--master-port", port, "--health-check",
                                 "echo NIC eth1 is down; exit 1", "--no-python", "/bin/sh",
                                 "-c", "echo RAN"),
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "RAN" not in r.stdout, r.stderr
    record = json.loads((tmp_path / "exclusions" / f"{job}.json").read_text())
    [(host, e)] = record["hosts"].items()
    assert host == os.uname().nodename and "NIC eth1 is down" in e["reason"], record

    began = time.monotonic()
    r = subprocess.run(ccrun_cmd("--master-port", str(free_port()), "--no-python", "/bin/sh",
                                 "-c", "echo RAN"),
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "RAN" not in r.stdout, r.stderr
    assert re.search(rf"node 0 \({re.escape(host)}\) is excluded until .*NIC eth1 is down; this "
                     rf"job cannot run without it: .*sbatch --exclude={re.escape(host)}", r.stderr), \
        r.stderr
    assert "health gate" not in r.stderr.split("is excluded until")[0]  # not run again
    assert time.monotonic() - began < 10
