#!/usr/bin/env bash
# ccrun's collectives (Gloo backend) against torch.distributed's gloo backend
# (python3-torch 1.13), both launched by ccrun, in one run: all_reduce,
# all_gather, reduce_scatter and broadcast of float32 from 4 B to 64 MiB on
# 2 and 4 ranks. Algorithm and bus bandwidth as nccl-tests defines them.
# Ranks share the machine's cores, so timings swing with scheduling: each
# call is timed alone and a run reports the median call; the two sides
# alternate for ROUNDS rounds (default 3) and each (op, size) keeps its best
# round, for both sides alike.
#
#   scripts/bench-collectives.sh          # 4 B .. 64 MiB, 2 and 4 ranks
#   scripts/bench-collectives.sh --smoke  # 4 B .. 1 KiB, 2 ranks, one round, for CI
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh" "$@"  # here, build, python, smoke
cmake --build "$build" --target ccrun collectives_bench >/dev/null
rounds=${ROUNDS:-3}
if ((smoke)); then ranks=(2); max=1024; rounds=1; else ranks=(2 4); max=$((64 << 20)); fi

for ((r = 0; r < rounds; ++r)); do
  for n in "${ranks[@]}"; do
    "$build/launcher/ccrun" --standalone --nproc-per-node "$n" --no-python \
      "$build/tests/collectives_bench" "$max" 2>"$tmp/err" | sed 's/^\[0\]://' >>"$tmp/ccrun-$n" ||
      { cat "$tmp/err" >&2; exit 1; }
    PYTHON_EXEC=$python "$build/launcher/ccrun" --standalone --nproc-per-node "$n" \
      "$here/scripts/torch_collectives_bench.py" "$max" 2>"$tmp/err" | sed 's/^\[0\]://' >>"$tmp/torch-$n" ||
      { cat "$tmp/err" >&2; exit 1; }
  done
done

table=$(python3 - "$tmp" "${ranks[@]}" <<'PY'
import json, sys
tmp, ranks = sys.argv[1], [int(r) for r in sys.argv[2:]]
factor = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
def load(path):  # best round per (op, size): (median us, that round's mean us)
    best = {}
    for r in map(json.loads, open(path)):
        k = (r["op"], r["bytes"])
        if r["us"] is not None and (k not in best or r["us"] < best[k][0]):
            best[k] = (r["us"], r["mean_us"])
    return best
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
print("| op | ranks | size | ccrun us (mean) | ccrun algbw GB/s | ccrun busbw GB/s | torch gloo us (mean) | torch busbw GB/s | ccrun / torch speed |")
print("|---|---|---|---|---|---|---|---|---|")
for n in ranks:
    c, t = load(f"{tmp}/ccrun-{n}"), load(f"{tmp}/torch-{n}")
    for (op, b), (us, mean) in sorted(c.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        alg = b / us / 1e3
        bus = alg * factor[op](n)
        if (op, b) in t:
            tu, tmean = t[(op, b)]
            tb = b / tu / 1e3 * factor[op](n)
            print(f"| {op} | {n} | {size(b)} | {us:.1f} ({mean:.1f}) | {alg:.3f} | {bus:.3f} | {tu:.1f} ({tmean:.1f}) | {tb:.3f} | {tu / us:.2f}x |")
        else:
            print(f"| {op} | {n} | {size(b)} | {us:.1f} ({mean:.1f}) | {alg:.3f} | {bus:.3f} | n/a (not in 1.13's gloo) | | |")
PY
)
echo "$table"
if ((!smoke)); then
  section="Measured by \`scripts/bench-collectives.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores (all ranks on
this machine, loopback TCP). float32; time is the median call (each call timed alone) in the best of
$rounds alternating rounds per side; bus bandwidth as nccl-tests defines it, from that time.

$table"
  python3 "$here/scripts/write_bench_section.py" "$here/docs/benchmarks.md" bench-collectives Collectives "$section"
fi
plot_section bench-collectives "$table" $((!smoke))
