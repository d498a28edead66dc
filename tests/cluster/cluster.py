"""A cluster of network namespaces on one host, for ccrun's multi-node tests.

Each node is a network namespace with its own address on a private /24 (and
its own host name, node<i>, in a UTS namespace),
joined to the others through veth pairs on a bridge that lives in a namespace
of its own: the host's own interfaces and routes are never touched. Commands
started in a node run in their own session; teardown kills them all and
deletes the namespaces, also after a failed or interrupted test, and a sweep
removes what a crashed earlier run left behind.
"""
import atexit
import os
import random
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

PREFIX = "ccr"
# The agent's orphan killer (agent/orphan_killer.cpp): it outlives a killed agent by design, to
# kill what the agent left running and remove its files (progress records, temporary run
# folder). Teardown lets it finish: killed with the agent, it would leave those behind.
JANITOR = "ccrun-janitor"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def cluster_unavailable():
    """A reason why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    name = f"{PREFIX}probe{os.getpid()}"
    r = _ip("netns", "add", name, check=False)
    if r.returncode != 0:
        return f"'ip netns add' failed: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def sweep_leftovers():
    """Deletes namespaces of earlier runs whose owning process is gone."""
    r = _ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"{PREFIX}(\d+)x", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _ip("netns", "del", name, check=False)


class Proc:
    """A command running in a node; output goes to files."""

    def __init__(self, node, argv, env, logdir, name):
        self.node = node
        self.out_path = os.path.join(logdir, f"{name}.out")
        self.err_path = os.path.join(logdir, f"{name}.err")
        full_env = dict(os.environ)
        full_env.update(env or {})
        # Each node also has its host name (node<index>) in a UTS namespace
        # of its own: agents know a node by it (exclusions, ccrun status).
        self.popen = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, "unshare", "-u", "sh", "-c",
             'hostname "$0" && exec "$@"', node.name, *argv], env=full_env,
            stdout=open(self.out_path, "w"), stderr=open(self.err_path, "w"),
            start_new_session=True)
        self.pid = self.popen.pid  # ip netns exec, unshare and sh exec the command: same pid

    def wait(self, timeout):
        return self.popen.wait(timeout)

    @property
    def returncode(self):
        return self.popen.poll()

    def out(self):
        return open(self.out_path).read()

    def err(self):
        return open(self.err_path).read()

    def descendants(self):
        """Pids of every process below this one (workers, their children)."""
        children = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            for c in children.get(p, []):
                out.append(c)
                todo.append(c)
        return out

    def signal_all(self, sig, to_janitors=None):
        """Sends sig to this process and everything below it; the agents' janitors get
        `to_janitors` instead, when given."""
        for p in [self.pid, *self.descendants()]:
            try:
                os.kill(p, to_janitors if to_janitors and is_janitor(p) else sig)
            except ProcessLookupError:
                pass

    def kill(self):
        """SIGKILLs this process and everything below it but the agents' janitors, which are
        woken (SIGCONT: a test may have stopped them) to clean up after their agent."""
        self.signal_all(signal.SIGKILL, to_janitors=signal.SIGCONT)


class Node:
    def __init__(self, cluster, index, ns, addr, veth):
        self.cluster, self.index, self.ns, self.addr, self.veth = cluster, index, ns, addr, veth
        self.name = f"node{index}"  # its host name

    def run(self, argv, env=None, name=None):
        name = name or f"n{self.index}-{len(self.cluster.procs)}"
        p = Proc(self, argv, env, self.cluster.logdir, name)
        self.cluster.procs.append(p)
        return p

    def sh(self, *cmd):
        return subprocess.run(["ip", "netns", "exec", self.ns, *cmd], capture_output=True,
                              text=True)

    def link(self, up):
        """Cuts (up=False) or restores this node's link to the others."""
        _ip("-n", self.ns, "link", "set", "eth0", "up" if up else "down")

    def add_latency(self, ms):
        """Delays every packet this node sends by ms (tc netem). Returns an
        error text when the kernel has no netem, else None."""
        r = subprocess.run(["ip", "netns", "exec", self.ns, "tc", "qdisc", "replace", "dev",
                            "eth0", "root", "netem", "delay", f"{ms}ms"],
                           capture_output=True, text=True)
        return None if r.returncode == 0 else (r.stderr.strip() or "tc failed")


class Cluster:
    def __init__(self, n):
        sweep_leftovers()
        self.id = f"{PREFIX}{os.getpid()}x{random.randrange(1 << 20):05x}"
        self.subnet = f"10.77.{random.randrange(1, 254)}"
        self.logdir = tempfile.mkdtemp(prefix="ccrun-cluster-")
        self.procs = []
        self.namespaces = []
        self.nodes = []
        atexit.register(self.teardown)
        try:
            self._build(n)
        except Exception:
            self.teardown()
            raise

    def _build(self, n):
        switch = f"{self.id}-sw"
        _ip("netns", "add", switch)
        self.namespaces.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for _ in range(n):
            self.add_node()

    def add_node(self):
        """One more node on the same bridge (a machine joining later)."""
        switch = f"{self.id}-sw"
        i = len(self.nodes)
        ns = f"{self.id}-n{i}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        a, b = f"cra{os.getpid() % 10000}{i}", f"crb{os.getpid() % 10000}{i}"
        _ip("link", "add", a, "netns", ns, "type", "veth", "peer", "name", b, "netns", switch)
        _ip("-n", ns, "link", "set", a, "name", "eth0")
        addr = f"{self.subnet}.{i + 1}"
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", switch, "link", "set", b, "master", "br0")
        _ip("-n", switch, "link", "set", b, "up")
        node = Node(self, i, ns, addr, b)
        self.nodes.append(node)
        return node

    def teardown(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            try:
                p.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        inside = {ns: subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                     text=True).stdout.split() for ns in self.namespaces}
        wait_gone([int(p) for pids in inside.values() for p in pids if is_janitor(p)], 10)
        for ns in self.namespaces:
            # Anything still inside (a stray worker) dies with its namespace's
            # processes killed first.
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
        self.namespaces = []
        # The commands' output files: a failed test has shown what it needed by now.
        shutil.rmtree(self.logdir, ignore_errors=True)


def is_janitor(pid):
    """Whether pid is an agent's ccrun-janitor (it removes the agent's files once the agent is
    gone, however it ended)."""
    return _comm(pid) == JANITOR


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def wait_gone(pids, timeout):
    """Waits until every process of `pids` has exited (their pidfds become readable), for at
    most `timeout` seconds."""
    poll, fds = select.poll(), []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
            poll.register(fds[-1], select.POLLIN)
        except ProcessLookupError:
            pass
    deadline, left = time.time() + timeout, len(fds)
    while left and time.time() < deadline:
        ready = poll.poll(max(1, int((deadline - time.time()) * 1000)))
        for fd, _ in ready:
            poll.unregister(fd)
        left -= len(ready)
    for fd in fds:
        os.close(fd)


def wait_all(procs, timeout):
    deadline = time.time() + timeout
    for p in procs:
        p.wait(max(1, deadline - time.time()))
    return [p.returncode for p in procs]
