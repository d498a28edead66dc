#!/usr/bin/env bash
# What watching for hangs costs and what a hang gets, ccrun beside torchrun
# from Debian's python3-torch (1.13), in one run (scripts/bench_hang.py says
# what each row measures). Writes a Markdown table to stdout and into
# docs/benchmarks.md between the bench-hang markers.
#
#   scripts/bench-hang.sh           # 20 s of CPU sampling, 1M calls x 5, callgrind
#   scripts/bench-hang.sh --smoke   # a few seconds, for CI
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
cmake --build "$build" --target ccrun collectives_dispatch_bench >/dev/null
exec "${CCRUN_TEST_PYTHON:-/usr/bin/python3}" "$here/scripts/bench_hang.py" "$build" "$@"
