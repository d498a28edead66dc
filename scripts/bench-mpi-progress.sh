#!/usr/bin/env bash
# What libccrun_mpi_progress.so (the PMPI library --mpi workers get, docs/mpi.md)
# costs an 8-byte MPI_Allreduce between 2 ranks of one node
# (scripts/mpi_allreduce_bench.c, under MPICH's mpiexec): without the library,
# preloaded outside ccrun (no progress record: calls pass straight through),
# and preloaded with a record, as under ccrun --mpi. Rounds alternate between
# the three; each round's figure is the median batch of 1000 calls, and the
# table gives the median round. Writes a Markdown table to stdout and into
# docs/benchmarks.md between the bench-mpi-progress markers. Without mpicc or
# without the library in the build it says so and exits 0.
#
#   scripts/bench-mpi-progress.sh           # 9 rounds of 200 batches
#   scripts/bench-mpi-progress.sh --smoke   # 1 round of 5 batches, for CI; writes no docs
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
if ! command -v mpicc >/dev/null || ! command -v mpiexec >/dev/null; then
  echo "bench-mpi-progress: no mpicc/mpiexec (apt-get install mpich libmpich-dev): skipped"
  exit 0
fi
if ! cmake --build "$build" --target ccrun_mpi_progress >/dev/null 2>&1; then
  echo "bench-mpi-progress: this build has no ccrun_mpi_progress (configured without MPI): skipped"
  exit 0
fi
lib=$build/modules/libccrun_mpi_progress.so
rounds=9 batches=200
((smoke)) && rounds=1 batches=5
mpicc -O2 -o "$tmp/bench" "$here/scripts/mpi_allreduce_bench.c"

# run MODE: one round's median ns per call; MODE is plain, passthrough or recorded.
run() {
  cat >"$tmp/rank.sh" <<SH
#!/bin/sh
case $1 in
  plain) exec "$tmp/bench" $batches ;;
  passthrough) LD_PRELOAD=$lib exec "$tmp/bench" $batches ;;
  recorded) CCRUN_PROGRESS_FILE=$tmp/record.\$PMI_RANK LD_PRELOAD=$lib exec "$tmp/bench" $batches ;;
esac
SH
  chmod +x "$tmp/rank.sh"
  for r in 0 1; do  # a fresh record each round, as the agent makes one per worker
    python3 -c 'import struct,sys; b=bytearray(4096); struct.pack_into("<QII",b,0,0x3152505255524343,1,4096); open(sys.argv[1],"wb").write(b)' "$tmp/record.$r"
  done
  mpiexec -n 2 "$tmp/rank.sh" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["median_ns"])'
}

declare -A got=([plain]="" [passthrough]="" [recorded]="")
for ((i = 0; i < rounds; ++i)); do
  for mode in plain passthrough recorded; do got[$mode]+="$(run $mode) "; done
done
table=$(python3 - "${got[plain]}" "${got[passthrough]}" "${got[recorded]}" <<'PY'
import statistics, sys
plain, passthrough, recorded = ([float(x) for x in a.split()] for a in sys.argv[1:4])
base = statistics.median(plain)
print("| 8-byte MPI_Allreduce, 2 ranks | median ns per call | against without |")
print("|---|---|---|")
for name, xs in (("without the library", plain), ("preloaded, outside ccrun (no record)", passthrough),
                 ("preloaded, with a record (ccrun --mpi)", recorded)):
    m = statistics.median(xs)
    print(f"| {name} | {m:.0f} | {100 * (m - base) / base:+.1f}% |")
PY
)
echo "$table"
((smoke)) && exit 0
section="Measured by \`scripts/bench-mpi-progress.sh\` on $(date -u +%Y-%m-%d), MPICH $(mpichversion 2>/dev/null | awk '/Version/ {print $NF}'),
$(nproc) CPUs: $rounds alternating rounds of $batches batches of 1000 calls; each round's figure is its median batch.
The pass-through row costs a branch a call: its difference from the first row is the machine's noise.

$table"
python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-mpi-progress \
  "MPI progress library" "$section"
