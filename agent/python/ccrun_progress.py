"""ccrun_progress: a Python worker's progress record (include/ccrun/progress.h).

ccrun's agent gives every worker one page of shared memory, named by
CCRUN_PROGRESS_FILE, and puts this directory first on PYTHONPATH so that
sitecustomize.py calls install() at start-up. install() does nothing unless
that file is a valid record; then, with no change to the training script:

  - every thread's Python traceback can be asked for: the hook registers
    faulthandler for one signal (SIGUSR2, or CCRUN_DUMP_SIGNAL) that appends
    the tracebacks to CCRUN_STACK_FILE (stderr if unset) and lets the process
    go on, and writes that signal into the record's dump_signal field;
  - torch.distributed's collectives are counted: when the script imports
    torch (never before: this module never imports torch), the module-level
    collectives of torch.distributed are wrapped so that each call records
    its issue and completion in its process group's slot.
  - DistributedDataParallel's steps are counted: its gradient all-reduces
    run in torch's C++ reducer, which no wrapper sees, so its forward is
    wrapped instead and each training step (training mode, grad enabled,
    outside no_sync()) is one "DDP step" call (op 13) in a slot of the DDP
    module's own (see _patch_ddp), which the agent counts as one step.

Why SIGUSR2: the dump signal must be one no training stack uses for itself
and one whose default action the agent never relies on. SIGUSR1 is taken
(PyTorch Lightning and submitit requeue on it under SLURM; faulthandler's own
documentation uses it as the example); SIGQUIT/SIGABRT would dump core where
faulthandler is not registered; real-time signals are free but unnamed to
`kill` and ps users. SIGUSR2 is free in torch, torchelastic, Lightning and
SLURM's conventions and can be sent by hand (`kill -USR2 PID`).
CCRUN_DUMP_SIGNAL (a number or a name, e.g. SIGRTMIN+3 as "37") overrides it.
The agent sends it only while dump_signal is set: a script that later takes
the signal over with signal.signal clears the field.

A step (a training iteration) is marked with step() below, or, without this
module, with these stdlib-only lines (a no-op outside ccrun):

    import mmap, os, struct, time
    _rec = None
    if os.environ.get("CCRUN_PROGRESS_FILE"):
        with open(os.environ["CCRUN_PROGRESS_FILE"], "r+b") as f:
            _rec = mmap.mmap(f.fileno(), 4096)
        if _rec[:8] != b"CCRURPR1":
            _rec = None

    def mark_step():
        if _rec is not None:
            (steps,) = struct.unpack_from("<Q", _rec, 24)
            struct.pack_into("<Qq", _rec, 24, steps + 1,
                             time.clock_gettime_ns(getattr(time, "CLOCK_MONOTONIC_COARSE", 6)))

What a torch group slot holds:
  id      0 for the default (world) group; any other group: FNV-1a 64 over its
          sorted global ranks, each as 4 little-endian bytes (the same on
          every member); size: members; source: 2 (torch).
  issued  the sequence number of the group's last call (1, 2, ...), written
          after op, count and issued_ns; completed/completed_ns when it
          returned (async_op=True, isend, irecv: when the returned Work's
          wait() returns, or is_completed() says True; the hook patches the
          Work class's wait and is_completed for that, so the caller gets
          torch's own Work. An async call that returns no Work (torch 2.x
          inside a coalescing manager) completes when it returns. A call that
          raises is never completed).
  count   elements of this rank's own part: the tensor of all_reduce,
          broadcast, reduce, send, recv; the input of all_gather(_into_tensor),
          gather, all_to_all(_single); the output of scatter and
          reduce_scatter(_tensor); 0 for barriers.
  op_calls the calls issued of each op (the record's op_calls, for the first
          16 slots): what tells a skipped or an extra call in a desync.
A DDP module's slot: id = its group's id ^ DDP_ID_XOR ^ its ordinal among
this process's DDP modules on that group; size: the group's; issued at the
step's forward, completed when its backward ended (a step whose backward
never ended is never completed: the agent takes completed as at least
issued - 1); count: the elements of the parameters DDP reduces; wait_us:
the time from the watched gradient's arrival to the end of the backward,
the reducer's wait for the step's last gradient all-reduces (what a faster
rank spends waiting for a straggler). The agent counts a rank's steps as
the record's steps plus its DDP slots' issued.
A collective called from inside another wrapped one (a deprecated alias that
calls its successor) counts once, as the outer call. Calls on a group this
rank is not a member of do nothing in torch and are not recorded.

Ownership: the first process that finds the record's pid field 0 (or its own
pid, or a dead process's) owns it; Python processes it starts later (spawned
DataLoader or compile workers) see another live pid and stay inert, so the
agent's dump signal and the group slots belong to the worker itself. step()
writes whichever process calls it.
"""
import os
import sys

