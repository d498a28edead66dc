# ctest: LABELS package slow
"""The Debian packages (cmake/ccrunCPack.cmake): `cmake --build build --target
package` on the configured build, unpacked with dpkg -x into a temporary root,
then run from there: a 2-worker job, ccrun-rendezvous, the man pages, the bash
completion; lintian with no errors; the systemd unit through systemd-analyze."""
import glob
import os
import re
import shutil
import subprocess

import pytest

from helpers import bash_complete, build_dir


def tool(name, package):
    path = shutil.which(name)
    if not path:
        pytest.skip(f"skipped: {name} is not installed (apt-get install {package}; scripts/setup.sh)")
    return path


def control(deb, field):
    return subprocess.run(["dpkg-deb", "-f", deb, field], capture_output=True, text=True,
                          check=True).stdout.strip()


def built_with_nccl():
    with open(os.path.join(build_dir(), "collectives", "ccrun-collectives.pc")) as f:
        return "-lnccl" in f.read()


@pytest.fixture(scope="module")
def debs():
    """Every package of the build, by name. The build is already made: the
    package target installs and packs, it rebuilds nothing."""
    out = os.path.join(build_dir(), "packages")
    for old in glob.glob(os.path.join(out, "*.deb")):
        os.remove(old)
    r = subprocess.run(["cmake", "--build", build_dir(), "--target", "package"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return {control(d, "Package"): d for d in glob.glob(os.path.join(out, "*.deb"))}


@pytest.fixture(scope="module")
def root(debs, tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    for deb in debs.values():
        subprocess.run(["dpkg", "-x", deb, str(root)], check=True)
    return root


def test_packages_and_dependencies(debs, root):
    expected = {"ccrun", "ccrun-dev"} | ({"ccrun-nccl-dev"} if built_with_nccl() else set())
    assert set(debs) == expected
    # dpkg-shlibdeps found the runtime libraries' packages; nothing of CUDA.
    depends = control(debs["ccrun"], "Depends")
    for package in ("libc6", "libstdc++6", "libfmt", "libssl3", "libhwloc"):
        assert package in depends, depends
    # spdlog and yaml-cpp are compiled into the programs (logging/, and the
    # static yaml-cpp: a launch maps neither library); their notices are in
    # the copyright file.
    for package in ("libspdlog", "libyaml-cpp"):
        assert package not in depends, depends
    copyright = (root / "usr/share/doc/ccrun/copyright").read_text()
    assert "Upstream-Name: spdlog" in copyright and "Upstream-Name: yaml-cpp" in copyright
    for program in ("ccrun", "ccrun-rendezvous"):
        needed = subprocess.run(["readelf", "-d", str(root / "usr/bin" / program)],
                                capture_output=True, text=True, check=True).stdout
        assert "NEEDED" in needed and not re.search(r"libcuda|libnccl", needed), needed
        # Stripped: lintian's unstripped-binary-or-object is an error.
        assert ".debug_info" not in subprocess.run(
            ["readelf", "-S", str(root / "usr/bin" / program)], capture_output=True, text=True).stdout
    for deb in debs.values():
        assert control(deb, "Maintainer") and control(deb, "Section")


def test_a_job_runs_from_the_unpacked_root(root, tmp_path):
    ccrun = str(root / "usr/bin/ccrun")
    r = subprocess.run([ccrun, "--standalone", "--nproc-per-node", "2", "--no-python", "/bin/sh",
                        "-c", "echo rank=$RANK of $WORLD_SIZE path=$PYTHONPATH"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # The worker hook is the package's own (share/ccrun/python beside bin/), with its C
    # wrappers (architecture-dependent, under lib/) where they are built.
    hook = str(root / "usr/share/ccrun/python")
    native = glob.glob(str(root / "usr/lib/**/ccrun/python/_ccrun_hook*.so"), recursive=True)
    if native:
        hook += ":" + os.path.dirname(native[0])
        # Both builds, as the build tree has them: the system Python's, and the stable ABI's
        # that later Pythons load.
        built = glob.glob(os.path.join(build_dir(), "agent", "python", "_ccrun_hook*.so"))
        assert sorted(map(os.path.basename, native)) == sorted(map(os.path.basename, built))
    assert sorted(r.stdout.splitlines()) == [f"[0]:rank=0 of 2 path={hook}",
                                            f"[1]:rank=1 of 2 path={hook}"]
    r = subprocess.run([str(root / "usr/bin/ccrun-rendezvous"), "--help"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and "--token-file" in r.stdout
    daemon = subprocess.Popen([str(root / "usr/bin/ccrun-rendezvous"), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on 127.0.0.1:" in daemon.stdout.readline()
    finally:
        daemon.terminate()
        assert daemon.wait(10) == 0


def test_optional_modules_load_from_the_unpacked_root(root, tmp_path):
    # A plain job maps neither OpenSSL nor hwloc (base/module_loader.h); a
    # job that asks for NUMA binding loads the package's numa module, found
    # beside the unpacked program (CCRUN_MODULE_DIR points nowhere else).
    ccrun = str(root / "usr/bin/ccrun")
    needed = subprocess.run(["ldd", ccrun], capture_output=True, text=True).stdout
    assert "libssl" not in needed and "libcrypto" not in needed and "libhwloc" not in needed
    topology = os.path.join(os.path.dirname(__file__), "..", "agent", "data", "two_cpus_2_gpus.xml")
    r = subprocess.run([ccrun, "--standalone", "--nproc-per-node", "1", "--numa-binding", "node",
                        "--no-python", "/bin/true"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=dict(os.environ, HWLOC_XMLFILE=topology,
                                              CCRUN_MODULE_DIR=str(tmp_path / "none")))
    assert r.returncode == 0, r.stderr
    assert "--numa-binding node: local rank 0 on CPUs" in r.stderr


@pytest.mark.parametrize("program,words", [
    ("ccrun", ["SYNOPSIS", "--rdzv-backend", "PET_<FLAG>", "ccrun-rendezvous(1)"]),
    ("ccrun-rendezvous", ["--token-file", "RUNNING AS A SERVICE", "systemctl enable"]),
])
def test_man_pages(root, program, words):
    man = tool("man", "man-db")
    tool("help2man", "help2man")  # without it the build makes no man pages (it says so)
    page = root / "usr/share/man/man1" / f"{program}.1.gz"
    r = subprocess.run([man, "-l", str(page)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "100"})
    assert r.returncode == 0, r.stderr
    text = re.sub(r".\x08", "", r.stdout)  # overstrike bold
    for w in words:
        assert w in text, w


def built_man_page(program):
    """The man page the build made (packaging/), as `man -l` renders it."""
    man = tool("man", "man-db")
    tool("help2man", "help2man")
    page = os.path.join(build_dir(), "packaging", f"{program}.1.gz")
    if not os.path.exists(page):
        pytest.skip(f"skipped: {page} is not built")
    r = subprocess.run([man, "-l", page], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "200"})
    assert r.returncode == 0, r.stderr
    return [line.strip() for line in re.sub(r".\x08", "", r.stdout).split("\n")]


def help_text(program):
    return subprocess.run([os.path.join(build_dir(), *program), "--help"], capture_output=True,
                          text=True, timeout=30, check=True).stdout


@pytest.mark.parametrize("program", [("launcher", "ccrun"), ("store", "ccrun-rendezvous")])
def test_man_page_options_have_their_names_alone_on_the_tag_line(program):
    """help2man ends an option's names at two spaces; one space put the
    text on the tag line (--virtual-local-rank, --rdzv-backend)."""
    page = built_man_page(program[1])
    for line in help_text(program).split("\n"):
        if re.match(r"^  -", line):
            names = line.strip().split("  ")[0]
            # A tag shorter than the indent (--mpi) has its text beside it,
            # past the indent: two spaces or more, never one.
            alone = names in page or any(l.startswith(names + "  ") for l in page)
            assert alone, f"{names!r} is not alone on its line in man {program[1]}"


def test_man_page_examples_are_the_helps_as_written():
    page = built_man_page("ccrun")
    examples = help_text(("launcher", "ccrun")).split("Examples:\n")[1].split("\n")
    commands = [e.strip() for e in examples if e.startswith("  ")]
    assert len(commands) >= 6
    section = page[page.index("EXAMPLES"):page.index("SEE ALSO")]
    for c in commands:
        assert c in section, f"{c!r} is not a line of man ccrun's EXAMPLES"


def test_bash_completion(root):
    script = str(root / "usr/share/bash-completion/completions/ccrun")
    assert bash_complete(script, ["ccrun", "--rdzv-backend", ""]) == ["c10d", "etcd", "static"]


def test_lintian_finds_no_errors(debs, tmp_path):
    lintian = tool("lintian", "lintian")
    # Its temporary files in the test's folder: lintian leaves some (mldbm-elf-*) in TMPDIR.
    r = subprocess.run([lintian, "--fail-on", "error", *debs.values()], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r"^E: ", r.stdout, re.M), r.stdout


def test_systemd_unit_verifies_and_is_hardened(root, tmp_path):
    analyze = tool("systemd-analyze", "systemd")
    unit = (root / "usr/lib/systemd/system/ccrun-rendezvous.service").read_text()
    # The unit names the program on systemd's search path; verify needs it
    # to exist, so the copy checked names the unpacked one.
    assert re.search(r"^ExecStart=ccrun-rendezvous ", unit, re.M)
    copy = tmp_path / "ccrun-rendezvous.service"
    copy.write_text(unit.replace("ExecStart=ccrun-rendezvous ",
                                 f"ExecStart={root}/usr/bin/ccrun-rendezvous "))
    env = {**os.environ, "MANPATH": str(root / "usr/share/man")}  # Documentation=man:...
    r = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                       timeout=60, env=env)
    # A misspelt key is only a warning: any output fails the test.
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
    for setting in ("DynamicUser=yes", "NoNewPrivileges=yes", "StateDirectory=ccrun-rendezvous",
                    "Restart=on-failure", "LoadCredential=token:"):
        assert re.search(rf"^{setting}", unit, re.M), setting
    # Exposure 1.4 when written ("OK"); --threshold is in tenths.
    r = subprocess.run([analyze, "security", "--offline=yes", "--threshold=20", str(copy)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr


CONSUMER = """cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
find_package(ccrun CONFIG REQUIRED)
if(NOT TARGET ccrun::store OR NOT TARGET ccrun::rendezvous)
  message(FATAL_ERROR "ccrun's targets are missing")
endif()
find_package(ccrun CONFIG REQUIRED COMPONENTS collectives)
"""


def test_dev_package_alone_is_a_cmake_package(debs, tmp_path):
    """ccrun-dev alone: find_package(ccrun) gives the store's and rendezvous'
    targets; the collectives come with it, or, in builds with NCCL, with
    ccrun-nccl-dev (asking for them without it says which package)."""
    root = tmp_path / "root"
    subprocess.run(["dpkg", "-x", debs["ccrun-dev"], str(root)], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(CONSUMER)
    r = subprocess.run(["cmake", "-S", str(tmp_path / "src"), "-B", str(tmp_path / "b"),
                        f"-DCMAKE_PREFIX_PATH={root}/usr"], capture_output=True, text=True,
                       timeout=120)
    if built_with_nccl():
        assert r.returncode != 0 and "ccrun-nccl-dev has it" in r.stderr, r.stderr
        assert "ccrun's targets are missing" not in r.stderr
    else:
        assert r.returncode == 0, r.stdout + r.stderr


def test_pkg_config_file_is_relocatable(root):
    """ccrun-collectives.pc finds the prefix from its own place (${pcfiledir})."""
    pkg_config = tool("pkg-config", "pkg-config")
    r = subprocess.run([pkg_config, "--cflags", "--libs", "ccrun-collectives"], capture_output=True,
                       text=True, timeout=30,
                       env={**os.environ, "PKG_CONFIG_PATH": str(root / "usr/lib/pkgconfig")})
    assert r.returncode == 0, r.stderr
    flags = [f[:2] + os.path.normpath(f[2:]) if f[:2] in ("-I", "-L") else f for f in r.stdout.split()]
    assert f"-I{root}/usr/include" in flags and f"-L{root}/usr/lib" in flags, flags
    assert "-lccrun_collectives" in flags and ("-lnccl" in flags) == built_with_nccl()
