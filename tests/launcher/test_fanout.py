# ctest: LABELS torch
"""The ssh fan-out through the real ccrun binary, with tests/launcher/fake_ssh.sh
as the ssh command (it runs the command here in a fresh environment), so that
no sshd is needed: every host's agent runs on this machine, on loopback
addresses 127.0.0.1-3. The namespace cluster test with a real sshd is separate."""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import ccrun_cmd, free_port, worker_pythonpath

FAKE_SSH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_ssh.sh")


def hostfile(tmp_path, text):
    path = tmp_path / "hostfile"
    path.write_text(text)
    return str(path)


def launch(tmp_path, hosts, *args, env=None, **kw):
    """Starts ccrun on a host list; the ssh command is the fake one unless args give one."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "SLURM_", "CCRUN_SSH"))}
    full_env.update(env or {})
    ssh = [] if "--ssh-command" in args else ["--ssh-command", FAKE_SSH]
    cmd = ccrun_cmd("--hostfile", hostfile(tmp_path, hosts), "--master-port", str(free_port()),
                    *ssh, *args)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, cwd=str(tmp_path), start_new_session=True, **kw)


def finish(proc, timeout=60):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out, err


def wait_gone(pids, timeout):
    """Waits (on pidfds, no polling) until every pid has exited; returns those left."""
    fds = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(fds.values()), [], [], left)
            for pid, fd in list(fds.items()):
                if fd in ready:
                    os.close(fd)
                    del fds[pid]
        return sorted(fds)
    finally:
        for fd in fds.values():
            os.close(fd)


def test_three_hosts_run_with_forwarded_env_and_prefixed_lines(tmp_path):
    p = launch(tmp_path, "127.0.0.1 slots=2\n127.0.0.2  # nproc_per_node\n127.0.0.3 slots=1\n",
               "--export", "MYVAR", "--no-python", "sh", "-c",
               "echo rank=$RANK/$WORLD_SIZE host=$FAKE_SSH_HOST pp=$PYTHONPATH nccl=$NCCL_DEBUG "
               "my=$MYVAR unset=$NOT_FORWARDED pwd=$(pwd)",
               env={"PYTHONPATH": "/x/y", "NCCL_DEBUG": "INFO", "MYVAR": "it's", "NOT_FORWARDED": "1"})
    rc, out, err = finish(p)
    assert rc == 0, err
    lines = sorted(out.splitlines())
    want = [("127.0.0.1", 0), ("127.0.0.1", 1), ("127.0.0.2", 2), ("127.0.0.3", 3)]
    assert len(lines) == 4, out
    for (host, rank), line in zip(want, lines):
        # PYTHONPATH forwarded, behind ccrun's start-up hook (docs/hangs.md)
        assert line == (f"{host}: [{rank}]:rank={rank}/4 host={host} pp={worker_pythonpath('/x/y')} "
                        "nccl=INFO my=it's "
                        f"unset= pwd={tmp_path}")
    assert "starting 3 node(s)" in err


def test_collapse_output_prints_a_line_of_every_nodes_ranks_once(tmp_path):
    """Identical lines of ranks on three hosts meet on this console: printed once with every
    rank; a line of one rank keeps its own; a traceback stays whole; the order of each rank's
    lines is kept; the failure report comes after the workers' last lines."""
    # Every rank prints once all have started (the collapse's window is 0.5 s; five Pythons
    # starting on a loaded machine may be further apart), and rank 1 fails once all printed.
    script = ("import os, sys, time, traceback\n"
              "rank = int(os.environ['RANK'])\n"
              "def barrier(name):\n"
              f"    open(os.path.join({str(tmp_path)!r}, f'{{name}}.{{rank}}'), 'w').close()\n"
              f"    while len([f for f in os.listdir({str(tmp_path)!r}) if f.startswith(name)]) < 5:\n"
              "        time.sleep(0.01)\n"
              "barrier('started')\n"
              "print('UserWarning: the same on every node', flush=True)\n"
              "print('odd one' if rank == 3 else 'same again', flush=True)\n"
              "try:\n    raise ValueError('broken \\\\ with a backslash')\n"
              "except ValueError:\n    traceback.print_exc()\n"
              "for i in range(50):\n    print(f'line {i} of {rank}')\n"
              "sys.stdout.flush()\n"
              "barrier('printed')\n"
              "sys.exit(1 if rank == 1 else 0)\n")
    p = launch(tmp_path, "127.0.0.1 slots=2\n127.0.0.2 slots=2\n127.0.0.3 slots=1\n",
               "--collapse-output", "--no-python", sys.executable, "-c", script)
    rc, out, err = finish(p)
    assert rc == 1, err
    assert "ccrun-line|" not in out + err
    lines = out.splitlines()
    assert lines[0] == "[0-4]:UserWarning: the same on every node", out
    assert lines.count("[0-2,4]:same again") == 1 and lines.count("[3]:odd one") == 1, out
    for i in range(50):
        assert f"[0-4]:line {i} of" not in out  # different text per rank: each its own
    for rank in range(5):
        mine = [l for l in lines if l.startswith(f"[{rank}]:line ")]
        assert mine == [f"[{rank}]:line {i} of {rank}" for i in range(50)], out
    tb = [l for l in err.splitlines() if l.startswith("[0-4]:")]
    assert tb[0] == "[0-4]:Traceback (most recent call last):", err
    assert tb[-1] == "[0-4]:ValueError: broken \\ with a backslash", err
    assert err.count("Root cause (first failure):") == 1, err
    assert err.index("ValueError: broken") < err.index("Root cause (first failure):")