MAGIC = 0x3152505255524343  # b"CCRURPR1"
VERSION = 1
RECORD_BYTES = 4096
MAX_GROUPS = 48
SOURCE_TORCH = 2
FILE_VAR = "CCRUN_PROGRESS_FILE"
STACK_FILE_VAR = "CCRUN_STACK_FILE"
DUMP_SIGNAL_VAR = "CCRUN_DUMP_SIGNAL"

OPS = {"none": 0, "all_reduce": 1, "broadcast": 2, "reduce": 3, "all_gather": 4, "gather": 5,
       "scatter": 6, "reduce_scatter": 7, "all_to_all": 8, "send": 9, "recv": 10, "barrier": 11,
       "other": 12, "ddp_step": 13}

# torch.distributed function -> (op, the parameter whose elements are counted, always async).
COLLECTIVES = {
    "all_reduce": ("all_reduce", "tensor", False),
    "broadcast": ("broadcast", "tensor", False),
    "reduce": ("reduce", "tensor", False),
    "all_gather": ("all_gather", "tensor", False),
    "all_gather_into_tensor": ("all_gather", "input_tensor", False),
    "_all_gather_base": ("all_gather", "input_tensor", False),
    "gather": ("gather", "tensor", False),
    "scatter": ("scatter", "tensor", False),
    "reduce_scatter": ("reduce_scatter", "output", False),
    "reduce_scatter_tensor": ("reduce_scatter", "output", False),
    "_reduce_scatter_base": ("reduce_scatter", "output", False),
    "all_to_all": ("all_to_all", "input_tensor_list", False),
    "all_to_all_single": ("all_to_all", "input", False),
    "send": ("send", "tensor", False),
    "recv": ("recv", "tensor", False),
    "isend": ("send", "tensor", True),
    "irecv": ("recv", "tensor", True),
    "barrier": ("barrier", None, False),
    "monitored_barrier": ("barrier", None, False),
    "all_reduce_coalesced": ("all_reduce", "tensors", False),
    "all_gather_coalesced": ("all_gather", "input_tensor_list", False),
}
# The start-up timeline (progress.h's Startup): when this worker reached each phase, in
# CLOCK_MONOTONIC ns, each written once; flags bit 0: forked from a warm template.
STARTUP_BASE = 64 + 64 * MAX_GROUPS
# Calls issued of each op (u32, [slot][op - 1], ops 1..12), for the first OP_COUNT_GROUPS slots.
OP_CALLS_BASE = STARTUP_BASE + 64
OP_COUNT_GROUPS = 16
COUNTED_OPS = 12
PHASES = {"interpreter": 0, "imports": 1, "group": 2, "collective": 3, "step": 4}
STARTED_WARM = 1
_C10D = "torch.distributed.distributed_c10d"
_DDP = "torch.nn.parallel.distributed"  # DistributedDataParallel's module, torch 1.13 to 2.x
# A DDP module's slot id: its process group's id (as above) XOR this ("DDPstep\0",
# little-endian), XOR the module's ordinal among this process's DDP modules on that group.
DDP_ID_XOR = 0x0070657473504444
_DDP_KEY = "_ccrun_ddp_slot"  # in the DDP module's __dict__: see _ddp_slot

_CLOCK = None          # time.CLOCK_MONOTONIC_COARSE
_gettime = None        # time.clock_gettime_ns
_map = None            # the mmap, kept alive as long as the process
_u32 = _i32 = _u64 = _i64 = None  # typed views of the record (native = little-endian)
_owner = False         # this process owns the record (pid, dump signal, group slots)
_dump_signal = 0
_stack_file = None     # kept open: faulthandler writes to its descriptor
_originals = {}        # id(wrapper) -> original, id(original) -> wrapper
_native = None         # the C wrappers (_ccrun_hook, attached to the record); False: none
NATIVE_VAR = "CCRUN_PYTHON_HOOK_C"  # "0": the Python wrappers even where the C ones load


def now_ns():
    """CLOCK_MONOTONIC_COARSE in ns, the record's clock."""
    import time
    return time.clock_gettime_ns(getattr(time, "CLOCK_MONOTONIC_COARSE", 6))


