# ctest: LABELS torch
"""--rdzv-backend etcd through the real binaries and a real etcd (Debian's
etcd-server, members on loopback with ports of their own): a torch DDP job
of two agents with a restart, signals while forming, and a 3-member etcd
whose leader is killed while the job forms and while it runs."""
import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from helpers import ccrun_cmd, free_port, read_stderr_until, spawn_ccrun

HERE = os.path.dirname(os.path.abspath(__file__))
DDP = os.path.join(HERE, "..", "..", "examples", "ddp_logreg.py")
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
FAST = "keep_alive_interval=0.5,keep_alive_max_attempt=4,last_call_timeout=1,join_timeout=60"

pytestmark = pytest.mark.skipif(not os.access(ETCD, os.X_OK),
                                reason="skipped: etcd is not installed (Debian's etcd-server)")


class Etcd:
    """Members on 127.0.0.1, each with a client and a peer port."""

    def __init__(self, tmp_path, n):
        self.members = [{"name": f"m{i}", "client": free_port(), "peer": free_port()}
                        for i in range(n)]
        cluster = ",".join(f"{m['name']}=http://127.0.0.1:{m['peer']}" for m in self.members)
        for m in self.members:
            d = tmp_path / m["name"]
            m["log"] = open(tmp_path / f"{m['name']}.log", "w")
            m["proc"] = subprocess.Popen(
                [ETCD, "--name", m["name"], "--data-dir", str(d),
                 "--listen-client-urls", f"http://127.0.0.1:{m['client']}",
                 "--advertise-client-urls", f"http://127.0.0.1:{m['client']}",
                 "--listen-peer-urls", f"http://127.0.0.1:{m['peer']}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{m['peer']}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500"],
                stdout=m["log"], stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not all(self.healthy(m) for m in self.members):
            assert time.time() < deadline, "etcd did not become healthy"
            time.sleep(0.1)

    def restart(self, m):
        m["proc"] = subprocess.Popen(m["proc"].args, stdout=m["log"], stderr=subprocess.STDOUT)

    @property
    def endpoint(self):
        return ",".join(f"127.0.0.1:{m['client']}" for m in self.members)

    def post(self, m, path, body=None):
        req = urllib.request.Request(f"http://127.0.0.1:{m['client']}{path}",
                                     data=json.dumps(body or {}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=2) as r:
            return json.loads(r.read())

    def healthy(self, m):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{m['client']}/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except OSError:
            return False

    def leader(self):
        for m in self.members:
            if m["proc"].poll() is not None:
                continue
            try:
                st = self.post(m, "/v3/maintenance/status")
            except OSError:
                continue
            if st.get("leader") and st["leader"] == st["header"]["member_id"]:
                return m
        return None

    def stop(self):
        for m in self.members:
            if m["proc"].poll() is None:
                m["proc"].kill()
                m["proc"].wait()
            m["log"].close()


@pytest.fixture
def etcd1(tmp_path):
    e = Etcd(tmp_path, 1)
    yield e
    e.stop()


def agents(endpoint, run_id, program, n=2, nproc=2, extra=()):
    return [spawn_ccrun("--nnodes", str(n), "--nproc-per-node", str(nproc), "--rdzv-backend",
                        "etcd", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, "--rdzv-conf",
                        FAST, *extra, *program, env={"PYTHON_EXEC": "/usr/bin/python3"})
            for _ in range(n)]


def finish_all(procs, timeout=240):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            raise
        outs.append((p.returncode, out, err))
    return outs


def test_torch_ddp_job_through_etcd_with_a_restart(etcd1):
    # Rank 3 fails in the first attempt; the job restarts through etcd.
    crash = ['--max-restarts', '1', '--no-python', '/bin/sh', '-c',
             'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 3 ]; then exit 7; fi; '
             f'exec /usr/bin/python3 {DDP}']
    outs = finish_all(agents(etcd1.endpoint, "ddp", crash))
    for rc, out, err in outs:
        assert rc == 0, err
        assert "restarting the workers" in err
    text = "".join(out for _, out, _ in outs)
    assert "trained on 4 workers on cpu (restart count 1)" in text, text


def test_status_of_a_job_on_etcd(etcd1):
    def status(run_id):
        r = subprocess.run(ccrun_cmd("status", "--rdzv-backend", "etcd", "--rdzv-endpoint",
                                     etcd1.endpoint, "--rdzv-id", run_id, "--json"),
                           capture_output=True, text=True, timeout=30)
        return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}

    procs = agents(etcd1.endpoint, "watched", ["--no-python", "/bin/sh", "-c", "sleep 3"],
                   nproc=1)
    try:
        deadline = time.time() + 30
        st = {}
        while time.time() < deadline and st.get("state") != "running":
            rc, st = status("watched")
            time.sleep(0.1)
        assert st.get("state") == "running", st
        assert rc == 0
        assert len(st["nodes"]) == 2
    finally:
        outs = finish_all(procs)
    assert all(rc == 0 for rc, _, _ in outs), outs
    rc, st = status("watched")
    assert (rc, st["state"]) == (0, "finished"), st
    assert status("never-ran")[0] == 3


def test_signal_while_forming_on_etcd(etcd1):
    p = spawn_ccrun("--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd1.endpoint,
                    "--rdzv-id", "forming", "--no-python", "true")
    seen = read_stderr_until(p, "nodes joined round")  # it is forming
    start = time.time()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    err = seen + err
    assert p.returncode == 143, err
    assert time.time() - start < 5


def test_unknown_etcd_option_is_named():
    # A key nobody knows is a warning that names the likely one, never a
    # refusal (torchrun ignores it); nothing listens there, so the join fails.
    r = subprocess.run(ccrun_cmd("--nnodes", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint",
                                 f"127.0.0.1:{free_port()}", "--rdzv-id", "x", "--rdzv-conf",
                                 "etcd_pasword=x,join_timeout=2", "--no-python", "true"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert 'unknown rendezvous setting "etcd_pasword"; did you mean "etcd_password"' in r.stderr


def test_leader_killed_while_forming_and_while_running(tmp_path):
    e = Etcd(tmp_path, 3)
    try:
        first = agents(e.endpoint, "ha", ["--no-python", "/bin/sh", "-c", "echo up; sleep 6"],
                       n=1)
        read_stderr_until(first[0], "attempt 0 (round")  # it has joined through etcd
        leader = e.leader()
        assert leader is not None
        leader["proc"].kill()
        leader["proc"].wait()
        # A second job forms while the cluster elects a new leader (its own id: a second
        # agent of a full one-node job would wait as its hot spare).
        second = agents(e.endpoint, "ha-second",
                        ["--no-python", "/bin/sh", "-c", "echo up; sleep 6"], n=1)
        procs = first + second
        seen = ""
        deadline = time.time() + 60
        while seen.count("up") < 4 and time.time() < deadline:
            for p in procs:
                seen += p.stdout.readline()
        assert seen.count("up") == 4, seen
        # Mid-job: the killed member comes back (its data dir kept), then
        # the new leader is killed; two of three members keep the quorum.
        e.restart(leader)
        deadline = time.time() + 30
        while not e.healthy(leader):
            assert time.time() < deadline, "the restarted member did not rejoin"
            time.sleep(0.1)
        second_leader = e.leader()
        assert second_leader is not None
        second_leader["proc"].kill()
        second_leader["proc"].wait()
        for rc, out, err in finish_all(procs, timeout=120):
            assert rc == 0, err
            assert "succeeded (exit 0)" in err
    finally:
        e.stop()


def test_an_id_run_again_after_its_run_is_refused_until_its_keys_are_deleted(tmp_path):
    # etcd keeps a finished job's keys: the same command run again starts nothing, exits 5
    # (docs/store.md, "Running a job id again") and names the etcdctl command that deletes
    # them; once deleted (here through etcd's JSON gateway, as etcdctl would), the id runs.
    e = Etcd(tmp_path, 1)
    try:
        cmd = ccrun_cmd("--nnodes", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint", e.endpoint,
                        "--rdzv-id", "again", "--rdzv-conf", FAST, "--no-python", "sh", "-c",
                        "echo the program ran")
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert again.returncode == 5, again.stderr
        assert "the program ran" not in again.stdout
        assert " and succeeded; nothing was started here" in again.stderr
        assert "etcdctl del --prefix 'ccrun/ccrun/again/'" in again.stderr
        key = b"ccrun/ccrun/again/"
        end = key[:-1] + bytes([key[-1] + 1])
        e.post(e.members[0], "/v3/kv/deleterange",
               {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()})
        third = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert third.returncode == 0, third.stderr
        assert "the program ran" in third.stdout
    finally:
        e.stop()
