"""scripts/gpu-check.sh where there is no GPU: it says "skipped: no GPU" and
exits 0 without building or running anything (CI runs this), and, told a GPU
is there when CUDA sees none, it fails loudly instead of passing on skipped
NCCL tests."""
import os
import shutil
import subprocess

import helpers

SOURCE = os.environ.get("CCRUN_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(SOURCE, "scripts", "gpu-check.sh")


def run(env, *args):
    return subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=300)


def test_no_gpu_visible_skips_with_rc_0():
    r = run(dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("gpu-check: skipped: no GPU"), r.stdout
    assert r.stdout.count("\n") == 1, r.stdout  # nothing built, nothing run
    assert r.stderr == ""


def test_no_driver_skips_with_rc_0(tmp_path):
    # A PATH with the few tools the skip path uses, and no nvidia-smi.
    for tool in ("bash", "env", "grep", "tr"):
        os.symlink(shutil.which(tool), tmp_path / tool)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = str(tmp_path)
    r = run(env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "gpu-check: skipped: no GPU (no nvidia-smi, so no NVIDIA driver)\n"


def test_unknown_option_is_an_error():
    r = run(dict(os.environ, CUDA_VISIBLE_DEVICES=""), "--fast")
    assert r.returncode == 2
    assert "unknown option --fast" in r.stderr


def test_a_gpu_that_cuda_cannot_use_fails_the_check(tmp_path):
    # nvidia-smi (a stand-in) lists a GPU, but CUDA_VISIBLE_DEVICES names a
    # device that does not exist: the real NCCL tests skip, and that must
    # fail the check, not pass it.
    helpers.binary("tests", "ccrun_collectives_tests")  # skips, saying why, when not built
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text('#!/bin/sh\ncase "$1" in -L) echo "GPU 0: Stand-in (UUID: GPU-0)";; '
                   '*) echo Stand-in;; esac\n')
    smi.chmod(0o755)
    bundle = tmp_path / "bundle"
    (bundle / "bin").mkdir(parents=True)
    (bundle / "lib").mkdir()
    build = helpers.build_dir()
    for name, path in [("ccrun", ("launcher", "ccrun")), ("ccrun_collectives_tests", ("tests", "ccrun_collectives_tests")),
                       ("nccl_overhead_bench", ("tests", "nccl_overhead_bench")),
                       ("train_linreg_cuda", ("examples", "train_linreg_cuda"))]:
        src = os.path.join(build, *path)
        if os.path.exists(src):
            os.symlink(src, bundle / "bin" / name)
    env = dict(os.environ, PATH=f"{smi.parent}:{os.environ['PATH']}", CUDA_VISIBLE_DEVICES="99",
               CCRUN_GPU_BUNDLE=str(bundle), GPU_CHECK_LOGS=str(tmp_path / "logs"))
    r = run(env, "--quick")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "gpu-check: FAILED" in r.stdout
    assert "| step | result | seconds | note |" in r.stdout
    if all(os.path.exists(bundle / "bin" / n) for n in ("ccrun", "nccl_overhead_bench", "train_linreg_cuda")):
        assert "| NCCL tests (real) | FAIL |" in r.stdout, r.stdout
        assert "skipped on a GPU machine" in r.stdout
        assert "| NCCL path tests (fake NCCL) | PASS |" in r.stdout, r.stdout
    else:
        assert "| binaries | FAIL |" in r.stdout, r.stdout