def _map_record():
    """Maps the record named by CCRUN_PROGRESS_FILE; False if there is none or it is no record."""
    global _map, _u32, _i32, _u64, _i64, _CLOCK, _gettime
    if _map is not None:
        return _map is not False
    _map = False
    path = os.environ.get(FILE_VAR)
    if not path or sys.byteorder != "little":
        return False
    import mmap
    import struct
    import time
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size < RECORD_BYTES:
            return False
        m = mmap.mmap(fd, RECORD_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    magic, version, record_bytes = struct.unpack_from("<QII", m, 0)
    if magic != MAGIC or version < VERSION or record_bytes < RECORD_BYTES:
        m.close()
        return False
    view = memoryview(m)
    _u32, _i32, _u64, _i64 = view.cast("I"), view.cast("i"), view.cast("Q"), view.cast("q")
    _CLOCK = getattr(time, "CLOCK_MONOTONIC_COARSE", 6)
    _gettime = time.clock_gettime_ns
    _map = m
    return True


def _load_native():
    """The C wrappers (agent/python/_ccrun_hook.c: the same per-call work as the Python ones
    below, at a fraction of the cost), attached to the mapped record; None where the module
    is not on the path (a Python it was not built for, a build without it) or NATIVE_VAR is
    "0". Imported when torch is, not at start-up. Decided once: every slot and wrapper of a
    process is of one kind."""
    global _native
    if _native is None:
        _native = False
        if os.environ.get(NATIVE_VAR, "1") != "0" and _map:
            try:
                import _ccrun_hook
                _ccrun_hook.attach(memoryview(_map))
                _native = _ccrun_hook
            except Exception:
                pass
    return _native or None


def step():
    """Marks one step (a training iteration): steps += 1, step_ns = now. A no-op outside ccrun."""
    if _map is None:
        _map_record()
    if _map:
        _u64[3] += 1
        _i64[4] = _gettime(_CLOCK)
        if _u64[3] == 1:
            mark("step")


def mark(phase, at_ns=None):
    """Records that this worker reached start-up `phase` (a PHASES name) at `at_ns` (now by
    default), unless it did before. A no-op outside ccrun."""
    if _map is None:
        _map_record()
    if _map:
        i = STARTUP_BASE // 8 + PHASES[phase]
        if _i64[i] == 0:
            import time
            at_ns = at_ns or time.monotonic_ns()
            if phase == "step" and _owner:
                _write_modules()  # first: the agent reads the file once it sees the step
            _i64[i] = at_ns


def _write_modules():
    """The installed packages this worker imported, one top-level name a line, in
    <CCRUN_PROGRESS_FILE>.modules: a --warm-start template imports them for the next attempt."""
    try:
        skip = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
        names = set()
        for name in list(sys.modules):
            top = name.partition(".")[0]
            if top in skip or top in names or top.startswith(("_", "ccrun_")):
                continue
            path = getattr(sys.modules.get(top), "__file__", None) or ""
            if "site-packages" in path or "dist-packages" in path:
                names.add(top)
        path = os.environ[FILE_VAR] + ".modules"
        with open(path + ".tmp", "w") as f:
            f.write("".join(n + "\n" for n in sorted(names)))
        os.replace(path + ".tmp", path)  # whole or not at all
    except Exception:
        pass


def _claim():
    """Takes the record's pid field unless another live process holds it."""
    me = os.getpid()
    pid = _i32[4]
    if pid not in (0, me):
        try:
            os.kill(pid, 0)
            return False  # a live process owns it (this is a child of the worker)
        except ProcessLookupError:
            pass
        except OSError:
            return False
    _i32[4] = me
    return True


def _choose_signal():
    import _signal  # signal's C half, always loaded: `import signal` costs enum, ~3 ms
    value = os.environ.get(DUMP_SIGNAL_VAR, "").strip()
    if not value:
        return _signal.SIGUSR2
    if value.isdigit():
        return int(value)
    name = value.upper()
    return int(getattr(_signal, name if name.startswith("SIG") else "SIG" + name))


def _install_dump():
    """faulthandler on the dump signal; publishes the signal in dump_signal."""
    global _dump_signal, _stack_file
    import _signal
    import faulthandler
    sig = _choose_signal()
    path = os.environ.get(STACK_FILE_VAR)
    out = sys.stderr
    if path:
        try:
            out = _stack_file = open(path, "a")
        except OSError:
            out = sys.stderr
    if out is None:
        return
    faulthandler.register(sig, file=out, all_threads=True, chain=False)
    _dump_signal = sig
    _i32[5] = sig

    # A script that takes the signal over (signal.signal) replaces faulthandler's handler: the
    # record then says no dump signal, so the agent never triggers the script's own handler.
    # signal.signal calls _signal.signal, looked up at each call.
    original = _signal.signal

    def signal_signal(signalnum, handler):
        result = original(signalnum, handler)
        if _dump_signal and signalnum == _dump_signal:
            _i32[5] = 0
        return result

    signal_signal.__wrapped__ = original
    signal_signal.__name__ = original.__name__
    signal_signal.__qualname__ = getattr(original, "__qualname__", original.__name__)
    signal_signal.__doc__ = original.__doc__
    _signal.signal = signal_signal


# ---------------------------------------------------------------------------------------------
# torch.distributed


def fnv1a64_ranks(ranks):
    """A non-world group's id: FNV-1a 64 over its sorted global ranks, 4 little-endian bytes each."""
    h = 0xCBF29CE484222325
    for r in sorted(ranks):
        for b in int(r).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h or 1  # 0 is the world group's


class _Slot:
    __slots__ = ("number", "seq", "done", "op", "count", "wait_us", "index", "i_completed",
                 "i_completed_ns", "i_issued_ns", "i_wait_us", "i_calls")

    def __init__(self, index):
        base = 64 + 64 * index
        self.number = index  # the slot's in the record
        self.seq = 0     # the last sequence number issued
        self.done = 0    # the last completed
        # What the record's op, count and wait_us hold (this process is their one writer): a
        # call like the last writes no op or count, and wait_us is written without a read.
        self.op = 0
        self.count = 0
        self.wait_us = 0
        self.i_completed = (base + 24) // 8
        self.i_completed_ns = (base + 56) // 8
        self.i_issued_ns = (base + 48) // 8
        self.i_wait_us = (base + 36) // 4  # u32, wrapping: time in calls, for stragglers
        # u32 view index + op: the op's calls (None: this slot has no counts)
        self.i_calls = (OP_CALLS_BASE // 4 + COUNTED_OPS * index - 1
                        if index < OP_COUNT_GROUPS else None)
        # view indices: op (u32), count, issued_ns, issued, completed_ns, completed (64-bit)
        self.index = ((base + 32) // 4, (base + 40) // 8, (base + 48) // 8, (base + 16) // 8,
                      self.i_completed_ns, self.i_completed)


def _new_slot(group_id, size):
    """The next free slot, a gone DDP module's (_retire_ddp_slot) first, else the record's
    next (groups_used read, then written +1); False past the 48th. Its size is written last:
    the agent skips a slot of size 0, one being made."""
    reused = bool(_free_slots)
    if reused:
        index = _free_slots.pop()
    else:
        index = _u32[10]
        _u32[10] = index + 1
        if index >= MAX_GROUPS:
            return False
    base = 64 + 64 * index
    wait_us = 0
    if reused:  # a DDP module's: its steps go to the record's (the agent counts a rank's steps
        _u32[(base + 8) // 4] = 0  # as those plus its DDP slots' issued), its time waited
        _u64[3] += _u64[base // 8 + 2]  # stays (the agent sums every slot's wait_us)
        wait_us = _u32[(base + 36) // 4]
    for i in range(base // 8 + 2, (base + 64) // 8):  # issued .. completed_ns
        _u64[i] = 0
    _u32[(base + 36) // 4] = wait_us
    if index < OP_COUNT_GROUPS:
        for i in range(COUNTED_OPS):
            _u32[OP_CALLS_BASE // 4 + COUNTED_OPS * index + i] = 0
    _u32[(base + 12) // 4] = SOURCE_TORCH
    _u64[base // 8] = group_id
    _u32[(base + 8) // 4] = size
    return _native.Slot(index) if _native else _Slot(index)


_free_slots = []  # slots of DDP modules that are gone, for the next groups and DDP modules


def _retire_ddp_slot(index, unwatch):
    """A DDP module is gone (a finalizer): its slot goes to the next group or DDP module that
    needs one (_new_slot), so a program that wraps its model in DDP again every epoch never
    runs out of the 48; until then the agent reads it as it was, its last step completed (the
    module's backward will not come). Its watch comes off the gradient accumulator it hooks,
    which outlives the module under the next DDP of the same model (each would add a hook that
    runs at every backward), and writes nothing more (a backward in flight may still call it)."""
    try:
        if unwatch is not None:
            unwatch()
        base = 64 + 64 * index
        _u64[base // 8 + 3] = _u64[base // 8 + 2]  # completed = issued
        _free_slots.append(index)
    except Exception:
        pass


class _Hook:
    """The wrappers' shared state: the slots by group, the thread-local nesting flag."""

    def __init__(self, c10d):
        from _thread import _local

        class Busy(_local):
            busy = False

        self.c10d = c10d
        self.tls = Busy()
        self.slots = {}  # group (None: the default group) -> _Slot, or False: not recorded
        self.track = False  # Work.wait is patched: async calls complete at wait() (read when
        #                     a collective is wrapped: Work is patched first)

    def slot_for(self, group):
        """Resolves (once per group) the slot of a group; None: not yet (no default group)."""
        c10d = self.c10d
        member = getattr(c10d, "GroupMember", None)
        if group is not None and group is getattr(member, "NON_GROUP_MEMBER", object()):
            self.slots[group] = False
            return False
        try:
            default = c10d._get_default_group()
        except Exception:
            return None  # not initialized: torch raises its own error
        if group is None or group is default:
            slot = self.slots.get(None)
            if slot is None:
                slot = _new_slot(0, c10d.get_world_size())
                self.slots[None] = slot
        else:
            try:
                if hasattr(c10d, "get_process_group_ranks"):
                    ranks = c10d.get_process_group_ranks(group)
                else:
                    ranks = list(c10d._pg_group_ranks[group].keys())
            except Exception:
                self.slots[group] = False
                return False
            slot = _new_slot(fnv1a64_ranks(ranks), len(ranks))
        self.slots[group] = slot
        return slot


_pending = {}  # id(work) -> (work, slot, seq): async calls not yet seen complete (the Python
#               wrappers'; the C ones keep a table of their own, _ccrun_hook.c)
_PENDING_MAX = 4096


def _patch_work(work_type):
    """Work.wait (and is_completed) also mark an async call completed. The Work itself goes back
    to the caller unchanged: torch hands Works to C++ (batch_isend_irecv's _end_coalescing), so a
    proxy object would not do."""
    wait, is_completed = work_type.wait, work_type.is_completed
    pending = _pending
    native = _load_native()
    if native is not None:
        work_wait = native.WorkMethod(wait, _first_collective, False)  # its own pending table
        work_is_completed = native.WorkMethod(is_completed, _first_collective, True)
    else:
        def work_wait(self, *args, **kwargs):
            result = wait(self, *args, **kwargs)
            if pending:
                entry = pending.pop(id(self), None)
                if entry is not None:
                    _complete(entry[1], entry[2])
            return result

        def work_is_completed(self, *args, **kwargs):
            done = is_completed(self, *args, **kwargs)
            if done and pending:
                entry = pending.pop(id(self), None)
                if entry is not None:
                    _complete(entry[1], entry[2])
            return done

    for name, f, orig in (("wait", work_wait, wait), ("is_completed", work_is_completed,
                                                         is_completed)):
        f.__name__ = name
        f.__doc__ = getattr(orig, "__doc__", None)
        f.__ccrun_wrapped__ = orig
    work_type.wait = work_wait
    work_type.is_completed = work_is_completed


def _track(work, slot, seq):
    """An async call's Work: completed when its wait() returns."""
    if len(_pending) >= _PENDING_MAX:  # Works nobody waits for: forget the oldest
        _pending.pop(next(iter(_pending)))
    _pending[id(work)] = (work, slot, seq)


def _complete(slot, seq):
    if seq > slot.done:
        slot.done = seq
        now = _gettime(_CLOCK)
        waited = now - _i64[slot.i_issued_ns]  # this call's, unless calls overlap
        if waited > 0:
            slot.wait_us = wait_us = (slot.wait_us + waited // 1000) & 0xFFFFFFFF
            _u32[slot.i_wait_us] = wait_us
        _i64[slot.i_completed_ns] = now
        _u64[slot.i_completed] = seq
        if seq == 1:
            mark("collective")


def _param_index(fn, name):
    import inspect
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return params.index(name) if name in params else None


def _numel(x):
    if x is None:
        return 0
    if isinstance(x, (list, tuple)):
        return sum(t.numel() for t in x)
    return x.numel()


def _wrap(hook, fn, op_name, count_name, always_async, check_guard, set_guard):
    """The wrapper of one collective. Only a collective that another one calls (check_guard)
    looks at the thread's nesting flag, and only one that calls another (set_guard) sets it: the
    others, nearly all, pay nothing for it."""
    import functools
    group_at = _param_index(fn, "group")
    if group_at is None:
        return None
    count_at = _param_index(fn, count_name) if count_name else None
    async_at = None if always_async else _param_index(fn, "async_op")
    op = OPS[op_name]
    native = _load_native()
    if native is not None:
        collective = native.Collective(
            fn, hook, hook.slot_for, _first_collective, op, group_at,
            -1 if count_at is None else count_at, count_name if count_at is not None else None,
            -1 if async_at is None else async_at, always_async, check_guard, set_guard)
        functools.update_wrapper(collective, fn)
        collective.__ccrun_wrapped__ = fn
        return collective
    tls, slots, slot_for, track = hook.tls, hook.slots, hook.slot_for, hook.track
    u32, u64, i64, gettime, clock = _u32, _u64, _i64, _gettime, _CLOCK

    @functools.wraps(fn)
    def collective(*args, **kwargs):
        if check_guard and tls.busy:
            return fn(*args, **kwargs)
        try:
            group = args[group_at] if len(args) > group_at else kwargs.get("group")
            slot = slots.get(group)
            if slot is None:
                slot = slot_for(group)
            if slot:
                if count_at is None:
                    count = 0
                else:
                    x = args[count_at] if len(args) > count_at else kwargs.get(count_name)
                    try:
                        count = x.numel()
                    except AttributeError:
                        count = _numel(x)
                i_op, i_count, i_issued_ns, i_issued, i_completed_ns, i_completed = slot.index
                seq = slot.seq + 1
                slot.seq = seq
                if slot.op != op:
                    slot.op = u32[i_op] = op
                if slot.count != count:
                    slot.count = u64[i_count] = count
                i_calls = slot.i_calls
                if i_calls is not None:  # u32, wrapping as progress.h's counters do
                    u32[i_calls + op] = (u32[i_calls + op] + 1) & 0xFFFFFFFF
                i64[i_issued_ns] = issued_ns = gettime(clock)
                u64[i_issued] = seq
        except Exception:
            slot = None
        if set_guard:
            tls.busy = True
            try:
                result = fn(*args, **kwargs)
            finally:
                tls.busy = False
        else:
            result = fn(*args, **kwargs)
        if slot:
            if result is not None and (always_async or (
                    args[async_at] if async_at is not None and len(args) > async_at
                    else kwargs.get("async_op", False))):
                if track:
                    _track(result, slot, seq)
                    return result
            if seq > slot.done:  # _complete, inline
                slot.done = seq
                i64[i_completed_ns] = now = gettime(clock)
                u64[i_completed] = seq
                slot.wait_us = wait_us = (slot.wait_us + (now - issued_ns) // 1000) & 0xFFFFFFFF
                u32[slot.i_wait_us] = wait_us
                if seq == 1:
                    mark("collective")
        return result

    collective.__ccrun_wrapped__ = fn
    return collective


def _first_collective():
    mark("collective")


def _calls(fn, names):
    """Which of `names` fn's code calls as module globals (a deprecated alias calling its
    successor: torch 1.13's _all_gather_base calls all_gather_into_tensor)."""
    import dis
    import inspect
    try:
        code = inspect.unwrap(fn).__code__
        return {i.argval for i in dis.get_instructions(code)
                if i.opname == "LOAD_GLOBAL" and i.argval in names}
    except Exception:
        return set(names)  # unknown: guard it


def _patch_torch(c10d):
    """Wraps c10d's collectives in c10d and in torch.distributed (the same wrapper in both, so
    that identity checks such as P2POp's `op in [isend, irecv]` still hold)."""
    if getattr(c10d, "__ccrun_hooked__", False):
        return
    c10d.__ccrun_hooked__ = True
    hook = _Hook(c10d)
    found = {name: getattr(c10d, name) for name in COLLECTIVES
             if callable(getattr(c10d, name, None))
             and not hasattr(getattr(c10d, name), "__ccrun_wrapped__")}
    calls = {name: _calls(fn, set(found) - {name}) for name, fn in found.items()}
    called = set().union(*calls.values())
    work_type = getattr(c10d, "Work", None)
    if work_type is not None and not hasattr(work_type.wait, "__ccrun_wrapped__"):
        try:
            _patch_work(work_type)
            hook.track = True
        except Exception:
            pass
    wrappers = {}
    for name, fn in found.items():
        op_name, count_name, always_async = COLLECTIVES[name]
        w = _wrap(hook, fn, op_name, count_name, always_async, name in called, bool(calls[name]))
        if w is not None:
            wrappers[id(fn)] = (fn, w)
            setattr(c10d, name, w)
    init = _wrap_init(getattr(c10d, "init_process_group", None))
    if init is not None:
        wrappers[id(init.__ccrun_wrapped__)] = (init.__ccrun_wrapped__, init)
        c10d.init_process_group = init
    # torch.distributed normally imports them from c10d after this ran; if it already did, or
    # another module took them by name, replace those too.
    for modname in ("torch.distributed",):
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for name in list(COLLECTIVES) + ["init_process_group"]:
            value = getattr(mod, name, None)
            if value is not None and id(value) in wrappers:
                setattr(mod, name, wrappers[id(value)][1])


# (newer name, older name, the first torch known to read the newer one first): the agent sets
# both (torch 1.13 reads NCCL_ASYNC_ERROR_HANDLING, earlier torch 2.x the TORCH_NCCL_ names of
# the flight recorder), and a torch that reads the newer name warns of the older one ("Environment
# variable ... is deprecated") at every NCCL group or dump.
_SUPERSEDED = (
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", (2, 2)),
    ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", (2, 11)),
    ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", (2, 11)),
)


def drop_superseded_env(torch_version, environ):
    """Drops each older name of _SUPERSEDED where this torch reads the newer one and both say the
    same (os.environ: torch reads the C environment, which it updates); names that differ are
    the user's, and torch says what it reads."""
    try:
        version = tuple(int(x) for x in torch_version.split(".")[:2])
    except ValueError:
        return
    for newer, older, since in _SUPERSEDED:
        value = environ.get(older)
        if version >= since and value is not None and value == environ.get(newer):
            del environ[older]


def _wrap_init(fn):
    """init_process_group, marking the start-up phase "group" when it returns; before, the
    environment torch's groups read is made what this torch expects (drop_superseded_env)."""
    if not callable(fn) or hasattr(fn, "__ccrun_wrapped__"):
        return None
    import functools

    @functools.wraps(fn)
    def init_process_group(*args, **kwargs):
        torch = sys.modules.get("torch")
        drop_superseded_env(getattr(torch, "__version__", ""), os.environ)
        result = fn(*args, **kwargs)
        mark("group")
        return result

    init_process_group.__ccrun_wrapped__ = fn
    return init_process_group


def _torch_imported(torch):
    """torch finished importing: the start-up phase "imports"."""
    mark("imports")


def _group_key(c10d, group):
    """(id, size) of a process group by the id scheme above; None if it has no ranks here."""
    default = c10d._get_default_group()
    if group is None or group is default:
        return 0, c10d.get_world_size()
    if hasattr(c10d, "get_process_group_ranks"):
        ranks = c10d.get_process_group_ranks(group)
    else:
        ranks = list(c10d._pg_group_ranks[group].keys())
    return fnv1a64_ranks(ranks), len(ranks)


_ddp_ordinals = {}  # a group's id -> DDP modules on it given a slot so far
_ddp_watched = None  # a DDP module -> its watched gradient accumulator (weak keys: see _ddp_slot)


def _ddp_slot(module, torch):
    """A DDP module's own slot, made at its first step, as the entry the forward keeps in the
    module's __dict__: (id(module), issued_ns's index, issued's index); issued's index 0: not
    recorded. The entry pickles with the module (torch.save of a DDP module) and a copy, whose
    id differs, makes its own; the watched gradient accumulator, which does not pickle, is kept
    in _ddp_watched instead, for as long as the module lives (it holds its parameter).
    The slot's id: DDP_ID_XOR ^ its group's id ^ its ordinal among this process's DDP modules
    on that group (the same on every rank when every rank makes its DDP modules, or takes their
    first steps, in one order); count: the elements of the parameters DDP reduces, counted once
    here. Every step has the same op and count, so they are written once, here, before the
    first step is issued."""
    global _ddp_watched
    entry = (id(module), 0, 0)
    try:
        c10d = sys.modules[_C10D]
        group_id, size = _group_key(c10d, getattr(module, "process_group", None))
        ordinal = _ddp_ordinals.get(group_id, 0)
        _ddp_ordinals[group_id] = ordinal + 1
        ignore = set(getattr(module, "parameters_to_ignore", ()) or ())
        reduced = [p for name, p in module.module.named_parameters()
                   if p.requires_grad and name not in ignore]
        slot = _new_slot(group_id ^ DDP_ID_XOR ^ ordinal, size)
        if slot:
            import weakref
            i_op, i_count, i_issued_ns, i_issued = slot.index[:4]
            _u32[i_op] = OPS["ddp_step"]
            _u64[i_count] = sum(p.numel() for p in reduced)
            entry = (id(module), i_issued_ns, i_issued)
            accumulator, unwatch = (_watch_backward(slot, reduced[0], torch) if reduced
                                    else (None, None))
            if accumulator is not None:
                if _ddp_watched is None:
                    _ddp_watched = weakref.WeakKeyDictionary()
                _ddp_watched[module] = accumulator
            retire = weakref.finalize(module, _retire_ddp_slot, slot.number, unwatch)
            retire.atexit = False
    except Exception:
        pass
    module.__dict__[_DDP_KEY] = entry
    return entry


def _watch_backward(slot, param, torch):
    """Completes the slot's last issued step when a backward has ended; returns the node it
    hooks (None: the parameter has no gradient accumulator) and what takes the hook off it and
    disarms it. The hook is on the gradient accumulator of one parameter DDP reduces (the
    module's first: the input side, whose gradient comes late in a backward): it runs once
    that gradient is in and queues an autograd final callback, which queues another, which runs
    after DDP's reducer's own end-of-backward callback (queued during the backward) has waited
    for the step's gradient all-reduces. It is
    registered once per module, not once a step: DDP's reducer keeps every parameter's
    accumulator for the module's life, so the same node runs at every backward. A backward with
    no step left to complete (inside no_sync(), say) does nothing. The time from the hook to the
    completion goes to the slot's wait_us: the watched gradient comes last in a backward, so
    what follows is the reducer waiting for the step's last all-reduces, which is where a rank
    faster than a straggler waits for it."""
    queue_callback = torch.autograd.Variable._execution_engine.queue_callback
    u32, u64, i64, gettime, clock = _u32, _u64, _i64, _gettime, _CLOCK
    i_issued, i_completed_ns, i_completed = slot.index[3:]
    i_wait_us = slot.i_wait_us
    native = _load_native()
    if native is not None:
        gradient_accumulated = native.BackwardWatch(queue_callback, i_issued, i_completed_ns,
                                                    i_completed, i_wait_us)
        disarm = gradient_accumulated.disarm
    else:
        armed = [True]
        disarm = armed.clear

        def gradient_accumulated(grad_inputs, grad_outputs):
            seq = u64[i_issued]
            if armed and seq > u64[i_completed]:
                began = gettime(clock)

                def completed():  # the reducer's finalize_backward has returned
                    if armed and seq > u64[i_completed]:
                        i64[i_completed_ns] = now = gettime(clock)
                        u32[i_wait_us] = (u32[i_wait_us] + (now - began) // 1000) & 0xFFFFFFFF
                        u64[i_completed] = seq
                try:
                    queue_callback(lambda: queue_callback(completed))
                except Exception:
                    pass

    with torch.enable_grad():
        grad_fn = param.view_as(param).grad_fn
    accumulator = grad_fn.next_functions[0][0] if grad_fn is not None else None
    if accumulator is None:
        return None, None
    handle = accumulator.register_hook(gradient_accumulated)

    def unwatch():
        disarm()
        handle.remove()
    return accumulator, unwatch


def _patch_ddp(ddp_module):
    """Wraps DistributedDataParallel.forward: a forward that will reduce gradients in its backward
    (training mode, grad enabled, not inside no_sync()) is one DDP step in the module's slot (the
    agent counts a rank's steps as the record's steps plus its DDP slots' issued, so the forward
    writes only the slot). The step is issued when the forward begins and completed when its
    backward ends, after the reducer's own end-of-backward callback has waited for the step's
    gradient all-reduces (they run in C++, out of the hook's reach; see _watch_backward). A step
    whose backward never comes (or never reaches the watched parameter) is left uncompleted:
    the agent reads a DDP slot's completed as at least issued - 1. What a step adds to wait_us
    is its backward's tail only (see _watch_backward), not the forward and backward, which
    are the rank's own work as much as waiting for its peers.
    A forward costs two record writes and nothing else: a few Python operations are each a
    visible part of a small forward."""
    cls = getattr(ddp_module, "DistributedDataParallel", None)
    if cls is None or hasattr(cls.forward, "__ccrun_wrapped__"):
        return
    import functools
    forward = cls.forward
    torch = ddp_module.torch
    grad_enabled = torch.is_grad_enabled
    u64, i64, gettime, clock = _u64, _i64, _gettime, _CLOCK
    key = _DDP_KEY
    native = _load_native()
    if native is not None:
        ddp_forward = native.DdpForward(forward, grad_enabled, key, _ddp_slot, torch,
                                        lambda: mark("step"))
        functools.update_wrapper(ddp_forward, forward)
        ddp_forward.__ccrun_wrapped__ = forward
        cls.forward = ddp_forward
        return

    @functools.wraps(forward)
    def ddp_forward(self, *inputs, **kwargs):
        try:
            if self.training and self.require_backward_grad_sync and grad_enabled():
                entry = self.__dict__.get(key)
                if entry is None or entry[0] != id(self):
                    entry = _ddp_slot(self, torch)
                i_issued = entry[2]
                if i_issued:
                    seq = u64[i_issued] + 1
                    i64[entry[1]] = gettime(clock)  # issued_ns, then issued
                    u64[i_issued] = seq
                    if seq == 1:
                        mark("step")
        except Exception:
            pass
        return forward(self, *inputs, **kwargs)

    ddp_forward.__ccrun_wrapped__ = forward
    cls.forward = ddp_forward


_PATCHES = {_C10D: _patch_torch, _DDP: _patch_ddp, "torch": _torch_imported}


class _TorchFinder:
    """On sys.meta_path until the modules in _PATCHES (torch.distributed.distributed_c10d,
    torch.nn.parallel.distributed) are imported: lets each import go on as it would, then patches
    the module right after it executed."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        self.names.discard(name)
        if not self.names:
            self.remove()
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        patch = _PATCHES[name]

        def exec_and_hook(module):
            exec_module(module)
            if getattr(module, "__name__", None) == name:
                try:
                    patch(module)
                except Exception:
                    pass

        try:
            loader.exec_module = exec_and_hook  # this module's own loader instance
        except (AttributeError, TypeError):
            pass
        return spec

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def install(started_ns=None, warm=False):
    """The start-up hook: inert unless CCRUN_PROGRESS_FILE names a valid record this process
    may own. `started_ns`: when the program began (CLOCK_MONOTONIC ns; now by default);
    `warm`: it was forked from a warm template that had imported its modules. Never raises."""
    global _owner
    try:
        if _owner or not _map_record() or not _claim():
            return False
        _owner = True
        mark("interpreter", started_ns)
        if warm:
            mark("imports", started_ns)
            _u32[(STARTUP_BASE + 8 * len(PHASES)) // 4] |= STARTED_WARM
        try:
            _install_dump()
        except Exception:
            pass
        later = []
        for name, patch in _PATCHES.items():
            module = sys.modules.get(name)
            if module is not None:
                try:
                    patch(module)
                except Exception:
                    pass
            else:
                later.append(name)
        if later:
            sys.meta_path.insert(0, _TorchFinder(later))
        return True
    except Exception:
        return False
