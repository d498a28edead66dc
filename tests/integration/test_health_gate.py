"""The health gate before each round (docs/health.md), through the real ccrun: a failing
--health-check keeps the node out with its output as the reason, a hanging one is killed at
--health-timeout, a missing command does not count, a static job closes at once when one node
fails its gate (an elastic job going on without it: tests/integration/test_exclusion.py)."""
import json
import os
import re
import shutil
import signal
import subprocess
import time

from helpers import communicate_all, free_port, run_ccrun, spawn_ccrun, start_daemon


def test_a_failing_check_keeps_the_node_out_with_its_output_as_the_reason(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--log-dir", str(tmp_path),
                  "--health-check", "echo checking; echo GPU 3 is missing >&2; exit 1",
                  "--no-python", "/bin/sh", "-c", "echo RAN")
    assert r.returncode == 1, r.stderr
    assert "RAN" not in r.stdout
    assert "failed its health gate: user: exit 1: checking GPU 3 is missing" in r.stderr, r.stderr
    [events] = tmp_path.glob("*/events.jsonl")
    health = [json.loads(l) for l in events.read_text().splitlines()
              if json.loads(l)["event"] == "health"]
    assert health and health[0]["healthy"] is False
    assert {c["name"] for c in health[0]["checks"]} >= {"disk", "memory", "store", "user"}


def test_a_check_that_hangs_is_killed_at_the_bound():
    began = time.monotonic()
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--health-check", "sleep 60",
                  "--health-timeout", "1", "--no-python", "/bin/true", timeout=60)
    took = time.monotonic() - began
    assert r.returncode == 1
    assert "user: still running after 1s (--health-timeout); killed" in r.stderr, r.stderr
    assert took < 10, took


def test_a_check_that_cannot_run_says_so_and_does_not_count():
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--health-check",
                  "no_such_health_tool --gpus", "--no-python", "/bin/sh", "-c", "echo RAN")
    assert r.returncode == 0, r.stderr
    assert "RAN" in r.stdout
    assert re.search(r"health gate passed: .*user cannot run \(exit 127: .*not found\)", r.stderr)


def test_a_passing_check_runs_before_every_round(tmp_path):
    marker = tmp_path / "checked"
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--max-restarts", "2",
                  "--health-check", f"echo x >> {marker}", "--no-python", "/bin/sh", "-c",
                  '[ "$TORCHELASTIC_RESTART_COUNT" = 2 ] || exit 1')
    assert r.returncode == 0, r.stderr
    assert marker.read_text().count("x") == 3  # the first round and both restarts


def test_a_static_job_closes_at_once_when_one_node_fails_its_gate():
    port = str(free_port())
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-port", port,
              "--no-python", "/bin/sleep", "30"]
    began = time.monotonic()
    node0 = spawn_ccrun("--node-rank", "0", *common)
    node1 = spawn_ccrun("--node-rank", "1", "--health-check", "echo disk is bad; exit 1", *common)
    outs = communicate_all([node0, node1], 60, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))
    assert outs[1][0] == 1 and "node 1" in outs[1][2] and "disk is bad" in outs[1][2]
    assert outs[0][0] != 0, outs[0][2]
    assert "failed its health gate: user: exit 1: disk is bad" in outs[0][2], outs[0][2]
    assert time.monotonic() - began < 20  # not join_timeout's 600 s


def fake_nvml(tmp_path, gpus):
    """The environment that points the gate at tests' stand-in NVML with these GPUs."""
    state = tmp_path / "nvml.json"
    state.write_text(json.dumps({"gpus": gpus}))
    from helpers import binary
    return {"CCRUN_NVML_LIBRARY": binary("tests", "libfake_nvml.so"), "FAKE_NVML_STATE": str(state)}


def healthy_gpu(**fields):
    gpu = {"pages_pending": False, "rows_pending": False, "ecc": 0, "processes": []}
    gpu.update(fields)
    return gpu


def test_a_gpu_with_pages_pending_retirement_fails_the_gate(tmp_path):
    env = fake_nvml(tmp_path, [healthy_gpu(), healthy_gpu(pages_pending=True)])
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c",
                  "echo RAN", env=env)
    assert r.returncode == 1, r.stderr
    assert "RAN" not in r.stdout
    assert ("failed its health gate: gpu_pages: GPU 1: page retirement pending (a GPU reset or "
            "reboot clears it)") in r.stderr, r.stderr


