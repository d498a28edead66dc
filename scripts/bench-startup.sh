#!/usr/bin/env bash
# Time to training: from launch, and from a crash, to every rank's first training step, for a
# 4-rank DDP job over gloo on CPU (examples/restart_demo.py) under ccrun cold, ccrun
# --warm-start and torchrun (torch 1.13, --monitor_interval 0.1), alternating in one run
# (scripts/bench_startup.py). Writes a Markdown table to stdout and, on a full run, into
# docs/benchmarks.md between the bench-startup markers.
#
#   scripts/bench-startup.sh           # medians of 3 runs each, and file-system calls (strace)
#   scripts/bench-startup.sh --smoke   # 1 run each, no strace: for CI
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
load=$(cut -d' ' -f1 /proc/loadavg)
cmake --build "$build" --target ccrun >/dev/null
args=(--ccrun "$build/launcher/ccrun" --python "$python"
      --torchrun "$python" "$here/scripts/torchrun_patched.py")
((smoke)) && args+=(--smoke)
table=$("$python" "$here/scripts/bench_startup.py" "${args[@]}")
echo "$table"
if ((!smoke)); then
  section="Measured by \`scripts/bench-startup.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores, load
average $load at the start. Each rank marks, in wall-clock time, when its script began, when
torch was imported, when init_process_group returned and when its first DDP step was done; a
phase is the slowest rank's time since the phase before (since the launch, or since the crash
mark of rank 1 for the first). The metadata calls are strace -f -c's count of opens and stats
of the whole process tree for one launch of the job to its third step.

$table"
  python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-startup \
    "Time to training" "$section"
fi
plot_section bench-startup "$table" $((!smoke))
