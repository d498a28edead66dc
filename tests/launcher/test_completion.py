"""ccrun's bash completion (`ccrun --print-completion bash`, installed by the
package), run in bash: flags, the fixed values of the flags that have them
(from the flag table), and nothing once the program is named."""
import os
import subprocess

import pytest

from helpers import bash_complete, build_dir, run_ccrun


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    r = run_ccrun("--print-completion", "bash")
    assert r.returncode == 0, r.stderr
    path = tmp_path_factory.mktemp("completion") / "ccrun"
    path.write_text(r.stdout)
    return str(path)


def test_registered_for_ccrun(script):
    r = subprocess.run(["bash", "--norc", "-c", f"source {script} && complete -p ccrun"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "complete -o default -F _ccrun ccrun"


@pytest.mark.parametrize("words,offered", [
    # Fixed values: the backends' name table, the nproc keywords, the start methods.
    (["ccrun", "--rdzv-backend", ""], ["c10d", "etcd", "static"]),
    (["ccrun", "--nnodes", "2", "--rdzv_backend", "s"], ["static"]),
    (["ccrun", "--rdzv-backend", "=", "e"], ["etcd"]),  # --rdzv-backend=e
    (["ccrun", "--rdzv-backend", "="], ["c10d", "etcd", "static"]),
    (["ccrun", "--nproc-per-node", ""], ["auto", "cpu", "gpu"]),
    (["ccrun", "--start-method", "f"], ["fork", "forkserver"]),
    (["ccrun", "--print-completion", ""], ["bash"]),
    # Flag names, both spellings, those outside the setting table included.
    (["ccrun", "--max-r"], ["--max-restarts"]),
    (["ccrun", "--standalone", "--rdzv-e"], ["--rdzv-endpoint"]),
    (["ccrun", "--conf"], ["--config"]),
    # A free value, the program and its arguments: bash's default (files).
    (["ccrun", "--log-dir", ""], []),
    (["ccrun", "--nnodes", "2", "train.py", "--rdzv-e"], []),
    (["ccrun", "--rdzv-backend", "=", "c10d", "train.py", "--max-r"], []),
    (["ccrun", "--", "--max-r"], []),
    # `ccrun status` and its own flags; the first word may also be a program's path.
    (["ccrun", "sta"], ["status"]),
    (["ccrun", "status", "--rdzv-i"], ["--rdzv-id"]),
    (["ccrun", "status", "--rdzv_i"], ["--rdzv_id"]),
    (["ccrun", "status", "--j"], ["--json"]),
    (["ccrun", "status", "--rdzv-backend", ""], ["c10d", "etcd", "static"]),
    (["ccrun", "status", "--max-r"], []),
    (["ccrun", "--max-restarts", "1", "status", "--j"], []),  # a program named status
    # `ccrun top`, the same way.
    (["ccrun", "top"], ["top"]),
    (["ccrun", "top", "--on"], ["--once"]),
    (["ccrun", "top", "--int"], ["--interval"]),
    (["ccrun", "top", "--rdzv-backend", ""], ["c10d", "etcd", "static"]),
    # `ccrun report` and its own flags.
    (["ccrun", "rep"], ["report"]),
    (["ccrun", "report", "--o"], ["--output"]),
])
def test_completes(script, words, offered):
    assert bash_complete(script, words) == offered


def test_the_built_script_is_the_flag_tables(script):
    """The file the build makes (and the package installs) is what ccrun prints."""
    built = os.path.join(build_dir(), "packaging", "completions", "ccrun")
    if not os.path.exists(built):
        pytest.skip(f"skipped: {built} is not built (this build has no ccrun_completion target)")
    with open(built) as f, open(script) as g:
        assert f.read() == g.read()
