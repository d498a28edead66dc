"""ccrun run as a torchrun user runs torchrun (issue 20): each case is one
behaviour torchrun 2.x has (its agent, api.py and local_elastic_agent.py, and
its own tests, test_run.py and local_elastic_agent_test.py), checked on the
real binary. Two agents on one machine stand for two nodes."""
import os
import signal
import sys

from helpers import communicate_all, free_port, parse_env_lines, run_ccrun, spawn_ccrun

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
PRINT_ENV = os.path.join(HERE, "print_env.py")


def agents(args_per_node, timeout=120):
    """Starts one ccrun per entry (its arguments), returns (rc, out, err) of each."""
    procs = [spawn_ccrun(*args) for args in args_per_node]
    return communicate_all(procs, timeout, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))


def envs_of(outs):
    envs = {}
    for rc, out, err in outs:
        assert rc == 0, err
        envs.update(parse_env_lines(out))
    return envs


# Item 4: torchrun's macros.substitute on every argument after the program
# ("$$" excepted: kept as written, docs/cli.md "Differences from torchrun").
def test_local_rank_macro_in_the_arguments():
    r = run_ccrun("--master-port", str(free_port()), "--nproc-per-node", "2", "--no-python",
                  "/bin/echo", "--local_rank=${local_rank}", "$local_rank", "pid$$", "${LOCAL_RANK}")
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == ["[0]:--local_rank=0 0 pid$$ ${LOCAL_RANK}",
                     "[1]:--local_rank=1 1 pid$$ ${LOCAL_RANK}"]

