"""Drives every type of the hook's C module (agent/python/_ccrun_hook.c) with stand-ins for
torch, in whatever Python runs it, and prints what each wrote to a progress record as JSON:
how test_python_hook.py checks the stable-ABI build in Pythons that have no torch here.

Usage: python3 hook_module_check.py RECORD   (the module's folder on PYTHONPATH)"""
import json
import mmap
import struct
import sys

import _ccrun_hook as native

record = open(sys.argv[1], "r+b")
view = memoryview(mmap.mmap(record.fileno(), 4096))
native.attach(view)
u64, u32 = view.cast("Q"), view.cast("I")
out = {"module": native.__file__.rsplit("/", 1)[-1]}


class Tensor:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n


class Work:
    def wait(self):
        return True


class Hook:  # what ccrun_progress's hook object offers the Collective
    track = True
    slots = {}


firsts = []
hook = Hook()
world = native.Slot(0)


def slot_for(group):
    hook.slots[group] = world
    return world


def all_reduce(tensor, op=None, group=None, async_op=False):
    return Work() if async_op else None


Work.wait = native.WorkMethod(Work.wait, lambda: firsts.append("wait"), False)
wrapped = native.Collective(all_reduce, hook, slot_for, lambda: firsts.append("collective"), 1,
                            2, 0, "tensor", 3, False, False, False)
wrapped(Tensor(4))
wrapped(tensor=[Tensor(2), Tensor(3)], group=None)  # keywords, a list of tensors
work = wrapped(Tensor(6), async_op=True)
i_op, i_count, i_issued_ns, i_issued, i_completed_ns, i_completed = world.index
out["async"] = [u64[i_issued], u64[i_completed]]  # issued, not yet completed
work.wait()
out["collectives"] = {"issued": u64[i_issued], "completed": u64[i_completed],
                      "op": u32[i_op], "count": u64[i_count], "op_calls": u32[3200 // 4],
                      "repr": repr(wrapped).startswith("<ccrun hook of <function all_reduce")}

# A DDP step: the forward as a class attribute (a bound method, as DDP.forward is), its entry
# kept in the module's __dict__; the backward's watch queues a completion that queues itself
# once more, as it does behind DDP's reducer.
ddp = native.Slot(1)
d_op, d_count, d_issued_ns, d_issued, d_completed_ns, d_completed = ddp.index


class Module:
    training = True
    require_backward_grad_sync = True

    def forward(self, x):
        return x * 2


def make_entry(module, torch):  # ccrun_progress._ddp_slot's part: at a module's first step
    entries.append(module)
    module.__dict__["_ccrun_ddp"] = (id(module), d_issued_ns, d_issued)
    return module.__dict__["_ccrun_ddp"]


queued, entries = [], []
Module.forward = native.DdpForward(Module.forward, lambda: True, "_ccrun_ddp", make_entry, None,
                                   lambda: firsts.append("step"))
watch = native.BackwardWatch(queued.append, d_issued, d_completed_ns, d_completed,
                             (64 + 64 * 1 + 36) // 4)
module = Module()
out["forward"] = [module.forward(21), Module.forward(module, 1)]
watch()
while queued:
    queued.pop(0)()
out["ddp"] = {"issued": u64[d_issued], "completed": u64[d_completed], "entries": len(entries)}
out["firsts"] = firsts
out["numbers"] = [world.number, ddp.number]
print(json.dumps(out))
