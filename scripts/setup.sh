#!/usr/bin/env bash
# Installs what ccrun needs to build and test on Debian 12 (as root, with
# apt-get), then configures and builds it into build/. Idempotent: a second
# run installs nothing and rebuilds only what changed.
#
#   scripts/setup.sh            # packages + build
#   BUILD_DIR=/tmp/b scripts/setup.sh
#
# Warnings are errors here (Debian 12's GCC is the supported toolchain), so
# scripts/demo.sh and scripts/test.sh configure build/ the same way and the
# second reuses the first's objects. CCRUN_WARNINGS_AS_ERRORS=OFF for another
# compiler; a plain `cmake` keeps CMake's default (OFF).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$here/build}

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev
  catch2 libgloo-dev
  python3-torch python3-pytest python3-numpy
  python3-dev  # the start-up hook's wrappers in C (agent/python/_ccrun_hook.c)
  iproute2 iputils-ping procps psmisc time
  etcd-server libssl-dev openssl
  clang libclang-rt-14-dev
  ccache etcd-server openssh-server
  elfutils  # eu-stack: every rank's native stack in a hang verdict
  strace  # scripts/bench-startup.sh counts the file-system calls of a start-up
  python3-matplotlib  # scripts/plot_bench.py: the benchmarks' figures in docs/
  python3-yaml  # tests/launcher/test_kubernetes.py reads the manifests of configs/k8s/
  faketime  # tests/integration/test_health_gate.py: a store host whose clock runs ahead
  tmux  # tests/integration/test_top.py drives `ccrun top` in a real terminal
  chromium  # tests/integration/test_report.py renders `ccrun report`'s page headless and reads its DOM
  # --mpi: tests/integration/test_mpi.py builds an MPI program with MPICH's mpicc and runs it
  # under ccrun's PMI-1 server; libpmix-dev for a PMIx server (Open MPI) beside it
  mpich libmpich-dev libpmix-dev
  libhwloc-dev  # --numa-binding reads the CPUs, caches, NUMA nodes and GPUs with hwloc
  # The Debian packages (tests/integration/test_package.py): help2man makes the man
  # pages at build time, file and dpkg-dev's dpkg-shlibdeps serve CPack's DEB generator,
  # lintian checks the packages, man-db reads the pages, systemd's systemd-analyze verifies
  # the ccrun-rendezvous unit (no running systemd needed).
  help2man file dpkg-dev lintian man-db systemd
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ccrun setup: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "ccrun setup: these Debian packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ccache: the plain and the sanitizer builds compile the same sources three
# times; a rebuild after a small change, or a second run, reuses the objects
# (also from another checkout of the same sources: paths relative to it).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$here} CCACHE_NOHASHDIR=1
cmake -S "$here" -B "$build_dir" -G Ninja \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCCRUN_WARNINGS_AS_ERRORS="${CCRUN_WARNINGS_AS_ERRORS:-ON}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
