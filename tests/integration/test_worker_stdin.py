"""Workers read ccrun's stdin, as torchrun's read torchrun's: pdb (`breakpoint()`) and input()
work in a worker, cold and warm, from a pipe and from a terminal. At a terminal, a lone worker is
lent it while it runs (it is in a process group of its own, and would be stopped by SIGTTIN
reading from the background); the terminal's Ctrl-C then reaches that worker and stops the job
as a Ctrl-C to ccrun does. Every wait is for a line or a screen, with a deadline."""
import os
import shlex
import subprocess

import pytest

from helpers import Tmux, binary

PYTHON = "/usr/bin/python3"
MODES = [pytest.param([], id="cold"), pytest.param(["--warm-start"], id="warm")]

PDB_SCRIPT = """
import os
x = 41
breakpoint()
print("AFTER", os.environ["RANK"], x, flush=True)
"""


def ccrun_command(mode, *args):
    return [binary("launcher", "ccrun"), "--standalone"] + mode + list(args)


def run_one_worker(mode, path, stdin_text):
    """ccrun running `path` in one worker, with `stdin_text` on its stdin (a pipe)."""
    env = dict(os.environ, PYTHON_EXEC=PYTHON)
    env.pop("PET_WARM_START", None)
    return subprocess.run(ccrun_command(mode, "--nproc-per-node", "1", str(path)), env=env,
                          input=stdin_text, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", MODES)
def test_pdb_in_a_worker_reads_the_commands_given_to_ccrun(tmp_path, mode):
    path = tmp_path / "pdb_job.py"
    path.write_text(PDB_SCRIPT)
    r = run_one_worker(mode, path, "p x + 1\nx = 7\nc\n")
    assert r.returncode == 0, r.stderr
    assert "42" in r.stdout, r.stdout
    assert "AFTER 0 7" in r.stdout, r.stdout
    assert "BdbQuit" not in r.stderr, r.stderr


@pytest.mark.parametrize("mode", MODES)
def test_input_reads_ccruns_stdin_in_every_worker(tmp_path, mode):
    path = tmp_path / "reads.py"
    path.write_text("import os, sys\nprint('READ', os.environ['RANK'], repr(sys.stdin.read()))\n")
    r = run_one_worker(mode, path, "hello\n")
    assert r.returncode == 0, r.stderr
    assert "READ 0 'hello\\n'" in r.stdout, r.stdout


@pytest.mark.parametrize("mode", MODES)
def test_pdb_at_a_terminal_in_a_one_worker_job(tmp_path, mode):
    path = tmp_path / "pdb_job.py"
    path.write_text(PDB_SCRIPT)
    command = " ".join(shlex.quote(a) for a in
                       ccrun_command(mode, "--nproc-per-node", "1", str(path)))
    t = Tmux(f"env -u PET_WARM_START PYTHON_EXEC={PYTHON} {command}")
    try:
        t.wait_for(lambda s: "(Pdb)" in s or "pdb_job.py" in s, "a pdb prompt")
        t.keys("p x + 1", "Enter")
        t.wait_for(lambda s: "42" in s, "pdb's answer")
        t.keys("c", "Enter")
        screen = t.wait_for(lambda s: "TOP_EXIT=" in s, "ccrun's exit")
        assert "AFTER 0 41" in screen, screen
        assert "TOP_EXIT=0" in screen, screen
    finally:
        t.close()


def test_ctrl_c_at_the_terminal_stops_a_one_worker_job(tmp_path):
    path = tmp_path / "waits.py"
    path.write_text("import time\nprint('WAITING', flush=True)\ntime.sleep(120)\n")
    command = " ".join(shlex.quote(a) for a in
                       ccrun_command([], "--nproc-per-node", "1", "--max-restarts", "3",
                                     str(path)))
    t = Tmux(f"env -u PET_WARM_START PYTHON_EXEC={PYTHON} {command}")
    try:
        t.wait_for(lambda s: "WAITING" in s, "the worker's first line")
        t.keys("C-c")
        screen = t.wait_for(lambda s: "TOP_EXIT=" in s, "ccrun's exit")
        assert "TOP_EXIT=130" in screen, screen
        assert "restart" not in screen.split("WAITING", 1)[1].lower(), screen
    finally:
        t.close()
