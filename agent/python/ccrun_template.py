"""ccrun's warm-start template: one Python interpreter per node that imports a job's heavy modules
once, then forks every worker of every attempt from itself (docs/startup.md).

A PyTorch worker spends most of its start-up importing torch: 1-2 s and thousands of file-system
calls, again for every worker at every restart. With --warm-start the agent starts this script
once per node, with the workers' interpreter, flags and environment (less the per-rank variables),
and then asks it for each worker. The template:

  1. imports torch (where installed) and the --preload modules (with `--preload auto`, also, after
     an attempt has run, the installed packages that its workers had imported); notes what the
     interpreter's own start-up (sitecustomize, usercustomize, .pth files) set in os.environ;
     then says "ready" and waits;
  2. for each request, checks that a fork is safe (no thread but its main one, once OpenBLAS's
     pool is stopped as a fork would stop it; no CUDA context),
     forks with CLONE_PARENT, so that the worker is the agent's child exactly like a cold one
     (the agent's pidfd, waitpid, process group, orphan killing), and answers with its pid;
  3. in the forked child, becomes the worker as a cold start would make it: its own stdin, stdout
     and stderr (and sys.stdin/stdout/stderr made for them as the interpreter makes them), process
     group, parent-death signal, CPU binding, environment (the agent's for it plus what the
     start-up set; os.environ and the C environment, and CCRUN_AGENT_TOKEN in the block
     /proc/<pid>/environ shows), sys.argv, sys.orig_argv, sys.path[0], a fresh __main__ with the
     names and __file__ a cold start gives, every random source a fresh interpreter seeds per
     process seeded afresh (torch's default CPU generator, numpy's global state; Python's random
     reseeds itself at fork), the start-up hook installed with the fork as its start, and then
     the program as `python script`, `-m module` or `-c code` would run it, uncaught exceptions
     and exit statuses included.

The template itself is started as a cold worker is (agent/warm_template.cpp: the same starter),
so its descriptors (0, 1, 2 and this socket), signal dispositions and mask are a cold worker's.

The agent talks to it over a SOCK_SEQPACKET socket (fd 3): one JSON message a request, a fork's
stdin (when it has the agent's: then three descriptors come), stdout and stderr passed along
with it (SCM_RIGHTS). Requests:
{"op": "fork", ...} answered {"pid": N} or {"error": why}; {"op": "preload", "modules": [...]}, not answered (a module that
made the template unsafe is said at the next fork); EOF: the template exits. The first message,
unasked: {"ready": true, "imported": [...], "failed": {...}, "seconds": s, "unsafe": why}.

Stdlib only, and nothing here imports torch unless the job's interpreter has it.
"""
import json
import os
import socket
import sys
import time

CONTROL_FD = 3
MAX_MESSAGE = 4 << 20
_TOKEN_VAR = b"CCRUN_AGENT_TOKEN="
# The clone(2) system call's number and the flags of a fork whose child is the caller's sibling.
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}
_CLONE_PARENT = 0x00008000
_SIGCHLD = 17
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9


