"""--mpi end to end: an MPI program built with MPICH's mpicc, started by the
real ccrun with no mpiexec, finds MPI_COMM_WORLD equal to ccrun's world
(agent/mpi/pmi_server.h serves its PMI-1 requests); a restart gives the new
attempt a fresh key-value space; MPI_Abort is the rank's failure with its
code. Skipped where mpicc is not installed (scripts/setup.sh installs it)."""
import os
import re
import shutil
import signal
import subprocess

import pytest

from helpers import communicate_all, free_port, run_ccrun, spawn_ccrun

HERE = os.path.dirname(os.path.abspath(__file__))
MPICC = shutil.which("mpicc")
pytestmark = pytest.mark.skipif(MPICC is None, reason="no mpicc (apt-get install mpich libmpich-dev)")

LINE = re.compile(r"mpi rank (\d+) size (\d+) sum (\d+) attempt (\d+) (\w+)")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """tests/integration/mpi_allreduce.c, built with mpicc."""
    exe = str(tmp_path_factory.mktemp("mpi") / "mpi_allreduce")
    subprocess.run([MPICC, "-O1", "-o", exe, os.path.join(HERE, "mpi_allreduce.c")], check=True)
    return exe


def ranks_ok(stdout, size, attempt=0):
    """The ranks whose line says the all-reduce summed right, in a world of `size`."""
    want = size * (size + 1) // 2
    seen = set()
    for m in LINE.finditer(stdout):
        rank, n, total, att, verdict = m.groups()
        assert (int(n), int(total), int(att), verdict) == (size, want, attempt, "ok"), m.group(0)
        seen.add(int(rank))
    return seen


def test_one_node_four_ranks_one_world(program):
    r = run_ccrun("--mpi", "--master-port", str(free_port()), "--no-python", "--nproc-per-node", "4",
                  program, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert ranks_ok(r.stdout, 4) == {0, 1, 2, 3}, r.stdout


def test_two_nodes_of_two_one_world(program):
    """Two agents stand for two nodes: the barrier and the keys go through the
    job's store, and PMI_process_mapping says (vector,(0,2,2))."""
    port = str(free_port())
    common = ["--mpi", "--nnodes", "2", "--nproc-per-node", "2", "--master-port", port]
    procs = [spawn_ccrun(*common, "--node-rank", str(n), "--no-python", program) for n in (0, 1)]
    outs = communicate_all(procs, 120, kill=lambda p: os.killpg(p.pid, signal.SIGKILL))
    seen = set()
    for rc, out, err in outs:
        assert rc == 0, err[-3000:]
        seen |= ranks_ok(out, 4)
    assert seen == {0, 1, 2, 3}


def test_restart_gets_a_fresh_world(program):
    """Rank 1 exits 1 before MPI_Init on attempt 0; attempt 1's ranks meet in
    a key-value space of their own and succeed."""
    r = run_ccrun("--mpi", "--master-port", str(free_port()), "--max-restarts", "1", "--no-python",
                  "--nproc-per-node", "4", program, env={"FAIL_RANK": "1"}, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rank 1 fails on purpose" in r.stdout + r.stderr
    assert ranks_ok(r.stdout, 4, attempt=1) == {0, 1, 2, 3}, r.stdout


def test_mpi_abort_is_the_ranks_failure(program):
    r = run_ccrun("--mpi", "--master-port", str(free_port()), "--no-python", "--nproc-per-node", "4",
                  program, env={"MPI_ABORT_RANK": "2"}, timeout=120)
    assert r.returncode != 0
    assert "rank 2 called MPI_Abort with error code 7" in r.stderr, r.stderr[-3000:]
    report = r.stderr[r.stderr.index("Root cause"):]
    assert re.search(r"rank\s*: 2 ", report), report
    assert "exit code 7" in report and "MPI_Abort" in report, report


def test_mpi_and_warm_start_do_not_go_together(program):
    r = run_ccrun("--mpi", "--warm-start", "--nproc-per-node", "1", "--no-python", program,
                  timeout=60)
    assert r.returncode != 0
    assert "--warm-start" in r.stderr and "--mpi" in r.stderr, r.stderr


def test_an_mpich_program_without_mpi_is_refused_not_run_as_worlds_of_one(program):
    r = run_ccrun("--nproc-per-node", "2", "--no-python", program, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "links an MPI of the MPICH family (libmpi" in r.stderr, r.stderr
    assert "add --mpi" in r.stderr
    assert "mpi rank" not in r.stdout  # nothing ran
    # One rank is one world: left alone.
    r = run_ccrun("--nproc-per-node", "1", "--master-port", str(free_port()), "--no-python", program,
                  timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]


def test_an_open_mpi_program_is_refused_with_what_to_do(tmp_path):
    """A program that links Open MPI's libmpi.so.40 (a stand-in library of that name: Open MPI
    is not installed here) takes its world from PMIx: refused, with or without --mpi."""
    (tmp_path / "fake.c").write_text("int MPI_Init(int *c, char ***v) { return 0; }\n")
    (tmp_path / "prog.c").write_text("int MPI_Init(int *, char ***);\n"
                                     "int main(int c, char **v) { return MPI_Init(&c, &v); }\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libmpi.so.40", "-o",
                    str(tmp_path / "libmpi.so.40"), str(tmp_path / "fake.c")], check=True)
    subprocess.run([cc, "-o", str(tmp_path / "prog"), str(tmp_path / "prog.c"),
                    str(tmp_path / "libmpi.so.40")], check=True)
    for extra in ((), ("--mpi",)):
        r = run_ccrun(*extra, "--nproc-per-node", "2", "--no-python", str(tmp_path / "prog"),
                      timeout=60)
        assert r.returncode == 2, r.stderr
        assert "links Open MPI (libmpi.so.40)" in r.stderr, r.stderr
        assert "mpirun" in r.stderr and "MPICH's mpicc" in r.stderr
