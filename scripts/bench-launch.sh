#!/usr/bin/env bash
# Launch overhead and failure-to-restart latency of ccrun, side by side with
# torchrun from Debian's python3-torch (1.13, patched at run time by
# scripts/torchrun_patched.py for Python 3.11), in one run. Writes a Markdown
# table to stdout and into docs/benchmarks.md between the bench-launch markers.
#
#   scripts/bench-launch.sh           # nproc 1, 8, 32; 5 runs each
#   scripts/bench-launch.sh --smoke   # nproc 1, 1 run, for CI
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
python=${CCRUN_TEST_PYTHON:-/usr/bin/python3}
smoke=0
[[ ${1:-} == --smoke ]] && smoke=1
cmake --build "$build" --target ccrun >/dev/null
ccrun=$build/launcher/ccrun
torchrun=("$python" "$here/scripts/torchrun_patched.py")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ((smoke)); then sizes=(1); runs=1; else sizes=(1 8 32); runs=5; fi

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# median of numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

# Runs a launcher `runs` times; prints "median_wall_s max_rss_kib".
measure() {
  local walls=() rss=0
  for _ in $(seq "$runs"); do
    local t0 t1
    t0=$(date +%s%N)
    /usr/bin/time -f "%M" -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err" || {
      echo "bench-launch: failed: $*" >&2; cat "$tmp/err" >&2; exit 1; }
    t1=$(date +%s%N)
    wall=$(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.4f", (a - b) / 1e9}')
    read -r kib <"$tmp/time"
    walls+=("$wall")
    ((kib > rss)) && rss=$kib
  done
  printf '%s %s\n' "$(printf '%s\n' "${walls[@]}" | median)" "$rss"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.1f", a / b; else print "n/a" }'; }

table="| measurement | ccrun | torchrun (torch 1.13) | ratio |
|---|---|---|---|"
for n in "${sizes[@]}"; do
  read -r cw cr < <(measure "$ccrun" --nproc-per-node "$n" --master-port "$(free_port)" --no-python /bin/true)
  read -r tw tr < <(measure "${torchrun[@]}" --nproc_per_node "$n" --master_port "$(free_port)" --no_python /bin/true)
  table+=$'\n'"| launch /bin/true x $n: wall seconds (median of $runs) | $cw | $tw | $(ratio "$tw" "$cw")x faster |"
  table+=$'\n'"| launch /bin/true x $n: launcher peak RSS, KiB | $cr | $tr | $(ratio "$tr" "$cr")x less |"
done

# Failure to restart: rank 0 crashes in attempt 0 after writing the time;
# every worker of attempt 1 writes the time it starts.
crash_script='if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then if [ "$RANK" = 0 ]; then date +%s%N > "$OUT/crash"; exit 1; fi; sleep 30; else date +%s%N >> "$OUT/start"; fi'
restart_latency() {
  local out=$tmp/restart; rm -rf "$out"; mkdir -p "$out"
  OUT=$out "$@" /bin/sh -c "$crash_script" >/dev/null 2>&1 || true
  local crash first
  crash=$(cat "$out/crash"); first=$(sort -n "$out/start" | head -1)
  awk -v a="$first" -v b="$crash" 'BEGIN{printf "%.1f", (a - b) / 1e6}'
}
c_ms=$(restart_latency "$ccrun" --nproc-per-node 4 --max-restarts 1 --master-port "$(free_port)" --no-python)
t_ms=$(restart_latency "${torchrun[@]}" --nproc_per_node 4 --max_restarts 1 --master_port "$(free_port)" --no_python)
table+=$'\n'"| worker crash to restarted workers running, ms (4 workers, default monitor interval) | $c_ms | $t_ms | $(ratio "$t_ms" "$c_ms")x faster |"

echo "$table"
if ((!smoke)); then
  section="Measured by \`scripts/bench-launch.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores. Peak RSS is
/usr/bin/time's maximum resident set of the launcher's process tree member with the
largest RSS (the launcher itself: its workers are /bin/true).

$table"
  python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-launch Launch "$section"
fi