class Template:
    def __init__(self, agent_pid, token_placeholder):
        import ctypes
        import platform
        self.agent_pid = agent_pid
        self.placeholder = token_placeholder.encode()
        self.sock = socket.socket(fileno=CONTROL_FD)
        self.libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held in calls
        self.api = ctypes.pythonapi
        machine = platform.machine()
        self.sys_clone = _SYS_CLONE.get(machine)
        self.sys_mempolicy = _SYS_SET_MEMPOLICY.get(machine)
        self.syscall = self.libc.syscall
        self.syscall.restype = ctypes.c_long
        self.prctl = self.libc.prctl
        self.get_errno = ctypes.get_errno
        self.before, self.parent, self.child = (self.api.PyOS_BeforeFork,
                                                self.api.PyOS_AfterFork_Parent,
                                                self.api.PyOS_AfterFork_Child)
        self.hook = None
        self.startup_env = ({}, [])  # environment_changes() once the imports are done

    # --- the template's side ---------------------------------------------------------------

    def imports(self, names):
        """Imports `names` (those not imported yet); returns (imported, {name: error})."""
        imported, failed = [], {}
        import importlib
        for name in names:
            if not name or name in sys.modules:
                continue
            try:
                importlib.import_module(name)
                imported.append(name)
            except BaseException as e:  # a module may even sys.exit: the template goes on
                failed[name] = "%s: %s" % (type(e).__name__, e)
        return imported, failed

    def unsafe(self):
        """Why a fork now would give a broken worker, or ""."""
        if self.sys_clone is None:
            import platform
            return "a warm start forks with clone(CLONE_PARENT), known here on x86_64 and " \
                   "aarch64, not on " + platform.machine()
        threads = len(os.listdir("/proc/self/task"))
        if threads > 1 and self.stop_native_pools():
            threads = len(os.listdir("/proc/self/task"))
        if threads > 1:
            import threading
            names = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
            who = " (Python threads: %s)" % ", ".join(names) if names else " (native threads)"
            return "the template runs %d threads%s: a fork copies only the calling one" % (
                threads, who)
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return "an imported module initialised CUDA in the template: a forked child " \
                       "cannot use it"
        except Exception:
            pass
        return ""

    def stop_native_pools(self):
        """Stops the thread pools of loaded native libraries that know how to stop and restart
        theirs across a fork; returns whether there was one. fork(3) runs pthread_atfork's
        handlers, a clone(2) does not: OpenBLAS (numpy's BLAS in pip wheels, which starts one
        thread a core when numpy is imported, as torch does) shuts its pool down in such a
        handler and starts it again at its next call, so the template calls that shutdown
        itself. Any other thread still makes the fork unsafe."""
        import ctypes
        stopped = False
        for path in loaded_libraries():
            if "openblas" not in os.path.basename(path).lower():
                continue
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                shutdown = lib.blas_thread_shutdown_
            except (OSError, AttributeError):
                continue
            shutdown()
            stopped = True
        return stopped

    def send(self, message):
        self.sock.send(json.dumps(message).encode())

    def serve(self):
        """Answers requests until EOF; returns a worker's job in a forked child."""
        while True:
            data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 3)
            if not data:
                return None
            request = json.loads(data)
            op = request.get("op")
            if op == "preload":
                self.imports(request.get("modules", []))
                self.startup_env = environment_changes()
            elif op == "fork":
                job = self.fork(request, fds)
                if job is not None:
                    return job
            for fd in fds:
                os.close(fd)

    def fork(self, request, fds):
        """Forks a worker: None here, its job in the child."""
        why = self.unsafe()
        if why:
            self.send({"error": why})
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        self.before()
        pid = self.syscall(self.sys_clone, _CLONE_PARENT | _SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            self.child()
            return Worker(self, request, fds, time.monotonic_ns())
        self.parent()
        if pid < 0:
            self.send({"error": "clone: " + os.strerror(self.get_errno())})
        else:
            self.send({"pid": pid})
        return None


def environment_changes():
    """What the interpreter's start-up (site.py: .pth files, sitecustomize, usercustomize) and the
    template's imports changed in os.environ: ({name: value} set, [name] removed), from the block
    this process was started with (/proc/self/environ) to os.environ now. A cold worker's start-up
    and its own import of those modules make the same changes to its environment; a warm worker's
    is the agent's for it, so they are made again there."""
    try:
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except OSError:
        return {}, []
    initial = {}
    for entry in block.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq:
            initial.setdefault(os.fsdecode(name), os.fsdecode(value))
    now = dict(os.environ)
    changed = {k: v for k, v in now.items() if initial.get(k) != v}
    removed = [k for k in initial if k not in now]
    return changed, removed


def loaded_libraries():
    """The paths of the shared libraries mapped into this process."""
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and ".so" in parts[5]:
                paths.add(parts[5].strip())
    return sorted(paths)


class Worker:
    """A forked child, becoming the worker the request describes."""

    def __init__(self, template, request, fds, forked_ns):
        self.t = template
        self.request = request
        self.fds = fds
        self.forked_ns = forked_ns

    def become(self):
        t, r = self.t, self.request
        os.setpgid(0, 0)
        t.prctl(_PR_SET_PDEATHSIG, _SIGKILL)
        if os.getppid() != t.agent_pid:
            os._exit(1)  # the agent died before the parent-death signal was set
        t.sock.close()
        fds = list(self.fds)
        in_fd = fds.pop(0) if len(fds) == 3 else os.open(os.devnull, os.O_RDONLY)
        out_fd, err_fd = fds
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (in_fd, out_fd, err_fd):
            os.close(fd)
        standard_streams()
        self.place(r.get("cpus"), r.get("nodes"), r.get("node_count", 0))
        env = dict(e.split("=", 1) for e in r["env"] if "=" in e)
        changed, removed = t.startup_env
        env.update(changed)
        for name in removed:
            env.pop(name, None)
        os.environ.clear()
        os.environ.update(env)
        self.show_token(env.get(_TOKEN_VAR[:-1].decode(), ""))
        if r.get("argv"):
            sys.orig_argv = list(r["argv"])
        self.reseed()
        hook = sys.modules.get("ccrun_progress")
        if hook is not None:
            hook.install(started_ns=self.forked_ns, warm=True)

    def place(self, cpus, nodes, node_count):
        """--numa-binding: the CPU mask and preferred memory nodes the agent planned."""
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError as e:
                os.write(2, ("ccrun: --numa-binding: cannot bind the worker to its CPUs: %s\n"
                             % e.strerror).encode())
                os._exit(127)
        if nodes and self.t.sys_mempolicy is not None:
            import ctypes
            mask = (ctypes.c_ulong * len(nodes))(*nodes)
            mode = 5 if node_count > 1 else 1  # MPOL_PREFERRED_MANY, MPOL_PREFERRED
            self.t.syscall(self.t.sys_mempolicy, mode, mask, len(nodes) * 64 + 1)  # advice

    def show_token(self, token):
        """Writes CCRUN_AGENT_TOKEN=<token> over the placeholder in the environment block the
        template was started with: /proc/<pid>/environ shows that block, and the agent finds a
        worker's escaped descendants by it (agent/descendants.h)."""
        placeholder = _TOKEN_VAR + self.t.placeholder
        if not token or len(token) > len(self.t.placeholder):
            return
        try:
            import ctypes
            with open("/proc/self/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
            block = ctypes.string_at(start, end - start)
            at = block.find(placeholder + b"\0")
            if at < 0:
                return
            value = _TOKEN_VAR + token.encode() + b"\0"
            ctypes.memmove(start + at, value, len(value))
        except (OSError, ValueError, IndexError):
            pass

    @staticmethod
    def reseed():
        """Randomness a fresh interpreter draws anew in each process, drawn anew here: torch's
        default CPU generator (torch seeds it from the OS at import; a CUDA generator is made,
        and seeded, only once CUDA is initialised, which no template has done), numpy's global
        RandomState (seeded from the OS at import). Python's random module reseeds itself at
        fork (os.register_at_fork, run by PyOS_AfterFork_Child)."""
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                torch.default_generator.seed()
            except Exception:
                pass
        mtrand = sys.modules.get("numpy.random.mtrand")
        if mtrand is not None:
            try:
                mtrand.seed()
            except Exception:
                pass

    def run(self):
        """The program, as the interpreter's command line would run it."""
        import types
        r = self.request
        kind, target, args = r["kind"], r["target"], r["args"]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = sys.modules["builtins"]
        main.__dict__["__annotations__"] = {}
        sys.modules["__main__"] = main
        if kind == "module":
            import runpy
            sys.argv = ["-m"] + args
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(target, alter_argv=True)
        elif kind == "code":
            from importlib.machinery import BuiltinImporter
            sys.argv = ["-c"] + args
            sys.path[0] = ""
            main.__loader__ = BuiltinImporter
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            from importlib.machinery import SourceFileLoader
            # As the interpreter has it: argv[0] as typed, __file__ and the code's file name
            # joined to the working directory (not normalised), sys.path[0] the directory of
            # the script with its links resolved.
            path = target if os.path.isabs(target) else os.path.join(os.getcwd(), target)
            sys.argv = [target] + args
            sys.path[0] = os.path.dirname(os.path.realpath(target))
            main.__file__ = path
            main.__cached__ = None
            main.__loader__ = SourceFileLoader("__main__", path)
            with open(target, "rb") as f:
                source = f.read()
            exec(compile(source, path, "exec"), main.__dict__)


def standard_streams():
    """sys.stdin, sys.stdout and sys.stderr for descriptors 0, 1 and 2 as the interpreter makes
    them at start-up (CPython's create_stdio): the same encoding, errors and -u choice as the
    template's, line buffering where the descriptor is a terminal (and always on stderr), so a
    worker's pipe is block-buffered as a cold worker's is even when the template's stream was a
    terminal."""
    import io
    unbuffered = bool(getattr(sys.__stdout__, "write_through", False))
    made = []
    for fd, name, writes, old in ((0, "<stdin>", False, sys.__stdin__),
                                  (1, "<stdout>", True, sys.__stdout__),
                                  (2, "<stderr>", True, sys.__stderr__)):
        buffering = 0 if unbuffered and writes else -1
        buf = io.open(fd, "wb" if writes else "rb", buffering, closefd=False)
        raw = buf if buffering == 0 else buf.raw
        raw.name = name
        line = not unbuffered and (raw.isatty() or fd == 2)
        stream = io.TextIOWrapper(buf, getattr(old, "encoding", None), getattr(old, "errors", None),
                                  "\n", line, unbuffered)
        stream.mode = "w" if writes else "r"
        made.append(stream)
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made


def _uncaught(e):
    """What the interpreter does with an uncaught exception, with the template's frames left out
    of its traceback."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    sys.excepthook(type(e), e.with_traceback(tb), tb)  # the hook prints e.__traceback__
    if isinstance(e, KeyboardInterrupt):  # the interpreter then dies of SIGINT
        import atexit
        import signal
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(1)


def _start(argv):
    """The template's own start: parent-death signal, sys.path[0] as the program's, imports."""
    agent_pid, placeholder, path0 = int(argv[0]), argv[1], argv[2]
    modules = [m for m in argv[3].split(",") if m] if len(argv) > 3 else []
    template = Template(agent_pid, placeholder)
    template.prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    if os.getppid() != agent_pid:
        os._exit(1)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[0] = path0
    if here not in sys.path:
        sys.path.append(here)
    import ccrun_progress  # noqa: F401 (the hook, installed in each worker)
    began = time.monotonic()
    imported, failed = template.imports(modules)
    template.startup_env = environment_changes()
    template.send({"ready": True, "imported": imported, "failed": failed,
                   "seconds": time.monotonic() - began, "unsafe": template.unsafe()})
    return template


def main(argv):
    job = _start(argv).serve()
    if job is None:
        return 0
    job.become()
    try:
        job.run()
    except SystemExit:
        raise
    except BaseException as e:
        _uncaught(e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
