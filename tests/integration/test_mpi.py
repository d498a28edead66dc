"""--mpi end to end: an MPI program built with MPICH's mpicc, started by the
real ccrun with no mpiexec, finds MPI_COMM_WORLD equal to ccrun's world
(agent/mpi/pmi_server.h serves its PMI-1 requests); a restart gives the new
attempt a fresh key-value space; MPI_Abort is the rank's failure with its
code; the ranks report their MPI calls through libccrun_mpi_progress.so, so a
hung or desynchronised MPI job gets the verdict a torch job gets. Skipped
where mpicc is not installed (scripts/setup.sh installs it)."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from helpers import binary, communicate_all, free_port, run_ccrun, spawn_ccrun

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


@pytest.fixture(scope="module")
def hang_program(tmp_path_factory):
    """tests/integration/mpi_hang.c, built with mpicc; skipped where the PMPI library is not built."""
    binary("modules", "libccrun_mpi_progress.so")
    exe = str(tmp_path_factory.mktemp("mpi") / "mpi_hang")
    subprocess.run([MPICC, "-O1", "-o", exe, os.path.join(HERE, "mpi_hang.c")], check=True)
    return exe


def hung_mpi_job(program, log_dir, **env):
    """4 ranks of `program` with a 3 s hang timeout and no restart: stderr and the failure report."""
    r = run_ccrun("--mpi", "--master-port", str(free_port()), "--hang-timeout", "3",
                  "--max-restarts", "0", "--stop-grace", "2", "--log-dir", str(log_dir),
                  "--no-python", "--nproc-per-node", "4", program,
                  env={k: str(v) for k, v in env.items()}, timeout=120)
    assert r.returncode != 0, r.stderr[-3000:]
    [path] = glob.glob(os.path.join(str(log_dir), "*", "failure_report.json"))
    with open(path) as f:
        return r.stderr, json.load(f)


def test_a_rank_that_stops_before_its_allreduce_is_named_with_the_call(hang_program, tmp_path):
    err, rep = hung_mpi_job(hang_program, tmp_path, SLEEP_RANK=1, SLEEP_BEFORE=20)
    assert re.search(r"the job is hung \(--hang-timeout 3s\): rank 1 has not issued all_reduce #20 "
                     r"of the world group \(1 elements\), which ranks 0,2,3 have waited in for "
                     r"[\d.]+s", err), err[-3000:]
    for rank in (0, 2, 3):
        assert re.search(rf"rank {rank} \(host \S+, node 0, pid \d+\): waiting in all_reduce #20", err)
    assert re.search(r"rank 1 \(host \S+, node 0, pid \d+\): not in a collective; last returned "
                     r"from all_reduce #19", err), err[-3000:]
    assert rep["hang"]["culprits"] == [1]
    assert rep["root_cause"]["cause"] == "hang" and rep["root_cause"]["rank"] == 1


def test_a_broadcast_where_the_others_allreduce_is_a_desync(hang_program, tmp_path):
    err, rep = hung_mpi_job(hang_program, tmp_path, DESYNC_RANK=2, DESYNC_AT=10)
    assert re.search(r"the job is hung \(--hang-timeout 3s\): rank 2 issued broadcast \(1 elements\) "
                     r"as call #10 of the world group, where ranks 0,1,3 issued all_reduce \(1 "
                     r"elements\): a desync; rank 2 made one all_reduce fewer \(9 against 10\)",
                     err), err[-3000:]
    assert rep["hang"]["culprits"] == [2]


def test_a_rank_behind_in_a_communicator_of_its_own_is_named_with_the_communicator(hang_program,
                                                                                   tmp_path):
    """Pairs {0,1} and {2,3} (MPI_Comm_split): a slot per communicator, the same id on both
    members; rank 2 stops, its partner waits, the other pair ends."""
    err, rep = hung_mpi_job(hang_program, tmp_path, PAIRS=1, SLEEP_RANK=2, SLEEP_BEFORE=10)
    assert re.search(r"the job is hung \(--hang-timeout 3s\): rank 2 has not issued all_reduce #10 "
                     r"of group [0-9a-f]+ \(2 ranks\) \(1 elements\), which rank 3 has waited in "
                     r"for [\d.]+s", err), err[-3000:]
    assert rep["hang"]["culprits"] == [2]


def test_the_library_is_preloaded_with_mpi_only_before_the_users_preload(hang_program):
    show = ["--no-python", "--nproc-per-node", "1", "/bin/sh", "-c", 'echo "preload=$LD_PRELOAD"']
    r = run_ccrun("--mpi", "--master-port", str(free_port()), *show, env={"LD_PRELOAD": "libm.so.6"},
                  timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"preload=(\S+)", r.stdout)
    assert m, r.stdout
    first, rest = m.group(1).split(":", 1)
    assert first.endswith("/libccrun_mpi_progress.so") and os.path.exists(first), m.group(1)
    assert rest == "libm.so.6"
    r = run_ccrun("--master-port", str(free_port()), *show, env={"LD_PRELOAD": "libm.so.6"},
                  timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "preload=libm.so.6\n" in r.stdout, r.stdout
