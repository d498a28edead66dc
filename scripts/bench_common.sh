# Sourced by the bench-*.sh scripts, with the script's arguments:
#   source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"
# Sets here (the source tree), build (BUILD_DIR, else build/), python
# (CCRUN_TEST_PYTHON, else Debian's python3 with torch 1.13), smoke (1 when
# the first argument is --smoke: the CI run) and tmp (below). Not named bench-*.sh, so
# scripts/test.sh does not run it as a benchmark.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
python=${CCRUN_TEST_PYTHON:-/usr/bin/python3}
smoke=0
# An if, not `[[ ]] && smoke=1`: a sourced file's last status is source's,
# and a false one would end a `set -e` caller.
if [[ ${1:-} == --smoke ]]; then smoke=1; fi

# tmp: the run's folder, and TMPDIR for everything it starts (torchrun leaves its torchelastic_*
# folders behind, and a bench kills launchers mid-job), removed at exit (a script that sets an
# EXIT trap of its own removes "$tmp" in it).
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ccrun-bench-XXXXXX")
export TMPDIR=$tmp
trap 'rm -rf "$tmp"' EXIT

# plot_section NAME TABLE WRITTEN: draws NAME's figure with scripts/plot_bench.py (Debian's
# python3-matplotlib). WRITTEN=1: the script has just written NAME's section of
# docs/benchmarks.md, and docs/NAME.png is drawn from that section (the image the doc shows above
# the table). WRITTEN=0 (--smoke, or a table the doc does not keep): TABLE, the markdown the script
# printed, is drawn into a temporary file, so the plotting is exercised and docs/ stays as it is.
plot_section() {
  local name=$1 table=$2 written=$3
  if ((written)); then
    /usr/bin/python3 "$here/scripts/plot_bench.py" "$name" "$here/docs/benchmarks.md" "$here/docs/$name.png"
  else
    local dir
    dir=$(mktemp -d)
    printf '%s\n' "$table" >"$dir/table.md"
    /usr/bin/python3 "$here/scripts/plot_bench.py" "$name" "$dir/table.md" "$dir/$name.png" &&
      echo "$name: plot drawn from the table above (not kept: docs/ is written by full runs only)"
    local rc=$?
    rm -rf "$dir"
    return $rc
  fi
}