def test_leftover_gpu_memory_is_waited_for_then_fails_at_the_bound(tmp_path):
    # Freed 2.5 s from now: the gate waits at least 1 s of that even when ccrun takes a while to
    # reach its GPU check on a loaded machine, and well within the 5 s default bound.
    gone_in = int(time.time() * 1000) + 2500
    env = fake_nvml(tmp_path, [healthy_gpu(processes=[{"pid": 4242, "used_mib": 1024,
                                                       "until_ms": gone_in}])])
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--log-dir", str(tmp_path / "logs"),
                  "--no-python", "/bin/sh", "-c", "echo RAN", env=env)
    assert r.returncode == 0, r.stderr
    assert "RAN" in r.stdout
    [events] = (tmp_path / "logs").glob("*/events.jsonl")
    [health] = [json.loads(l) for l in events.read_text().splitlines()
                if json.loads(l)["event"] == "health"]
    memory = [c for c in health["checks"] if c["name"] == "gpu_memory"][0]
    assert memory["verdict"] == "ok" and memory["detail"].startswith("freed after"), memory
    assert memory["ms"] >= 1000
    # Held for good: the bound passes, and the gate fails naming the process.
    env = fake_nvml(tmp_path, [healthy_gpu(processes=[{"pid": 4242, "used_mib": 1024}])])
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--health-timeout", "1",
                  "--no-python", "/bin/sh", "-c", "echo RAN", env=env)
    assert r.returncode == 1, r.stderr
    assert re.search(r"gpu_memory: GPU 0: pid 4242 holds 1024 MiB, still after 1(\.\d)?s", r.stderr), \
        r.stderr


def test_a_clock_far_from_the_store_hosts_fails_the_gate(tmp_path):
    """The store's host (a ccrun-rendezvous under faketime) runs 10 s ahead: the node's
    gate measures it over one TIME round trip and keeps the node out, naming the skew."""
    faketime = shutil.which("faketime")
    assert faketime, "faketime is missing: scripts/setup.sh installs it"
    daemon = start_daemon(prefix=["env", "FAKETIME_DONT_FAKE_MONOTONIC=1", faketime, "-f", "+10s"])
    with daemon:
        r = run_ccrun("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{daemon.port}",
                      "--nnodes", "1", "--nproc-per-node", "1", "--log-dir", str(tmp_path),
                      "--no-python", "/bin/sh", "-c", "echo RAN")
    assert r.returncode == 1, r.stderr
    assert "RAN" not in r.stdout
    assert re.search(r"failed its health gate: clock: this host's clock is (9\d{3}|1\d{4}) ms behind "
                     r"the store host's \(to within [\d.]+ ms\), over 1s: sync the clocks",
                     r.stderr), r.stderr


def test_a_clock_in_step_passes_and_says_its_skew(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "1", "--log-dir", str(tmp_path),
                  "--no-python", "/bin/true")
    assert r.returncode == 0, r.stderr
    [events] = tmp_path.glob("*/events.jsonl")
    [health] = [json.loads(l) for l in events.read_text().splitlines()
                if json.loads(l)["event"] == "health"]
    [clock] = [c for c in health["checks"] if c["name"] == "clock"]
    assert clock["verdict"] == "ok", clock
    assert re.match(r"this host's clock is [\d.]+ ms (behind|ahead of) the store host's", clock["detail"])


def test_the_loopback_all_reduce_runs_among_the_nodes_ranks(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "3", "--health-allreduce",
                  "--log-dir", str(tmp_path), "--no-python", "/bin/true")
    assert r.returncode == 0, r.stderr
    [events] = tmp_path.glob("*/events.jsonl")
    [health] = [json.loads(l) for l in events.read_text().splitlines()
                if json.loads(l)["event"] == "health"]
    [check] = [c for c in health["checks"] if c["name"] == "allreduce"]
    assert check["verdict"] == "ok", check
    assert re.match(r"all_reduce of 65536 float32 over 3 local ranks \(gloo, loopback\): "
                    r"correct in [\d.]+ ms", check["detail"]), check


def test_a_loopback_all_reduce_past_the_bound_is_killed_with_its_ranks(tmp_path):
    r = run_ccrun("--standalone", "--nproc-per-node", "2", "--health-allreduce",
                  "--health-timeout", "0.001", "--no-python", "/bin/sh", "-c", "echo RAN")
    assert r.returncode == 1, r.stderr
    assert "RAN" not in r.stdout
    assert "failed its health gate: allreduce: still running after 1ms (--health-timeout); killed" \
        in r.stderr, r.stderr
    # This check's processes (its ranks are forks: the same command line), none left.
    left = subprocess.run(["pgrep", "-f", "ccrun-allreduce-check --ranks 2 --timeout 0.001"],
                          capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_the_all_reduce_check_by_hand():
    from helpers import binary
    check = binary("collectives", "ccrun-allreduce-check")
    r = subprocess.run([check, "--ranks", "4", "--elements", "1000"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "all_reduce of 1000 float32 over 4 local ranks (gloo, loopback): correct in" in r.stdout
    bad = subprocess.run([check, "--ranks", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "--ranks" in bad.stderr and "see ccrun-allreduce-check --help" in bad.stderr
