"""torchrun from Debian's python3-torch 1.13, for benchmarks only. On Python
3.11, 1.13's Std.from_str returns None for "0" (iterating an IntFlag no
longer yields its zero member), which breaks every launch; this wrapper
fixes that one function at run time and runs torch.distributed.run."""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    if re.fullmatch(r"\d", vm):
        return cls(int(vm))
    return {int(k): cls(int(v)) for k, v in (item.split(":") for item in vm.split(","))}


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402

sys.exit(main())
