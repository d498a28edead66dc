#!/usr/bin/env bash
# What the workers' output costs the launcher (the console, --collapse-output,
# --log-dir), ccrun beside torchrun from Debian's python3-torch (1.13), in one
# run (scripts/bench_output.py says what each row measures). Writes a Markdown
# table to stdout and into docs/benchmarks.md between the bench-output markers.
#
#   scripts/bench-output.sh           # 10 s a job
#   scripts/bench-output.sh --smoke   # 2 s a job, for CI
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
cmake --build "$build" --target ccrun >/dev/null
exec "${CCRUN_TEST_PYTHON:-/usr/bin/python3}" "$here/scripts/bench_output.py" "$build" "$@"