def test_ssh_is_called_like_ssh(tmp_path):
    log = tmp_path / "ssh.log"
    p = launch(tmp_path, "127.0.0.1\n", "--no-python", "true",
               env={"FAKE_SSH_LOG": str(log)})
    assert finish(p)[0] == 0
    args = log.read_text().split("\n--\n")[0].split("\n")
    assert args[0] == "127.0.0.1"  # the host, then one command line
    assert len(args) == 2 and args[1].startswith(f"cd '{tmp_path}' && exec env ")
    # CCRUN_SSH with options: options, host, command.
    env = {"FAKE_SSH_LOG": str(log), "CCRUN_SSH": f"{FAKE_SSH} -o 'BatchMode=yes' -p 22"}
    log.unlink()
    cmd = ccrun_cmd("--hostfile", hostfile(tmp_path, "127.0.0.1\n"), "--master-port", str(free_port()),
                    "--no-python", "true")
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert r.returncode == 0, r.stderr
    args = log.read_text().split("\n--\n")[0].split("\n")
    assert args[:5] == ["-o", "BatchMode=yes", "-p", "22", "127.0.0.1"]


def test_a_failing_node_gives_the_job_its_status(tmp_path):
    p = launch(tmp_path, "127.0.0.1\n127.0.0.2\n", "--no-python", "sh", "-c",
               'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30')
    start = time.monotonic()
    rc, out, err = finish(p)
    assert rc == 1, err
    assert "ccrun: host 127.0.0.2 (node 1) exited with status 1" in err
    # Every node prints the same report; the launcher shows one of them.
    assert err.count("Root cause (first failure):") == 1, err
    assert "ccrun-report|" not in err
    assert "rank      : 1 (local_rank 0)" in err
    assert time.monotonic() - start < 20


def test_unreachable_host_fails_the_job_at_once(tmp_path):
    p = launch(tmp_path, "127.0.0.1\nunreachable-node\n", "--no-python", "sleep", "30")
    start = time.monotonic()
    rc, out, err = finish(p)
    assert rc == 255, err
    assert ("ccrun: host unreachable-node (node 1): ssh failed (exit 255): ssh: connect to host "
            "unreachable-node port 22: Connection refused") in err
    assert "stopping the other 1 node(s)" in err
    assert time.monotonic() - start < 15


