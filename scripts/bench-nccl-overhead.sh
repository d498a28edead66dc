#!/usr/bin/env bash
# The overhead of a ccrun all_reduce over the raw NCCL call at world size 1
# on one GPU (tests/tools/nccl_overhead_bench.cpp), float32 from 4 B to
# 64 MiB. Writes a Markdown table to stdout and, when it ran on a GPU, into
# docs/benchmarks.md between the bench-nccl-overhead markers. Without NCCL
# in the build or without a CUDA device it says so and exits 0.
#
#   scripts/bench-nccl-overhead.sh           # 4 B .. 64 MiB
#   scripts/bench-nccl-overhead.sh --smoke   # 4 B .. 1 KiB, for CI; writes no docs
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
max=$((64 << 20))
((smoke)) && max=1024
cmake --build "$build" --target nccl_overhead_bench >/dev/null

rc=0
"$build/tests/nccl_overhead_bench" "$max" >"$tmp/out" || rc=$?
if ((rc == 77)); then exit 0; fi  # it said why it skipped
((rc == 0)) || exit "$rc"

table=$(python3 - "$tmp/out" <<'PY'
import json, sys
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
print("| size | raw ncclAllReduce + sync us | ccrun nccl group all_reduce + wait us | overhead us "
      "| ccrun default group us | overhead us |")
print("|---|---|---|---|---|---|")
for r in map(json.loads, open(sys.argv[1])):
    print(f"| {size(r['bytes'])} | {r['raw_us']:.2f} | {r['ccrun_us']:.2f} | {r['overhead_us']:.2f} "
          f"| {r['auto_us']:.2f} | {r['auto_overhead_us']:.2f} |")
PY
)
echo "$table"
((smoke)) && exit 0
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
section="Measured by \`scripts/bench-nccl-overhead.sh\` on $(date -u +%Y-%m-%d), ${gpu:-a CUDA GPU}, world size 1:
one call then a wait, 1000 calls per size, best of 3 alternating rounds per side.

$table"
python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-nccl-overhead \
  "NCCL overhead" "$section"
