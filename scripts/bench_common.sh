# Sourced by the bench-*.sh scripts, with the script's arguments:
#   source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"
# Sets here (the source tree), build (BUILD_DIR, else build/), python
# (CCRUN_TEST_PYTHON, else Debian's python3 with torch 1.13) and smoke (1 when
# the first argument is --smoke: the CI run). Not named bench-*.sh, so
# scripts/test.sh does not run it as a benchmark.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
python=${CCRUN_TEST_PYTHON:-/usr/bin/python3}
smoke=0
# An if, not `[[ ]] && smoke=1`: a sourced file's last status is source's,
# and a false one would end a `set -e` caller.
if [[ ${1:-} == --smoke ]]; then smoke=1; fi
