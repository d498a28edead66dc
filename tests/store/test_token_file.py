"""ccrun-rendezvous --token-file and a client's CCRUN_STORE_TOKEN_FILE read the
same file by one rule (include/ccrun/token_file.h): a secret followed by a
space and a newline is accepted by both, so the client authenticates."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from helpers import binary, start_daemon  # noqa: E402


def status(daemon, token_path):
    env = dict(os.environ, CCRUN_STORE_TOKEN_FILE=str(token_path))
    return subprocess.run([binary("launcher", "ccrun"), "status", "--rdzv-endpoint",
                           f"127.0.0.1:{daemon.port}", "--rdzv-id", "nosuchjob"],
                          capture_output=True, text=True, timeout=60, env=env)


def test_daemon_and_client_accept_a_secret_with_trailing_space(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret \n")
    with start_daemon("--host", "127.0.0.1", "--token-file", str(token)) as d:
        r = status(d, token)
        # Authenticated: the store answers that it has no such job.
        assert r.returncode == 3, r.stderr
        assert "has no job 'nosuchjob'" in r.stderr, r.stderr
        wrong = tmp_path / "wrong"
        wrong.write_text("other\n")
        r = status(d, wrong)
        # Refused before any read (ccrun status exits 3 for any store error too).
        assert "refused the token" in r.stderr and "has no job" not in r.stderr, r.stderr


def test_daemon_refuses_a_two_line_token_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\nsecond\n")
    p = subprocess.run([binary("store", "ccrun-rendezvous"), "--port", "0",
                        "--token-file", str(token)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert f'--token-file "{token}"' in p.stderr and "more than one line" in p.stderr, p.stderr


def assert_names_the_directory(r, source, path):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f'{source} "{path}": is a directory; give the file that holds the secret' in r.stderr
    assert "basic_filebuf" not in r.stderr and "terminate" not in r.stderr, r.stderr


def test_a_token_file_that_is_a_directory_is_a_clean_error(tmp_path):
    p = subprocess.run([binary("store", "ccrun-rendezvous"), "--port", "0",
                        "--token-file", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert_names_the_directory(p, "--token-file", tmp_path)
    with start_daemon("--host", "127.0.0.1") as d:
        assert_names_the_directory(status(d, tmp_path), "CCRUN_STORE_TOKEN_FILE", tmp_path)
    r = subprocess.run([binary("launcher", "ccrun"), "--standalone", "--no-python", "/bin/true"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CCRUN_STORE_TOKEN_FILE=str(tmp_path)))
    assert f'CCRUN_STORE_TOKEN_FILE "{tmp_path}": is a directory' in r.stderr, r.stderr
    assert "basic_filebuf" not in r.stderr and r.returncode == 2, r.stderr


def agent_on(daemon, run_id, env):
    return subprocess.run([binary("launcher", "ccrun"), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                           f"127.0.0.1:{daemon.port}", "--rdzv-id", run_id, "--rdzv-conf",
                           "join_timeout=5", "--no-python", "/bin/true"],
                          capture_output=True, text=True, timeout=60, env=env)


def test_a_refused_or_missing_token_is_said_with_the_job_and_the_fix(tmp_path):
    token, wrong = tmp_path / "token", tmp_path / "wrong"
    token.write_text("secret\n")
    wrong.write_text("other\n")
    plain = {k: v for k, v in os.environ.items() if k != "CCRUN_STORE_TOKEN_FILE"}
    with start_daemon("--host", "127.0.0.1", "--token-file", str(token)) as d:
        r = agent_on(d, "job7", dict(plain, CCRUN_STORE_TOKEN_FILE=str(wrong)))
        assert r.returncode == 1 and "refused the token" in r.stderr, r.stderr
        assert "job 'job7' failed" in r.stderr and "job 'none'" not in r.stderr, r.stderr
        hint = "set CCRUN_STORE_TOKEN_FILE to that file"
        r = agent_on(d, "job8", plain)
        assert r.returncode == 1 and hint in r.stderr, r.stderr
        assert "job 'job8' failed" in r.stderr, r.stderr
        r = subprocess.run([binary("launcher", "ccrun"), "status", "--rdzv-endpoint",
                            f"127.0.0.1:{d.port}", "--rdzv-id", "job8"],
                           capture_output=True, text=True, timeout=60, env=plain)
        assert r.returncode == 3 and hint in r.stderr, r.stderr
