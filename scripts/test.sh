#!/usr/bin/env bash
# Runs every ccrun test: builds first (scripts/setup.sh, which installs what
# is missing), then ctest (Catch2 unit tests and the Python tests that drive
# the real binaries), then the benchmarks' smallest size as a smoke test,
# then the sanitizer builds and their tests (scripts/test-sanitizers.sh;
# CCRUN_SANITIZERS=0 skips them). Exits non-zero on any failure. The soak
# tests (label soak) are registered for `ctest -C soak` only, so they are not
# run here; README.md shows how to run them and each other label.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -R rendezvous   # extra arguments go to ctest
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$here/build}
export BUILD_DIR=$build_dir

"$here/scripts/setup.sh"  # warnings are errors, as for scripts/demo.sh

cd "$build_dir"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"

if (($# == 0)); then
  for bench in "$here"/scripts/bench-*.sh; do
    [[ -x $bench ]] || continue
    echo "== smoke: $(basename "$bench") --smoke"
    "$bench" --smoke
  done
  if [[ ${CCRUN_SANITIZERS:-1} != 0 ]]; then
    "$here/scripts/test-sanitizers.sh"
  else
    echo "== sanitizers: skipped (CCRUN_SANITIZERS=0)"
  fi
fi
