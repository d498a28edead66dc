"""Helpers for the Python tests: where the binaries are, and a daemon starter."""
import glob
import os
import random
import re
import shlex
import signal
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def python_hook_dir():
    """The folder of the Python start-up hook that ccrun puts first on its
    workers' PYTHONPATH (agent/python in the source tree)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent", "python")


def worker_pythonpath(users):
    """PYTHONPATH as a worker sees it when ccrun was given `users`: the hook's folder, the
    build tree's folder of its C wrappers where they are built, then the user's."""
    hook = os.path.realpath(python_hook_dir())
    native = os.path.realpath(os.path.join(build_dir(), "agent", "python"))
    if glob.glob(os.path.join(native, "_ccrun_hook*.so")):
        hook += ":" + native
    return hook + ":" + users


def build_dir():
    return os.environ.get("CCRUN_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build")


def binary(*parts):
    path = os.path.join(build_dir(), *parts)
    if not os.path.exists(path):
        pytest.skip(f"skipped: {path} is not built (run scripts/setup.sh)")
    return path


def communicate_all(procs, timeout, kill=None):
    """Waits for every process of `procs` (each within `timeout` seconds) and
    returns their (returncode, stdout, stderr) in order. On the way out, also
    on a timeout, each one still running is killed: `kill(p)`, by default
    p.kill() then p.wait()."""
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                if kill:
                    kill(p)
                else:
                    p.kill()
                    p.wait()
    return results


def bash_complete(script, words):
    """What the bash completion in `script` offers for the command line `words`
    (words[0] the command, the last the word being completed, "" for none; a
    "--flag=value" is three words, as bash splits it at "="): the completion
    function that `complete -p` names is run, then its COMPREPLY read back."""
    line = " ".join(shlex.quote(w) for w in words)
    code = (f"source {shlex.quote(script)} || exit 3\n"
            f"spec=$(complete -p {shlex.quote(words[0])}) || exit 4\n"
            "fn=${spec##*-F }; fn=${fn%% *}\n"
            f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMPREPLY=()\n"
            "$fn; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", code], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return sorted(w for w in r.stdout.split("\n") if w)


def free_port():
    """A port on 127.0.0.1 that nothing listens on, taken from below the
    kernel's ephemeral range: a port the kernel handed out for bind(0) goes
    back into that range, and while a test's agents start, a connection of
    a test running beside it can take it as its local port, so neither agent
    can listen there and both wait for a store that never comes."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


class Daemon:
    """A running ccrun-rendezvous; stopped with stop() or as a context manager. It runs in a
    session of its own, stopped whole: a prefix such as faketime forks the daemon and waits,
    and a signal to the prefix alone would leave the daemon running."""

    def __init__(self, *args, prefix=()):
        """`prefix`: a command to run it under (e.g. faketime)."""
        self.prefixed = bool(prefix)
        self.proc = subprocess.Popen(
            [*prefix, binary("store", "ccrun-rendezvous"),
             *([] if "--port" in args else ["--port", "0"]), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+):(\d+)$", line.strip())
        if not m:
            self._signal_session(signal.SIGKILL)
            raise RuntimeError(f"ccrun-rendezvous did not start: {line!r} {self.proc.stderr.read()}")
        self.host, self.port = m.group(1), int(m.group(2))

    def stop(self):
        # Under a prefix, the daemon alone first: the prefix then ends by itself and removes
        # what it made (faketime's shared memory in /dev/shm: killed, it leaves it).
        self._signal_session(signal.SIGTERM, spare_leader=self.prefixed)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self._signal_session(signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode

    def _signal_session(self, sig, spare_leader=False):
        if not spare_leader:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass  # every process of it is gone
            return
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and int(d) != self.proc.pid and os.getpgid(int(d)) == self.proc.pid:
                    os.kill(int(d), sig)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_daemon(*args, **kw):
    return Daemon(*args, **kw)


def ccrun_cmd(*args):
    return [binary("launcher", "ccrun"), *args]


def run_ccrun(*args, timeout=120, env=None, **kw):
    """Runs ccrun to completion; returns the CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(ccrun_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env=full_env, **kw)


def spawn_ccrun(*args, env=None, **kw):
    """Starts ccrun in its own session (so tests can kill all it left)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen(ccrun_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env, start_new_session=True, **kw)


def wait_until_signals_held(p, sig, timeout=30):
    """Waits until a thread of process `p` (a Popen) has `sig` blocked (its
    SigBlk in /proc): the first moment of its own code (ccrun holds the stop
    signals from its ELF preinit stage on). Before that the dynamic loader
    runs, and a signal takes its default action. A state, not a time. Every
    thread is looked at: one in sigwait() shows the signals it waits for as
    unblocked while it waits (ccrun-rendezvous's main thread)."""
    import time
    bit = 1 << (sig - 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise AssertionError(f"process {p.pid} ended (rc {p.returncode}) before it blocked "
                                 f"signal {sig}:\n{p.stderr.read() if p.stderr else ''}")
        for task in os.listdir(f"/proc/{p.pid}/task"):
            try:
                with open(f"/proc/{p.pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("SigBlk:") and int(line.split()[1], 16) & bit:
                            return
            except FileNotFoundError:
                pass  # a thread that just ended
        time.sleep(0.0005)
    raise AssertionError(f"process {p.pid} did not block signal {sig} within {timeout}s")


def read_stderr_until(p, text, timeout=60):
    """Reads p.stderr (text mode) line by line until a line holds `text`;
    returns what it read. Fails when p ends or `timeout` passes first."""
    import threading
    seen = []
    found = threading.Event()

    def reader():
        for line in p.stderr:
            seen.append(line)
            if text in line:
                found.set()
                return
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    assert found.is_set(), f"no line with {text!r} within {timeout}s:\n{''.join(seen)}"
    return "".join(seen)


def parse_env_lines(text):
    """Lines 'ENV {json}' printed by tests/integration/print_env.py -> {rank: env}."""
    import json
    out = {}
    for line in text.splitlines():
        if "ENV " in line:
            env = json.loads(line.split("ENV ", 1)[1])
            out[int(env["RANK"])] = env
    return out


def top_rows(screen):
    """`ccrun top`'s table rows on a screen, by their first cell (a rank or a list of ranks)."""
    out = {}
    for line in screen.splitlines():
        cells = line.split()
        if cells and cells[0][0].isdigit():
            out[cells[0]] = cells
    return out


class Tmux:
    """A detached tmux server of its own (its socket in a folder of its own) with
    one 120x40 window running `command`, then a line with its exit status and
    the terminal's mode, then a long sleep that keeps the pane to read."""

    def __init__(self, command):
        assert shutil.which("tmux"), "tmux is missing: scripts/setup.sh installs it"
        self.dir = tempfile.mkdtemp(prefix="ccrun-tmux-")
        self.socket = os.path.join(self.dir, "tmux")
        shell = f"{command}; echo TOP_EXIT=$?; stty -a; sleep 600"
        subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", "new-session", "-d",
                        "-x", "120", "-y", "40", "-s", "top", shell], check=True, timeout=30)

    def screen(self):
        r = subprocess.run(["tmux", "-S", self.socket, "capture-pane", "-p", "-t", "top"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout

    def keys(self, *keys):
        subprocess.run(["tmux", "-S", self.socket, "send-keys", "-t", "top", *keys], check=True,
                       timeout=30)

    def wait_for(self, check, what, timeout=60):
        """Polls the screen until check(screen) holds; returns the screen."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if check(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"never {what} within {timeout}s; the screen:\n{screen}")

    def close(self):
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