def started_pids(tmp_path, proc, n):
    """Reads stdout until n workers said `pid=...`; returns their pids."""
    pids = []
    while len(pids) < n:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        if "pid=" in line:
            pids.append(int(line.split("pid=")[1]))
    return pids


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_reach_every_node(tmp_path, sig, code):
    p = launch(tmp_path, "127.0.0.1\n127.0.0.2\n", "--stop-grace", "5", "--no-python", "sh", "-c",
               "echo pid=$$; exec sleep 60")
    pids = started_pids(tmp_path, p, 2)
    p.send_signal(sig)
    rc, out, err = finish(p, timeout=30)
    assert rc == code, err
    assert wait_gone(pids, 10) == []


def test_sigkill_of_the_launcher_stops_every_node(tmp_path):
    p = launch(tmp_path, "127.0.0.1\n127.0.0.2\n", "--stop-grace", "5", "--no-python", "sh", "-c",
               "echo pid=$$ agent=$PPID; exec sleep 60")
    lines = [p.stdout.readline() for _ in range(2)]
    workers = [int(line.split("pid=")[1].split()[0]) for line in lines]
    agents = [int(line.split("agent=")[1]) for line in lines]
    p.kill()
    p.wait()
    # Each ssh dies with the launcher (PR_SET_PDEATHSIG); the fake ssh is the
    # agent itself here, which gets that SIGTERM and stops its workers. Over
    # a real ssh the remote agent sees its stdin close (--exit-on-stdin-eof).
    assert wait_gone(workers, 15) == []
    left = wait_gone(agents, 10)
    for pid in left:  # never leave an agent behind, whatever the verdict
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"agent(s) {left} still up 10 s after the launcher was killed"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1-3 (one free port) with keys made here; yields the
    ssh command that reaches it. Skips where it cannot run."""
    if os.geteuid() != 0:
        pytest.skip("skipped: a loopback sshd for root logins needs root")
    if not os.access("/usr/sbin/sshd", os.X_OK) or not shutil.which("ssh"):
        pytest.skip("skipped: openssh-server and openssh-client are not installed")
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    shutil.copy(d / "key.pub", d / "authorized_keys")
    port = free_port()
    (d / "config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nListenAddress 127.0.0.2\nListenAddress 127.0.0.3\n"
        f"HostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {d}/pid\n")
    os.makedirs("/run/sshd", exist_ok=True)
    subprocess.run(["/usr/sbin/sshd", "-f", str(d / "config"), "-E", str(d / "log")], check=True)
    try:
        yield (f"ssh -p {port} -i {d}/key -o BatchMode=yes -o StrictHostKeyChecking=no "
               "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")
    finally:
        os.kill(int((d / "pid").read_text()), signal.SIGTERM)


def test_real_sshd_three_hosts(tmp_path, sshd):
    p = launch(tmp_path, "127.0.0.1\n127.0.0.2\n127.0.0.3\n", "--ssh-command", sshd,
               "--no-python", "sh", "-c", 'echo rank=$RANK pp=$PYTHONPATH via=${SSH_CONNECTION##* }',
               env={"PYTHONPATH": "/x"})
    rc, out, err = finish(p)
    assert rc == 0, err
    assert sorted(out.splitlines()) == [
        f"127.0.0.1: [0]:rank=0 pp={worker_pythonpath('/x')} via=" + sshd.split()[2],
        f"127.0.0.2: [1]:rank=1 pp={worker_pythonpath('/x')} via=" + sshd.split()[2],
        f"127.0.0.3: [2]:rank=2 pp={worker_pythonpath('/x')} via=" + sshd.split()[2]]


def test_real_sshd_sigkill_of_the_launcher_stops_every_node(tmp_path, sshd):
    # The remote agents are children of sshd, not of the launcher: only
    # their stdin closing (--exit-on-stdin-eof) tells them it is gone.
    p = launch(tmp_path, "127.0.0.1\n127.0.0.2\n127.0.0.3\n", "--ssh-command", sshd,
               "--stop-grace", "3", "--no-python", "sh", "-c", "echo pid=$$; exec sleep 60")
    workers = [int(p.stdout.readline().split("pid=")[1]) for _ in range(3)]
    p.kill()
    p.wait()
    left = wait_gone(workers, 20)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"worker(s) {left} still up 20 s after the launcher was SIGKILLed"


def test_real_sshd_unreachable_host_is_named(tmp_path, sshd):
    # 127.0.0.4: nothing listens on the sshd's port there.
    p = launch(tmp_path, "127.0.0.1\n127.0.0.4\n", "--ssh-command", sshd, "--no-python", "sleep", "30")
    start = time.monotonic()
    rc, out, err = finish(p)
    assert rc == 255, err
    assert "ccrun: host 127.0.0.4 (node 1): ssh failed (exit 255): ssh: connect to host 127.0.0.4" in err
    assert "Connection refused" in err
    assert time.monotonic() - start < 15


def test_elastic_job_goes_on_without_an_unreachable_host(tmp_path):
    p = launch(tmp_path, "127.0.0.1\n127.0.0.2\nunreachable-node\n", "--nnodes", "2:3",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
               "--rdzv-conf", "last_call_timeout=0.5", "--no-python", "sh", "-c", "echo rank=$RANK/$WORLD_SIZE")
    rc, out, err = finish(p)
    assert rc == 0, err
    assert "ssh failed (exit 255)" in err and "the job is elastic and 2 node(s) remain (min 2)" in err
    assert sorted(line.split(":", 1)[1] for line in out.splitlines()) == [" [0]:rank=0/2", " [1]:rank=1/2"]


def test_torch_ddp_over_the_fan_out(tmp_path):
    """examples/ddp_logreg.py (torch DDP over gloo) on two "hosts" started over the fake ssh."""
    script = os.path.join(os.environ.get("CCRUN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                          "examples", "ddp_logreg.py")
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        pytest.skip("skipped: /usr/bin/python3 has no torch (Debian's python3-torch)")
    p = launch(tmp_path, "127.0.0.1 slots=2\n127.0.0.2\n", script, env={"PYTHON_EXEC": "/usr/bin/python3"})
    rc, out, err = finish(p, timeout=300)
    assert rc == 0, err + out
    assert "127.0.0.1: [0]:trained on 3 workers on cpu (restart count 0)" in out, out
    assert "127.0.0.2: " in err and "node 1 of 2, ranks 2..2 of 3" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a host name of each host's own")
def test_an_excluded_host_is_kept_on_the_launching_host_and_left_out_of_the_next_launch(tmp_path):
    state = tmp_path / "state"
    env = {"CCRUN_STATE_DIR": str(state), "FAKE_SSH_UTS": "1"}
    hosts = "127.0.0.1\n127.0.0.2\n127.0.0.3\n"
    args = ["--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "fanjob",
            "--rdzv-conf", "last_call_timeout=1",
            "--health-check", '[ "$(hostname)" != 127.0.0.3 ] || { echo GPU 3 is missing; exit 1; }',
            "--no-python", "sh", "-c", "echo ran on $(hostname)"]
    rc, out, err = finish(launch(tmp_path, hosts, *args, env=env), timeout=90)
    assert rc == 0, err
    assert sorted(l.split("ran on ")[-1] for l in out.splitlines()) == ["127.0.0.1", "127.0.0.2"], out
    assert "ccrun-exclusion|" not in err  # kept, not shown
    assert "127.0.0.3: " in err and "failed its health gate: user: exit 1: GPU 3 is missing" in err
    kept = json.loads((state / "exclusions" / "fanjob.json").read_text())["hosts"]
    assert list(kept) == ["127.0.0.3"] and kept["127.0.0.3"]["offences"] == 1, kept
    # The next launch of the job leaves the host out while its cool-down lasts.
    rc, out, err = finish(launch(tmp_path, hosts, *args, env=env), timeout=90)
    assert rc == 0, err
    assert "ccrun: leaving out host 127.0.0.3: excluded until" in err, err
    assert "starting 2 node(s)" in err, err
    # A static job cannot leave it out: the launch says so and what to do.
    static = ["--nproc-per-node", "1", "--rdzv-id", "fanjob", "--no-python", "true"]
    rc, out, err = finish(launch(tmp_path, hosts, *static, env=env), timeout=90)
    assert rc == 2, err
    assert "the job needs all 3 (a static job)" in err and "to forget" in err, err
