"""The same command run again on a store that outlives its jobs (ccrun-rendezvous, as
docs/store.md recommends one per team): once the id's run has ended, a node that arrives for it
starts nothing and exits 5 (kExitAlreadyRan), saying how and when that run ended and how to run
again, instead of taking the old run's end for its own (docs/store.md, "Running a job id
again"). A node that waited as a hot spare while the run was live still exits 0 when it
succeeds, saying it ran nothing."""
import json
import os
import subprocess

from helpers import binary, free_port, read_stderr_until, run_ccrun, spawn_ccrun, start_daemon

ALREADY_RAN = 5


def job(port, run_id, *program):
    return ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-id", run_id, "--no-python", *program]


def test_an_id_that_succeeded_is_refused_when_run_again():
    with start_daemon("--host", "127.0.0.1") as d:
        first = run_ccrun(*job(d.port, "job7", "sh", "-c", "echo the program ran"), timeout=60)
        assert first.returncode == 0, first.stderr
        assert "the program ran" in first.stdout
        again = run_ccrun(*job(d.port, "job7", "sh", "-c", "echo the program ran"), timeout=60)
        assert again.returncode == ALREADY_RAN, again.stderr
        assert "the program ran" not in again.stdout
        err = again.stderr
        assert "the job id 'job7' already ran on this store: its previous run ended " in err
        assert " UTC) and succeeded; nothing was started here." in err
        assert "use a new --rdzv-id, or wait until the store forgets it" in err
        assert "--finished-job-ttl" in err
        assert "job 'job7' was not run (its id already ran) (exit 5)" in err
        # The old run's records stay readable.
        st = subprocess.run([binary("launcher", "ccrun"), "status", "--rdzv-endpoint",
                             f"127.0.0.1:{d.port}", "--rdzv-id", "job7", "--json"],
                            capture_output=True, text=True, timeout=30)
        assert json.loads(st.stdout)["state"] == "finished", st.stdout + st.stderr
        # A new id runs.
        fresh = run_ccrun(*job(d.port, "job8", "sh", "-c", "echo the program ran"), timeout=60)
        assert fresh.returncode == 0, fresh.stderr
        assert "the program ran" in fresh.stdout


def test_an_id_that_failed_is_refused_when_run_again_with_the_previous_runs_reason():
    with start_daemon("--host", "127.0.0.1") as d:
        first = run_ccrun(*job(d.port, "job7", "sh", "-c", "exit 3"), timeout=60)
        assert first.returncode == 1, first.stderr
        again = run_ccrun(*job(d.port, "job7", "sh", "-c", "echo the program ran"), timeout=60)
        assert again.returncode == ALREADY_RAN, again.stderr
        assert "the program ran" not in again.stdout
        err = again.stderr
        assert "the job id 'job7' already ran on this store: its previous run ended " in err
        assert " and failed (the previous run's reason: " in err
        assert "nothing was started here" in err
        assert "use a new --rdzv-id" in err


def test_a_spare_that_waited_while_the_run_was_live_exits_0_having_run_nothing(tmp_path):
    go = tmp_path / "go"
    program = ["sh", "-c", f'echo up $$; while [ ! -e {go} ]; do sleep 0.05; done']
    with start_daemon("--host", "127.0.0.1") as d:
        running = spawn_ccrun(*job(d.port, "live", *program))
        try:
            assert "up" in running.stdout.readline()  # its program runs
            spare = spawn_ccrun(*job(d.port, "live", *program))
            try:
                read_stderr_until(spare, "waits as a hot spare", 60)
                go.touch()
                out, rest = spare.communicate(timeout=60)
                assert spare.returncode == 0, rest
                assert "up" not in out
                assert "the job succeeded while this node waited as a hot spare; this node ran " \
                       "nothing" in rest
                assert "succeeded without this node (it ran nothing) (exit 0)" in rest
            finally:
                if spare.poll() is None:
                    os.killpg(spare.pid, 9)
            _, err = running.communicate(timeout=60)
            assert running.returncode == 0, err
        finally:
            if running.poll() is None:
                os.killpg(running.pid, 9)
